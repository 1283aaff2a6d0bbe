// Command coordinator trains an L2-loss linear SVM with OSGM, the way
// liblinear-train -s 2 is used:
//
//	coordinator [options] training_file [model_file]
//
// Without -nats it starts an embedded NATS server and in-process workers,
// so one machine needs no setup; with -nats it drives external workers.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/osgm-svm/osgm/internal/cli"
	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/s3"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/status"
	"github.com/osgm-svm/osgm/pkg/train"
	"github.com/osgm-svm/osgm/pkg/transport"
	"github.com/osgm-svm/osgm/pkg/transport/cluster"
)

// options are the command line, parsed.
type options struct {
	train, model string
	// cfg's Problem and Settings are the flags' (train registers and
	// checks them); trainConfig adds the run's settings and Recorder.
	cfg         train.Config
	backend     backendOptions
	test        string
	trace       string
	quiet       bool
	initModel   string
	cpuProfile  string
	memProfile  string
	checkpoint  string
	ckptEvery   int
	resume      resumeMode
	plot        string
	compare     []string
	metricsAddr string
	httpAddr    string
	httpLinger  time.Duration
	folds       int
	findC       bool
	check       bool
	set         map[string]bool // flags given on the command line
}

// backendOptions are where the passes run: in this process (the
// embedded worker's, or -local's), or on a NATS cluster's workers.
type backendOptions struct {
	// cluster holds how workers are waited for, judged lost and sent
	// points (transport registers and checks them).
	cluster cluster.Config
	workers int
	// placeSlots, with problems placed on external workers, is how
	// many train side by side (see placeOn); 0: -workers.
	placeSlots  int
	shards      int
	natsURL     string
	near        string // this host, to find a NATS server on it first
	local       bool
	compact     shard.Compaction
	objectStore bool
	// storeReplicas is the copies object stores keep (0: as many as the
	// servers, at most three).
	storeReplicas int
	auth          transport.Auth
}

// classWeights takes LIBLINEAR's -wi weight pairs (-w1 2, -w-1 0.5) out of
// the arguments before the flag package, which cannot name flags after
// labels it does not know, sees the rest.
func classWeights(args []string) (rest []string, ws []train.ClassWeight, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || len(a) < 3 || a[1] != 'w' {
			rest = append(rest, a)
			continue
		}
		labelText, value, hasValue := strings.Cut(a[2:], "=")
		label, err := strconv.Atoi(labelText)
		if err != nil {
			rest = append(rest, a) // another flag, such as -workers
			continue
		}
		if !hasValue {
			if i+1 == len(args) {
				return nil, nil, fmt.Errorf("%s needs a weight: %s 2 makes C of label %d twice as large", a, a, label)
			}
			i++
			value = args[i]
		}
		w, err := strconv.ParseFloat(value, 64)
		if err != nil || !(w > 0) || math.IsInf(w, 0) {
			return nil, nil, fmt.Errorf("%s %s: the weight must be a positive number", a, value)
		}
		ws = append(ws, train.ClassWeight{Label: label, Weight: w})
	}
	return rest, ws, nil
}

func parse(args []string) (*options, error) {
	o := &options{}
	args, weights, err := classWeights(args)
	if err != nil {
		return nil, err
	}
	o.cfg.Weights = weights
	fs, solver, compare := newFlags(o)
	if err := cli.Parse(fs, args, func(w io.Writer) { usage(w, fs) }); err != nil {
		return nil, err
	}
	return o, o.validate(fs, *solver, *compare)
}

// newFlags registers the options into o; -s and -compare are checked and
// turned into o's fields after parsing.
func newFlags(o *options) (fs *flag.FlagSet, solver *int, compare *string) {
	fs = flag.NewFlagSet("coordinator", flag.ContinueOnError)
	solver = fs.Int("s", 2, "LIBLINEAR's solver type: 0 (L2-regularised logistic regression), 2 (the L2-regularised L2-loss SVM, primal) or 11 (L2-regularised L2-loss support vector regression, primal)")
	o.cfg.Flags(fs)
	o.backend.cluster.Flags(fs)
	fs.StringVar(&o.test, "t", "", "test file: print its accuracy after training")
	fs.StringVar(&o.trace, "trace", "", "write one CSV line per iteration to this file")
	fs.IntVar(&o.backend.workers, "workers", runtime.NumCPU(), "goroutines evaluating in this process (without -nats: the embedded worker's, or -local's), and classes trained side by side")
	fs.IntVar(&o.backend.shards, "shards", 0, "number of shards (0: from the file size: 64, of 1 MB at least and 64 MB at most; a worker beyond the shards holds none)")
	fs.BoolVar(&o.quiet, "q", false, "quiet: only errors")
	fs.StringVar(&o.initModel, "i", "", "initial model file (warm start)")
	fs.StringVar(&o.backend.natsURL, "nats", os.Getenv("NATS_URL"), "external NATS server URL, or a cluster's URLs comma-separated (default: embedded server)")
	fs.StringVar(&o.backend.near, "near", os.Getenv("NATS_NEAR"), "with a cluster's URLs, connect first to the server on this host, the one named NAME@HOST (or NATS_NEAR)")
	fs.BoolVar(&o.check, "check", false, "check what no restart can fix and exit: the flags, the output files, the input files, and with -nats the server's acceptance of the credentials (compose runs this before training)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile (pprof) to this file")
	fs.StringVar(&o.memProfile, "memprofile", "", "write a heap profile (pprof) to this file when the run ends")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at this address (e.g. 127.0.0.1:9100); off by default")
	fs.StringVar(&o.httpAddr, "http", "", "serve a live status page (and its state as JSON at /api/status) at this address: :8080 is this host's loopback only; name another interface (0.0.0.0:8080) to show it beyond; off by default")
	fs.DurationVar(&o.httpLinger, "http-linger", 0, "with -http, keep the final page up this long after the model is written (or until a signal)")
	fs.StringVar(&o.plot, "plot", "", "draw the convergence curve (or, with -compare, every method's) to this .png or .svg file")
	compare = fs.String("compare", "", "run these methods on the same shards (comma-separated) and print and plot their comparison")
	fs.StringVar(&o.checkpoint, "checkpoint", "", "write the optimiser's state to this file (atomically) every -checkpoint-every passes and on SIGINT/SIGTERM")
	fs.IntVar(&o.ckptEvery, "checkpoint-every", 50, "passes between checkpoints (by default also spaced so that writing them takes at most 5% of the time)")
	fs.Var(&o.resume, "resume", "continue from -checkpoint (refused if made for other data or flags); -resume=auto: if it exists, else start (what a supervisor that restarts the coordinator gives every time)")
	fs.BoolVar(&o.backend.objectStore, "objstore", false, "send shards through a JetStream object store (workers need not see the file)")
	fs.IntVar(&o.backend.storeReplicas, "objstore-replicas", transport.AutoReplicas, "copies the object store keeps of each shard and checkpoint: 0, as many as the NATS servers known (at most 3), waiting for them to join, and failing if they do not; 1 keeps one copy, to run on where fewer servers run JetStream")
	fs.Var(&o.backend.compact, "compact", "local workers store values as 1- or 2-byte codes where a shard has few distinct ones, and wide shards' column ids in 3 bytes: less memory, passes 10-30% slower, the same results (true, false, or auto: when plain shards would take more than 2/3 of the free memory, or more than 1 GiB)")
	o.backend.auth.Flags(fs)
	fs.BoolVar(&o.backend.local, "local", false, "evaluate in-process without NATS (for comparison)")
	fs.IntVar(&o.folds, "v", 0, "n-fold cross-validation: print the held-out accuracy (LIBLINEAR's folds); no model is written")
	fs.BoolVar(&o.findC, "C", false, "search C by cross-validation (-v folds, default 5), from -c if given, doubling up to 1024, warm-started; no model is written")
	return fs, solver, compare
}

// validate checks the parsed options and the rules between them.
func (o *options) validate(fs *flag.FlagSet, solver int, compare string) error {
	if fs.NArg() < 1 || fs.NArg() > 2 {
		return errors.New("need a training file and at most a model file: coordinator [options] training_file [model_file]")
	}
	o.train = fs.Arg(0)
	o.model = fs.Arg(1)
	if o.model == "" {
		o.model = baseName(o.train) + ".model"
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	o.set = set
	loss, err := checkSolver(solver)
	if err != nil {
		return err
	}
	o.cfg.Loss = loss
	if loss.Regression() && !set["e"] {
		o.cfg.Eps = 0.001 // LIBLINEAR's default for -s 11
	}
	if err := o.cfg.CheckFlags(fs); err != nil {
		return err
	}
	if err := o.backend.check(o.train); err != nil {
		return err
	}
	if err := o.validateRuns(compare); err != nil {
		return err
	}
	if o.backend.shards < 0 {
		return errors.New("-shards must be 0 (automatic) or positive")
	}
	if o.httpAddr != "" {
		if _, err := status.Addr(o.httpAddr); err != nil {
			return err
		}
	}
	if o.httpLinger < 0 {
		return errors.New("-http-linger must not be negative")
	}
	return nil
}

// check checks where and how the passes run, for the training file train.
func (b *backendOptions) check(train string) error {
	if err := b.cluster.CheckFlags(); err != nil {
		return err
	}
	if b.workers < 1 {
		return errors.New("-workers must be at least 1")
	}
	if b.local && b.natsURL != "" {
		return errors.New("-local evaluates in this process; drop -nats (or -local)")
	}
	if b.compact != shard.CompactAuto && b.natsURL != "" {
		return errors.New("-compact applies to local workers; with -nats, give it to the workers")
	}
	if b.local && b.objectStore {
		return errors.New("-objstore needs workers; drop -local")
	}
	if b.storeReplicas < 0 || b.storeReplicas > 5 {
		return fmt.Errorf("-objstore-replicas %d: JetStream keeps 1 to 5 copies (0: as many as the servers, at most 3)", b.storeReplicas)
	}
	if b.objectStore && s3.IsURL(train) {
		return errors.New("-objstore copies the training file to NATS; workers read an s3:// file by range themselves: drop -objstore")
	}
	return nil
}

// validateRuns checks the options that make a run other than one
// training (-compare, -v, -C) against those of one (-checkpoint, -i, -t,
// -plot).
func (o *options) validateRuns(compare string) error {
	set := o.set
	if compare != "" {
		var err error
		if o.compare, err = methodList(compare); err != nil {
			return err
		}
		if o.checkpoint != "" {
			return errors.New("-compare runs several methods; it does not take -checkpoint")
		}
	}
	if set["v"] && o.folds < 2 {
		return errors.New("-v needs at least 2 folds")
	}
	if o.findC && o.folds == 0 {
		o.folds = 5 // LIBLINEAR's default for -C
	}
	if o.folds > 0 {
		what := "-v"
		if o.findC {
			what = "-C"
			if set["lambda"] {
				return errors.New("-C searches C; give the starting value with -c, not -lambda")
			}
		}
		switch {
		case o.compare != nil:
			return fmt.Errorf("%s and -compare both run many trainings; run them separately", what)
		case o.checkpoint != "":
			return fmt.Errorf("%s does not checkpoint; drop -checkpoint", what)
		case o.initModel != "":
			return fmt.Errorf("%s trains every fold from zero (and -C warm-starts each fold itself); drop -i", what)
		case o.test != "":
			return fmt.Errorf("%s writes no model to test; drop -t, or train without %s", what, what)
		case o.plot != "":
			return fmt.Errorf("%s draws no curve; drop -plot", what)
		}
	}
	if o.plot != "" && !strings.HasSuffix(o.plot, ".png") && !strings.HasSuffix(o.plot, ".svg") {
		return errors.New("-plot needs a .png or .svg file name")
	}
	if o.resume != resumeOff && o.checkpoint == "" {
		return errors.New("-resume needs -checkpoint FILE")
	}
	if o.checkpoint != "" && !osgm.Checkpointable(o.cfg.Method) {
		return fmt.Errorf("-method %s cannot be checkpointed (gonum's optimiser keeps its state to itself); -method lbfgs, this package's L-BFGS, can", o.cfg.Method)
	}
	if o.ckptEvery < 1 {
		return errors.New("-checkpoint-every must be at least 1")
	}
	return nil
}

// checkSolver accepts LIBLINEAR's primal solvers this trainer has (-s 0
// and -s 2), so that its command lines run unchanged, and refuses the
// others by name rather than training another model than the one asked
// for. -s 1 trains -s 2's model, but its -e is a dual tolerance (default
// 0.1) that means something else here.
func checkSolver(t int) (shard.Loss, error) {
	if l, ok := train.LossNumbered(t); ok {
		return l, nil
	}
	switch s, known := libsvm.SolverNumbered(t); {
	case t == 1:
		return 0, errors.New("-s 1 is LIBLINEAR's dual solver for -s 2's model; this trainer solves it in the primal: give -s 2 (its -e is the primal gradient test, default 0.01, not the dual's 0.1)")
	case known:
		return 0, fmt.Errorf("-s %d is %s; this trainer trains -s 0 (L2-regularised logistic regression), -s 2 (the L2-regularised L2-loss SVM, primal) and -s 11 (L2-loss support vector regression, primal)", t, s.About)
	default:
		return 0, fmt.Errorf("-s %d: LIBLINEAR has no such solver; this trainer trains -s 0 (L2-regularised logistic regression), -s 2 (the L2-regularised L2-loss SVM, primal) and -s 11 (L2-loss support vector regression, primal)", t)
	}
}

// baseName is LIBLINEAR's default model name: the training file's base
// name in the current directory.
func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

func main() {
	o, err := parse(os.Args[1:])
	if err != nil {
		cli.Exit("coordinator", err)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		os.Exit(1)
	}
}
