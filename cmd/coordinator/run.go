package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/logging"
	"github.com/osgm-svm/osgm/pkg/memory"
	"github.com/osgm-svm/osgm/pkg/metrics"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/s3"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/status"
	"github.com/osgm-svm/osgm/pkg/train"
	"github.com/osgm-svm/osgm/pkg/transport"
	"github.com/osgm-svm/osgm/pkg/transport/cluster"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

func run(o *options) error {
	memory.TuneGC()
	log := logging.New(o.quiet)
	defer log.Sync()
	stopProfile, err := profiles(o.cpuProfile, o.memProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	start := time.Now()
	if err := checkOutputs(o); err != nil {
		return err
	}
	init, err := checkInputs(o)
	if err != nil {
		return err
	}
	if o.check {
		return checkOnly(o, log)
	}
	page, log, err := openStatus(o, log)
	if err != nil {
		return err
	}
	end, err := loadAndTrain(o, log, init, start, page)
	page.finish(end, err)
	return err
}

// loadAndTrain loads the shards where they will be evaluated, trains on
// them and writes the model (or cross-validates, or compares methods);
// start is when the run began. It says how the run ended for the page.
func loadAndTrain(o *options, log *zap.Logger, init *libsvm.Model, start time.Time, page *statusPage) (end status.End, err error) {
	// What the loads in this process share: the text statAndHold
	// decompressed, and the memory their shards may take.
	shared := &shard.Shared{}
	info, release, err := statAndHold(o, shared)
	if err != nil {
		return end, err
	}
	defer release()
	ranges := input.Layout(info.Size, o.backend.shards)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	be, nc, closeBackend, err := openBackend(ctx, o.train, &o.backend, ranges, shared, log)
	release() // the shards are loaded
	if err != nil {
		if ctx.Err() != nil { // whatever failed, the signal came first
			return end, fmt.Errorf("interrupted before training began (%w)", err)
		}
		return end, err
	}
	defer closeBackend()
	loaded := time.Since(start)
	end.Load = loaded.Seconds()
	logLoaded(log, o.train, be.Backend, o.cfg.Loss, len(ranges), loaded)
	page.loaded(o, be)
	obs, closeWatch, err := watch(o, log, be, page)
	defer closeWatch() // what it opened before failing too
	if err != nil {
		return end, err
	}
	ck, resume, err := checkpointing(o, log, nc, be, ranges)
	if err != nil {
		return end, err
	}
	reportStores(log, nc, o, ck, page)
	shelf, err := openShelf(o)
	if err != nil {
		return end, err
	}
	defer shelf.Close()
	cfg := trainConfig(o, init, func() bool { return ctx.Err() != nil }, obs, ck, resume, shelf)
	if o.folds > 0 {
		return end, crossValidate(o, be, cfg, log, os.Stdout)
	}
	trainStart := time.Now()
	busBefore := be.busStats()
	var res *train.Result
	if o.compare != nil {
		res, err = compare(be.Backend, cfg, o.compare, o.plot, os.Stdout)
	} else {
		res, err = train.Train(be.Backend, cfg)
	}
	if err != nil {
		// The state is in the checkpoint if this run wrote one, or
		// resumed from it and wrote none since.
		return end, trainingFailed(o, err, ck != nil && (ck.written > 0 || cfg.Resume != nil))
	}
	trainTime := time.Since(trainStart)
	page.phase(status.PhaseWriting)
	if err := save(o, res, obs.single); err != nil {
		return end, err
	}
	split := splitTime(res, be, busBefore, trainTime)
	end.Compute, end.Communication, end.Method = split.compute.Seconds(), split.comm.Seconds(), split.method.Seconds()
	fields := trainedFields(res, be, split, loaded, trainStart.Sub(start)+res.FirstGradient, trainTime)
	end.Model, end.Accuracy, err = finish(o, log, res, fields)
	return end, err
}

// openShelf is where batches' weights wait beside the model for its
// writing; nil for cross-validation and -compare, which write no model.
func openShelf(o *options) (*train.FileShelf, error) {
	if o.folds > 0 || o.compare != nil {
		return nil, nil
	}
	dir := filepath.Dir(o.model)
	if s3.IsURL(o.model) { // nothing beside an object: the machine's temporary files
		dir = os.TempDir()
	}
	return train.NewShelf(dir)
}

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

// busStats is what the workers' bus has carried (zero in process).
func (b *built) busStats() cluster.Stats {
	if b.cluster == nil {
		return cluster.Stats{}
	}
	return b.cluster.Stats()
}

// trainConfig is the training o asks for, built in one place: the
// flags', the memory left now that the shards are loaded (under a
// container's limit too), which bounds the problems the methods hold at
// once, what watches the run, the checkpoints (ck nil: none; resume: the
// one to continue from) and the shelf (nil: cross-validation and
// -compare, which write no model).
func trainConfig(o *options, init *libsvm.Model, interrupted func() bool, obs *watcher, ck *checkpoints, resume *train.Checkpoint, shelf *train.FileShelf) train.Config {
	cfg := o.cfg // the problem and the method, from the flags
	s := &cfg.Settings
	s.MaxBytes, s.Init = max(memory.Available(), 0), init
	// Classes trained one at a time go side by side: one a core where
	// the shards are in this process, one a worker where they are placed.
	s.Parallel = o.backend.workers
	if o.backend.placeSlots > 0 {
		s.Parallel = o.backend.placeSlots // one a worker's slot, where they train whole
	}
	cfg.Recorder = train.Recorder{Trace: obs.record, Started: obs.started, Interrupt: interrupted}
	if ck != nil {
		cfg.Recorder.Save, s.CheckpointEvery, s.Resume = ck.save, o.ckptEvery, resume
		if !o.set["checkpoint-every"] {
			s.CheckpointShare = checkpointShare
		}
	}
	if shelf != nil {
		s.LiveModel = true // written before anything reads every weight
		s.Shelf = shelf
	}
	return cfg
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

// profiles starts a CPU profile to cpu, if named, and returns what stops
// it and writes the heap's profile to mem, if named: what is resident at
// the end beside the shards, and (its alloc_space) who allocated what
// over the run.
func profiles(cpu, mem string) (stop func(), err error) {
	stopCPU := func() {}
	if cpu != "" {
		f, err := os.Create(cpu)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		stopCPU = func() { pprof.StopCPUProfile(); f.Close() }
	}
	if mem == "" {
		return stopCPU, nil
	}
	f, err := os.Create(mem)
	if err != nil {
		stopCPU()
		return nil, err
	}
	return func() {
		stopCPU()
		runtime.GC() // the heap profile is as of the last collection
		pprof.Lookup("heap").WriteTo(f, 0)
		f.Close()
	}, nil
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

// checkTestFile opens the -t file, an s3:// object's metadata.
func checkTestFile(name string) error {
	if s3.IsURL(name) {
		_, err := s3.Open(context.Background(), name)
		return err
	}
	f, err := libsvm.Open(name)
	if err != nil {
		return err
	}
	return f.Close()
}

// checkReadable reads a byte of the training file: an s3:// object is
// opened as a load would, so that a missing bucket or key, or refused
// credentials, are found here.
func checkReadable(name string) error {
	if s3.IsURL(name) {
		_, err := input.Identify(name)
		return err
	}
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Read(make([]byte, 1)); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// checkOnly finishes -check: the training file can be read and the NATS
// server accepts the credentials. What it finds wrong, a restart would
// find again, so a supervisor runs it once before it starts the
// coordinator with a restart policy.
func checkOnly(o *options, log *zap.Logger) error {
	if err := checkReadable(o.train); err != nil {
		return fmt.Errorf("training file: %w", err)
	}
	if o.backend.natsURL != "" {
		auth, err := o.backend.auth.FromEnv()
		if err != nil {
			return err
		}
		if err := transport.CheckConnect(o.backend.natsURL, "coordinator check", auth, log); err != nil {
			return err
		}
	}
	log.Info("check passed", zap.String("train", o.train), zap.String("model", o.model))
	return nil
}

// checkInputs reads the initial model and opens the test file before any
// data is read: a typo must not cost a load, or a training.
func checkInputs(o *options) (*libsvm.Model, error) {
	var init *libsvm.Model
	if o.initModel != "" {
		var err error
		if init, err = readModel(o.initModel, o.cfg.Loss); err != nil {
			return nil, fmt.Errorf("-i: %w", err)
		}
		if err := train.CheckBias(init, o.cfg.Bias); err != nil {
			return nil, fmt.Errorf("-i %s: %w", o.initModel, err)
		}
	}
	if o.test != "" {
		if err := checkTestFile(o.test); err != nil {
			return nil, fmt.Errorf("-t: %w", err)
		}
	}
	return init, nil
}

// watcher is what the run reports as it goes (train.Config's Trace and
// Started): the -trace file, the progress log, the -metrics-addr server,
// and the curve -plot draws.
type watcher struct {
	log    *zap.Logger
	page   *statusPage
	trace  *bufio.Writer
	prog   *progress
	single *curve
	bias   float64 // -B, to tell features from the bias in a plan
}

func (ob *watcher) record(r osgm.Record) {
	ob.single.record(r)
	if ob.trace != nil {
		fmt.Fprintf(ob.trace, "%d,%d,%d,%s,%s,%t,%.6f\n", r.Problem, r.Iter, r.Evals,
			strconv.FormatFloat(r.F, 'g', 17, 64), strconv.FormatFloat(r.GradNorm, 'g', 17, 64), r.Accepted, r.Elapsed.Seconds())
	}
	ob.prog.record(r)
	ob.page.record(r)
}

func (ob *watcher) started(p train.Plan) {
	fields := []zap.Field{zap.String("method", p.Method), zap.Int("problems", p.Problems),
		zap.Int("coordinates", p.Coordinates), zap.Int("dim", p.Dim), zap.Float64("gap", p.Gap), zap.Bool("resumed", p.Resumed)}
	if p.Batch > 0 {
		fields = append(fields, zap.Int("problems_at_a_time", p.Batch), zap.Bool("memory_bound", p.MemoryBound))
	}
	ob.log.Info("plan", fields...)
	ob.page.started(p)
	if p.InitFeatures > 0 {
		ob.log.Warn(initFeatures(p.InitFeatures, p.Dim, ob.bias))
	}
}

// initFeatures says how a warm start of n features was fitted to a model
// of dim weights: padded with zeros, or cut to the data's features.
func initFeatures(n, dim int, bias float64) string {
	data := dim
	if bias >= 0 {
		data--
	}
	if n < data {
		return fmt.Sprintf("-i: the model has %d features, the data %d: features %d-%d start at 0", n, data, n+1, data)
	}
	return fmt.Sprintf("-i: the model has %d features, the data %d: the weights of features %d-%d, which no row has, are dropped (their optimum is 0); the model written has %d, as liblinear-train's would", n, data, data+1, n, data)
}

// watch opens what the run reports to; end ends what it opened, in
// reverse.
func watch(o *options, log *zap.Logger, backend *built, page *statusPage) (ob *watcher, end func(), err error) {
	var closers []func()
	end = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	var trace *bufio.Writer
	if o.trace != "" {
		f, err := os.Create(o.trace)
		if err != nil {
			return nil, end, err
		}
		trace = bufio.NewWriter(f)
		closers = append(closers, func() { f.Close() }, func() { trace.Flush() })
		fmt.Fprintln(trace, "problem,iter,evals,f,grad_norm,accepted,seconds")
	}
	var alive func() int
	if backend.cluster != nil {
		alive = backend.cluster.Live
	}
	prog := newProgress(log, alive)
	if o.metricsAddr != "" {
		prog.metrics = metrics.NewCoordinator()
		addr, stop, err := metrics.Serve(o.metricsAddr, prog.metrics.Registry, nil)
		if err != nil {
			return nil, end, fmt.Errorf("-metrics-addr: %w", err)
		}
		closers = append(closers, stop)
		log.Info("metrics", zap.String("url", "http://"+addr+"/metrics"))
		if backend.cluster != nil {
			prog.bus = backend.cluster.Stats
		}
	}
	return &watcher{log: log, page: page, trace: trace, prog: prog, single: newCurve(o.cfg.Method), bias: o.cfg.Bias}, end, nil
}

// checkpointing is where -checkpoint saves and, with -resume, the
// checkpoint to continue from (nil: none); nil without -checkpoint.
func checkpointing(o *options, log *zap.Logger, nc *nats.Conn, backend *built, ranges []input.Range) (ck *checkpoints, resume *train.Checkpoint, err error) {
	if o.checkpoint == "" {
		return nil, nil, nil
	}
	ck = &checkpoints{path: o.checkpoint, log: log}
	if o.backend.natsURL != "" {
		// A copy on the bus is for a coordinator on another host; an
		// embedded server ends with this process.
		ck.nc = nc
	}
	if err := ck.open(context.Background(), o.backend.storeReplicas); err != nil {
		return nil, nil, err
	}
	if backend.cluster != nil && o.backend.objectStore {
		ck.objects = objectPrefix(backend.cluster.Job())
	}
	if o.resume == resumeOff {
		return ck, nil, nil
	}
	resume, err = ck.load()
	switch {
	case errors.Is(err, errNoCheckpoint) && o.resume == resumeAuto:
		log.Info("no checkpoint yet: training from the start", zap.String("checkpoint", o.checkpoint))
		return ck, nil, nil
	case err != nil:
		return nil, nil, err
	}
	log.Info("resuming", zap.String("checkpoint", o.checkpoint), zap.Int("passes", resume.Opt.Evals))
	removeLeftShards(log, ck.nc, resume.Objects, ck.objects, ranges)
	return ck, resume, nil
}

// removeLeftShards removes from the object store the shards a run that
// was killed left under its prefix, old, when this run is not using
// them: a run ended in any other way removed its own.
func removeLeftShards(log *zap.Logger, nc *nats.Conn, old, current string, ranges []input.Range) {
	if old == "" || old == current || nc == nil {
		return
	}
	src := wire.Source{Bucket: wire.ShardBucket, Prefix: old}
	n, err := transport.DeleteShards(context.Background(), nc, src, ranges)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound): // another server's, or removed by hand
	case err != nil:
		log.Warn("the shards a killed run left in the object store stay", zap.String("prefix", old), zap.Error(err))
	case n > 0: // none: the run ended and removed them
		log.Info("removed the shards a killed run left in the object store", zap.String("prefix", old), zap.Int("shards", n))
	}
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

// readModel reads a warm start's model, which must be of the problem of
// loss l.
func readModel(path string, l shard.Loss) (*libsvm.Model, error) {
	m, err := libsvm.ReadModelFile(path)
	if err != nil {
		return nil, err
	}
	if ml, ok := train.LossOf(m); !ok || ml != l {
		// Any w would do as a start, but a model of another problem is
		// more likely a wrong file than a wish.
		s := train.SolverOf(l)
		return nil, fmt.Errorf("%s: solver_type %s; a warm start needs a model of this problem, %s (LIBLINEAR -s %d)", path, m.Solver, s.About, s.Type)
	}
	return m, nil
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

// statAndHold is input.Stat that, when the loads run in this process,
// holds a compressed file's text for them (Shared.Hold) until release:
// Stat decompresses it anyway, and each load would again. The text is
// kept only if it takes at most an eighth of the free memory, and held
// only if the file did not change while it was read.
func statAndHold(o *options, shared *shard.Shared) (info input.Info, release func(), err error) {
	keep := int64(0)
	if o.backend.local || o.backend.natsURL == "" && !o.backend.objectStore {
		keep = memory.Available() / 8
	}
	before, _ := input.Identify(o.train)
	info, text, err := input.StatKeep(o.train, keep)
	if err != nil {
		return input.Info{}, nil, err
	}
	if after, err := input.Identify(o.train); text != nil && err == nil && after == before {
		release, err = shared.Hold(o.train, after, text)
		return info, release, err
	}
	return info, func() {}, nil
}
