// The run's outputs: the model, the -t accuracy, the trained line and
// its split of the time, and what a failed or short run says.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/s3"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/train"
	"github.com/osgm-svm/osgm/pkg/transport/cluster"
)

// finish says what the training did and, with -t, tests the model; it
// returns where the model went (none with -compare) and its accuracy.
func finish(o *options, log *zap.Logger, res *train.Result, fields []zap.Field) (model, accuracy string, err error) {
	log.Info("trained", append(fields, zap.String("model", o.model))...)
	warnShort(log, res.Opt, o.cfg.MaxIter)
	if o.compare == nil {
		model = o.model
	}
	if o.test == "" {
		return model, "", nil
	}
	if err := res.Full(); err != nil { // the test predicts with every weight
		return model, "", fmt.Errorf("model %s: %w", o.model, err)
	}
	accuracy, err = printAccuracy(o.test, res.Model)
	return model, accuracy, err
}

// logLoaded says what the shards hold, once they are loaded.
func logLoaded(log *zap.Logger, file string, b objective.Backend, loss shard.Loss, shards int, took time.Duration) {
	sum := shard.Summarize(b.Meta(), loss)
	fields := []zap.Field{zap.String("file", file), zap.Int("rows", sum.Rows), zap.Int("nnz", sum.NNZ),
		zap.Uint32("features", sum.MaxIndex), zap.Int("shards", shards), zap.Duration("took", took)}
	if !loss.Regression() {
		fields = append(fields, zap.Int("classes", len(sum.Labels)))
	}
	log.Info("loaded", fields...)
}

// save writes the model and, for one training, its convergence plot.
func save(o *options, res *train.Result, single *curve) error {
	if err := writeModel(o.model, res.Model, res.Weights); err != nil {
		return err
	}
	if o.plot != "" && o.compare == nil {
		return plotRun(o.plot, o.cfg.Method, single)
	}
	return nil
}

// printAccuracy prints the model's accuracy on the test file, as
// liblinear-predict does, and fails on rows whose labels it cannot have.
func printAccuracy(test string, m *libsvm.Model) (string, error) {
	acc, err := testAccuracy(test, m)
	if err != nil {
		return "", err
	}
	fmt.Println(acc)
	if acc.Unknown > 0 {
		return acc.String(), fmt.Errorf("%s: %d of %d rows have labels the training file does not have (model labels %v): wrong test file?",
			test, acc.Unknown, acc.Total, m.Labels)
	}
	return acc.String(), nil
}

// trainingFailed is the error a failed training ends with, saying what
// to do next where there is something to do: saved says whether the
// checkpoint holds the state.
func trainingFailed(o *options, err error, saved bool) error {
	switch {
	case errors.Is(err, osgm.ErrInterrupted) && saved:
		return fmt.Errorf("interrupted; the state is in %s: continue with the same flags and -resume", o.checkpoint)
	case errors.Is(err, osgm.ErrInterrupted) && o.checkpoint != "":
		return fmt.Errorf("interrupted before a checkpoint was written: %w", err)
	case errors.Is(err, osgm.ErrInterrupted):
		return errors.New("interrupted")
	case errors.Is(err, cluster.ErrNoWorkers) && saved:
		return fmt.Errorf("%w; the state is in %s: continue with the same flags and -resume once workers run", err, o.checkpoint)
	case errors.Is(err, train.ErrMismatch):
		return fmt.Errorf("%s: %w; remove %s to train from the start", o.train, err, o.checkpoint)
	}
	return fmt.Errorf("%s: %w", o.train, err)
}

// timeSplit is where training's time went.
type timeSplit struct{ compute, comm, method time.Duration }

// splitTime splits training's time: time in passes is the workers'
// compute plus the bus (passes in this process, the embedded workers'
// too, are compute only); the rest of training is the method's own
// arithmetic on the coordinator.
func splitTime(res *train.Result, backend *built, busBefore cluster.Stats, trainTime time.Duration) timeSplit {
	compute, comm := res.PassTime, time.Duration(0)
	if backend.cluster != nil && backend.local == nil {
		bus := res.PassTime - res.SideTime
		compute = min(backend.cluster.Stats().Compute-busBefore.Compute, bus)
		comm = bus - compute
		compute += res.SideTime
	}
	return timeSplit{compute: compute, comm: comm, method: trainTime - res.PassTime}
}

// trainedFields are the "trained" log line's: the outcome, and where the
// time went.
func trainedFields(res *train.Result, backend *built, split timeSplit, loaded, firstGradient, trainTime time.Duration) []zap.Field {
	conv := 0
	for _, c := range res.Opt.Converged {
		if c {
			conv++
		}
	}
	fields := []zap.Field{zap.String("method", res.Method), zap.Float64("lambda", res.Lambda),
		zap.Int("iterations", maxInt(res.Opt.Iters)), zap.Int("passes", res.Opt.Evals),
		zap.Float64s("objective", res.Primal), zap.Int("converged", conv), zap.Int("problems", len(res.Primal)),
		zap.Duration("load", loaded), zap.Duration("first_gradient", firstGradient), zap.Duration("train", trainTime),
		zap.Duration("compute", split.compute), zap.Duration("communication", split.comm), zap.Duration("method_time", split.method)}
	if res.Batch > 0 {
		fields = append(fields, zap.Int("problems_at_a_time", res.Batch))
	}
	// The tally predicts with every problem's weights at once, on every
	// worker: only where the problems' state went at once too, not where
	// the batches kept the state within the data's size.
	if res.Batch == 0 && !res.Model.Regression() && res.Full() == nil {
		if t, err := backend.Backend.Tally(res.Obj.ModelPoint(res.Model.W)); err == nil {
			rows, correct := t.Total()
			fields = append(fields, zap.Float64("train_accuracy", float64(correct)/float64(rows)))
		}
	}
	return fields
}

func maxInt(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// writeModel writes atomically: a reader never sees half a model, in a
// file or at an s3:// URL.
func writeModel(path string, m *libsvm.Model, ws libsvm.Weights) error {
	write := func(w io.Writer) error { return m.WriteWeights(w, ws) }
	if s3.IsURL(path) {
		return s3.Put(context.Background(), path, write)
	}
	if err := writeAtomic(path, write); err != nil {
		return fmt.Errorf("model %s: %w", path, err)
	}
	return nil
}

func testAccuracy(path string, m *libsvm.Model) (libsvm.Accuracy, error) {
	if s3.IsURL(path) { // read whole, in one GET
		o, err := s3.Open(context.Background(), path)
		if err != nil {
			return libsvm.Accuracy{}, err
		}
		r := o.Reader(context.Background())
		defer r.Close()
		return libsvm.PredictAll(r, path, m, nil)
	}
	f, err := libsvm.Open(path)
	if err != nil {
		return libsvm.Accuracy{}, err
	}
	defer f.Close()
	return libsvm.PredictAll(f, path, m, nil)
}

// warnShort says which problems stopped before reaching -e, and why:
// -max-iter, or a tolerance finer than double precision resolves (a
// method stops once its steps no longer change the objective, as
// LIBLINEAR does with "actred and prered too small").
func warnShort(log *zap.Logger, opt *osgm.Result, maxIter int) {
	var limit, precision []int
	for k, stop := range opt.Stop {
		switch stop {
		case osgm.MaxIter:
			limit = append(limit, k)
		case osgm.Stalled:
			precision = append(precision, k)
		}
	}
	if len(limit) > 0 {
		log.Warn("stopped at -max-iter before reaching -e; the model is the best point seen",
			zap.Int("max_iter", maxIter), zap.Ints("problems", limit))
	}
	if len(precision) > 0 {
		log.Warn("stopped before reaching -e: steps no longer change the objective at double precision, so -e asks for more than it can resolve; the model is the best point seen",
			zap.Ints("problems", precision))
	}
}
