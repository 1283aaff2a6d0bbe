package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/train"
)

// crossValidate runs -v (one C) or -C (a search over C) on the loaded
// shards and prints LIBLINEAR's lines, so scripts that read its output
// read ours.
func crossValidate(o *options, be *built, cfg train.Config, log *zap.Logger, out io.Writer) error {
	start := time.Now()
	cfg.Started = nil // a line for each fold and C would drown the log
	b := be.Backend
	if be.local != nil {
		// The shards are in this process (the embedded workers' too):
		// the many short trainings of -v and -C run on them here, to the
		// same bits, as a round on the bus costs more than a small
		// file's pass (-C for -s 11 on housing: 29,000 rounds).
		b = be.local
	}
	if rows := shard.Rows(b.Meta()); o.folds > rows {
		// LIBLINEAR's warning, in words: its -v and -C do the same.
		log.Warn("more folds than rows: leave-one-out cross-validation", zap.Int("folds", o.folds), zap.Int("rows", rows))
	}
	if !o.findC {
		cv, err := train.CrossValidate(b, cfg, o.folds, nil)
		if err != nil {
			return cvError(o, err)
		}
		rows, correct := cv.Tally.Total()
		log.Info("cross-validated", zap.Int("folds", cv.Folds), zap.Float64("c", cfg.C), zap.Int("correct", correct),
			zap.Int("rows", rows), zap.Int("passes", cv.Passes), zap.Duration("took", time.Since(start)))
		if cfg.Loss.Regression() {
			fmt.Fprintf(out, "Cross Validation Mean squared error = %.6g\nCross Validation Squared correlation coefficient = %.6g\n",
				cv.Tally.MSE(), cv.Tally.SCC())
			return nil
		}
		fmt.Fprintf(out, "Cross Validation Accuracy = %.6g%%\n", 100*cv.Accuracy())
		return nil
	}
	// As LIBLINEAR's: -q leaves the first and last lines only.
	fmt.Fprintf(out, "Doing parameter search with %d-fold cross validation.\n", o.folds)
	if cfg.Loss.Regression() {
		return searchCP(o, b, cfg, log, out, start)
	}
	first := o.cfg.C
	if !o.set["c"] {
		first = train.StartC(b.Meta(), cfg.Bias, cfg.Loss, 0)
	}
	best, maxReached, err := train.SearchC(b, cfg, o.folds, min(first, train.MaxSearchC), train.MaxSearchC, func(cv *train.CV) {
		log.Info("cross-validated", zap.Float64("c", cv.C), zap.Float64("accuracy", cv.Accuracy()),
			zap.Int("passes", cv.Passes), zap.Bool("unchanged", cv.Unchanged))
		if !o.quiet {
			fmt.Fprintf(out, "log2c=%7.2f\trate=%.6g\n", math.Log2(cv.C), 100*cv.Accuracy())
		}
	})
	if err != nil {
		return cvError(o, err)
	}
	if maxReached && !o.quiet {
		fmt.Fprintln(out, "warning: maximum C reached.")
	}
	fmt.Fprintf(out, "Best C = %.6g  CV accuracy = %.6g%%\n", best.C, 100*best.Accuracy())
	log.Info("search done", zap.Float64("best_c", best.C), zap.Duration("took", time.Since(start)))
	return nil
}

// searchCP is -C for -s 11: LIBLINEAR 2.30 searches p and C together.
// A -c or -p given is where the search starts.
func searchCP(o *options, b objective.Backend, cfg train.Config, log *zap.Logger, out io.Writer, start time.Time) error {
	startC, startP := 0.0, 0.0
	if o.set["c"] {
		startC = o.cfg.C
	}
	if o.set["p"] {
		startP = o.cfg.Epsilon
	}
	best, err := train.SearchCP(b, cfg, o.folds, startC, startP, func(cv *train.CV) {
		log.Info("cross-validated", zap.Float64("c", cv.C), zap.Float64("p", cv.P), zap.Float64("mse", cv.Tally.MSE()),
			zap.Int("passes", cv.Passes), zap.Bool("unchanged", cv.Unchanged))
		if !o.quiet {
			fmt.Fprintf(out, "log2c=%7.2f\tp=%7.2f\tMean squared error=%.6g\n", math.Log2(cv.C), cv.P, cv.Tally.MSE())
		}
	}, func(float64) {
		if !o.quiet {
			fmt.Fprintln(out, "warning: maximum C reached.")
		}
	})
	if err != nil {
		return cvError(o, err)
	}
	fmt.Fprintf(out, "Best C = %.6g Best p = %.6g  CV MSE = %.6g\n", best.C, best.P, best.Tally.MSE())
	log.Info("search done", zap.Float64("best_c", best.C), zap.Float64("best_p", best.P), zap.Duration("took", time.Since(start)))
	return nil
}

// cvError names the data a cross-validation failed on; an interrupted one
// says so plainly, since it keeps nothing to resume from.
func cvError(o *options, err error) error {
	if errors.Is(err, osgm.ErrInterrupted) {
		return errors.New("interrupted; cross-validation keeps no state: run it again to finish")
	}
	return fmt.Errorf("%s: %w", o.train, err)
}
