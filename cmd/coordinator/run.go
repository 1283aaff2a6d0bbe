package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/logging"
	"github.com/osgm-svm/osgm/pkg/metrics"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/train"
	"github.com/osgm-svm/osgm/pkg/transport"
)

func run(o *options) error {
	shard.TuneGC()
	log := logging.New(o.quiet)
	defer log.Sync()
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	if err := checkOutputs(o); err != nil {
		return err
	}
	// The initial model and the test file are looked at before any data
	// is read: a typo must not cost a load, or a training.
	var init *libsvm.Model
	if o.initModel != "" {
		var err error
		if init, err = readModel(o.initModel); err != nil {
			return fmt.Errorf("-i: %w", err)
		}
		if err := train.CheckBias(init, o.bias); err != nil {
			return fmt.Errorf("-i %s: %w", o.initModel, err)
		}
	}
	if o.test != "" {
		f, err := libsvm.Open(o.test)
		if err != nil {
			return fmt.Errorf("-t: %w", err)
		}
		f.Close()
	}

	info, release, err := statAndHold(o)
	if err != nil {
		return err
	}
	defer release()
	ranges := shard.Layout(info.Size, o.shards)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	backend, nc, closeBackend, err := openBackend(ctx, o, ranges, log)
	release() // the shards are loaded
	if err != nil {
		if ctx.Err() != nil { // whatever failed, the signal came first
			return fmt.Errorf("interrupted before training began (%w)", err)
		}
		return err
	}
	defer closeBackend()
	loaded := time.Since(start)
	sum := train.Summarize(backend.Meta())
	log.Info("loaded", zap.String("file", o.train), zap.Int("rows", sum.Rows), zap.Int("nnz", sum.NNZ),
		zap.Uint32("features", sum.MaxIndex), zap.Int("classes", len(sum.Labels)), zap.Int("shards", len(ranges)),
		zap.Duration("took", loaded))

	// The memory left now that the shards are loaded (under a
	// container's limit too) bounds the problems the methods hold at once.
	cfg := train.Config{MaxBytes: max(shard.Available(), 0), C: o.c, Lambda: o.lambda, Eps: o.eps, Bias: o.bias, Method: o.method, MaxIter: o.maxIter,
		Params: osgm.Params{Eta: o.eta, EtaScale: o.etaScale, EtaBeta: o.etaBeta, NoDiag: o.noDiag}, Weights: o.weights}
	cfg.Init = init
	var trace *bufio.Writer
	if o.trace != "" {
		f, err := os.Create(o.trace)
		if err != nil {
			return err
		}
		defer f.Close()
		trace = bufio.NewWriter(f)
		defer trace.Flush()
		fmt.Fprintln(trace, "problem,iter,evals,f,grad_norm,accepted,seconds")
	}
	var alive func() int
	if c, ok := backend.(interface{ Live() int }); ok {
		alive = c.Live
	}
	prog := newProgress(log, alive)
	if o.metricsAddr != "" {
		prog.metrics = metrics.NewCoordinator()
		addr, stop, err := metrics.Serve(o.metricsAddr, prog.metrics.Registry)
		if err != nil {
			return fmt.Errorf("-metrics-addr: %w", err)
		}
		defer stop()
		log.Info("metrics", zap.String("url", "http://"+addr+"/metrics"))
		if c, ok := backend.(interface{ Stats() transport.Stats }); ok {
			prog.bus = c.Stats
		}
	}
	single := newCurve(o.method)
	cfg.Trace = func(r osgm.Record) {
		single.record(r)
		if trace != nil {
			fmt.Fprintf(trace, "%d,%d,%d,%s,%s,%t,%.6f\n", r.Problem, r.Iter, r.Evals,
				strconv.FormatFloat(r.F, 'g', 17, 64), strconv.FormatFloat(r.GradNorm, 'g', 17, 64), r.Accepted, r.Elapsed.Seconds())
		}
		prog.record(r)
	}
	cfg.Started = func(p train.Plan) {
		fields := []zap.Field{zap.String("method", p.Method), zap.Int("problems", p.Problems),
			zap.Int("coordinates", p.Coordinates), zap.Int("dim", p.Dim), zap.Bool("resumed", p.Resumed)}
		if p.Batch > 0 {
			// All at once, the methods' state would not fit in memory.
			fields = append(fields, zap.Int("problems_at_a_time", p.Batch))
		}
		log.Info("plan", fields...)
	}
	cfg.Interrupt = func() bool { return ctx.Err() != nil }
	var ck *checkpoints
	if o.checkpoint != "" {
		ck = &checkpoints{path: o.checkpoint, log: log}
		if o.natsURL != "" {
			// A copy on the bus is for a coordinator on another host; an
			// embedded server ends with this process.
			ck.nc = nc
		}
		cfg.Save, cfg.CheckpointEvery = ck.save, o.ckptEvery
		if !o.set["checkpoint-every"] {
			cfg.CheckpointShare = checkpointShare
		}
		if o.resume != resumeOff {
			cfg.Resume, err = ck.load()
			switch {
			case errors.Is(err, errNoCheckpoint) && o.resume == resumeAuto:
				log.Info("no checkpoint yet: training from the start", zap.String("checkpoint", o.checkpoint))
			case err != nil:
				return err
			default:
				log.Info("resuming", zap.String("checkpoint", o.checkpoint), zap.Int("passes", cfg.Resume.Opt.Evals))
			}
		}
	}
	if o.folds > 0 {
		return crossValidate(o, backend, cfg, log, os.Stdout)
	}
	trainStart := time.Now()
	var busBefore transport.Stats
	if c, ok := backend.(interface{ Stats() transport.Stats }); ok {
		busBefore = c.Stats()
	}
	var res *train.Result
	if o.compare != nil {
		res, err = compare(backend, cfg, o.compare, o.plot, os.Stdout)
	} else {
		res, err = train.Train(backend, cfg)
	}
	// The state is in the checkpoint if this run wrote one, or resumed
	// from it and wrote none since.
	saved := ck != nil && (ck.written > 0 || cfg.Resume != nil)
	if errors.Is(err, osgm.ErrInterrupted) {
		if saved {
			return fmt.Errorf("interrupted; the state is in %s: continue with the same flags and -resume", o.checkpoint)
		}
		if o.checkpoint != "" {
			return fmt.Errorf("interrupted before a checkpoint was written: %w", err)
		}
		return errors.New("interrupted")
	}
	if errors.Is(err, transport.ErrNoWorkers) && saved {
		return fmt.Errorf("%w; the state is in %s: continue with the same flags and -resume once workers run", err, o.checkpoint)
	}
	if errors.Is(err, train.ErrMismatch) {
		return fmt.Errorf("%s: %w; remove %s to train from the start", o.train, err, o.checkpoint)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", o.train, err)
	}
	trainTime := time.Since(trainStart)
	if err := writeModel(o.model, res.Model); err != nil {
		return err
	}
	if o.plot != "" && o.compare == nil {
		if err := plotRun(o.plot, o.method, single); err != nil {
			return err
		}
	}
	conv := 0
	for _, c := range res.Opt.Converged {
		if c {
			conv++
		}
	}
	// Time in passes is the workers' compute plus the bus; the rest of
	// training is the method's own arithmetic on the coordinator.
	compute, comm := res.PassTime, time.Duration(0)
	if c, ok := backend.(interface{ Stats() transport.Stats }); ok {
		compute = min(c.Stats().Compute-busBefore.Compute, res.PassTime)
		comm = res.PassTime - compute
	}
	fields := []zap.Field{zap.String("method", res.Method), zap.Float64("lambda", res.Lambda),
		zap.Int("iterations", maxInt(res.Opt.Iters)), zap.Int("passes", res.Opt.Evals),
		zap.Float64s("objective", res.Primal), zap.Int("converged", conv), zap.Int("problems", len(res.Primal)),
		zap.Duration("load", loaded), zap.Duration("first_gradient", trainStart.Sub(start)+res.FirstGradient), zap.Duration("train", trainTime),
		zap.Duration("compute", compute), zap.Duration("communication", comm), zap.Duration("method_time", trainTime-res.PassTime)}
	if res.Batch > 0 {
		// All at once, the methods' state would not have fitted in memory.
		fields = append(fields, zap.Int("problems_at_a_time", res.Batch))
	}
	// The tally predicts with every problem's weights at once, on every
	// worker; a batched run is one where they did not fit.
	if res.Batch == 0 {
		if t, err := backend.Tally(res.Obj.ModelPoint(res.Model.W)); err == nil {
			rows, correct := t.Total()
			fields = append(fields, zap.Float64("train_accuracy", float64(correct)/float64(rows)))
		}
	}
	log.Info("trained", append(fields, zap.String("model", o.model))...)
	warnShort(log, res.Opt, o.maxIter)
	if o.test != "" {
		acc, err := testAccuracy(o.test, res.Model)
		if err != nil {
			return err
		}
		fmt.Println(acc)
		if acc.Unknown > 0 {
			return fmt.Errorf("%s: %d of %d rows have labels the training file does not have (model labels %v): wrong test file?",
				o.test, acc.Unknown, acc.Total, res.Model.Labels)
		}
	}
	return nil
}

func maxInt(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func readModel(path string) (*libsvm.Model, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := libsvm.ReadModel(f, path)
	if err == nil && !m.L2LossSVM() {
		// Any w would do as a start, but a model of another problem is
		// more likely a wrong file than a wish.
		return nil, fmt.Errorf("%s: solver_type %s; a warm start needs a model of this problem, the L2-loss SVM (LIBLINEAR -s 1 or -s 2)", path, m.Solver)
	}
	return m, err
}

// writeModel writes atomically: a reader never sees half a model.
func writeModel(path string, m *libsvm.Model) error {
	if err := writeAtomic(path, m.Write); err != nil {
		return fmt.Errorf("model %s: %w", path, err)
	}
	return nil
}

func testAccuracy(path string, m *libsvm.Model) (libsvm.Accuracy, error) {
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
	for k, c := range opt.Converged {
		switch {
		case c:
		case opt.Iters[k] >= maxIter:
			limit = append(limit, k)
		default:
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

// statAndHold is shard.Stat that, when the loads run in this process,
// holds a compressed file's text for them (shard.Hold) until release:
// Stat decompresses it anyway, and each load would again. The text is
// kept only if it takes at most an eighth of the free memory, and held
// only if the file did not change while it was read.
func statAndHold(o *options) (info shard.Info, release func(), err error) {
	keep := int64(0)
	if o.local || o.natsURL == "" && !o.objectStore {
		keep = shard.Available() / 8
	}
	before, _ := shard.Identify(o.train)
	info, text, err := shard.StatKeep(o.train, keep)
	if err != nil {
		return shard.Info{}, nil, err
	}
	if after, err := shard.Identify(o.train); text != nil && err == nil && after == before {
		release, err = shard.Hold(o.train, after, text)
		return info, release, err
	}
	return info, func() {}, nil
}
