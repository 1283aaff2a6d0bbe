package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
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
