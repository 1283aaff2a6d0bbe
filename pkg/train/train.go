// Package train turns loaded shards into a LIBLINEAR-compatible model: it
// reads the data summary, fixes the classes, sets up the one-vs-rest
// problems and runs an osgm method over whatever backend holds the shards.
package train

import (
	"fmt"
	"time"

	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/shard"
)

// minLambda is the least lambda (the largest C m) a run takes: the
// objective's values in LIBLINEAR's scale reach C m, and their squares
// must not overflow double precision (whose largest is about 1.8e308).
const minLambda = 1e-150

// Config is a run, in three parts as gonum/optimize separates them: the
// problem minimised, the settings of its minimisation, and what hears
// the run. The coordinator builds one from the flags (Flags registers
// the first two's) and what its run adds (trainConfig).
type Config struct {
	Problem
	Settings
	Recorder
}

// Problem is what is minimised: LIBLINEAR's problem options.
type Problem struct {
	C      float64 // LIBLINEAR's cost; used when Lambda is 0
	Lambda float64
	Bias   float64 // < 0: no bias feature
	// Loss is the problem's loss: the squared hinge (LIBLINEAR -s 2)
	// unless set, logistic regression's (-s 0) or support vector
	// regression's (-s 11, of width Epsilon: LIBLINEAR's -p).
	Loss    shard.Loss
	Epsilon float64
	// Weights scale C per class, as LIBLINEAR's -wi: label -> weight.
	Weights []ClassWeight
	// Holdout, when positive, leaves that cross-validation fold out of
	// training (the backend's folds must be set); m and the stopping test
	// count the other rows only, as LIBLINEAR's cross-validation does.
	Holdout int
}

// terms are the problem's shard.Terms, the one value that carries them
// to the objective, the kernels and the wire, with its class weights
// laid out per problem (problemWeights).
func (p *Problem) terms(weights []float64) shard.Terms {
	return shard.Terms{Loss: p.Loss, Epsilon: p.Epsilon, Bias: p.Bias, Weights: weights, Holdout: p.Holdout}
}

// Settings are how the problem is minimised: the method and its stopping
// test, where it starts, and the memory and cores it may take. Its
// osgm.Options go to the methods as they are.
type Settings struct {
	osgm.Options
	Eps float64 // LIBLINEAR's relative gradient tolerance
	// MaxGap, when positive, also stops each problem only once it is
	// certified within this relative gap of its optimum (see
	// osgm.Settings.MaxGap). LIBLINEAR's gradient test alone, the
	// default, stops a method wherever its path first meets it: at a
	// loose -e a class's objective then moves by percents with rounding
	// alone, LIBLINEAR's own too (docs/ALGORITHMS.md). Within 1e-6 of
	// the optimum a problem is at most 1e-6 above LIBLINEAR's, at
	// several times the passes.
	MaxGap float64
	// Init, when set, is the starting model (warm start).
	Init *libsvm.Model
	// Resume continues from a checkpoint; it must match the data and flags.
	Resume *Checkpoint
	// MaxBytes, when positive, is the memory available: one-vs-rest
	// problems whose vectors (the models and the optimiser's state) need
	// more than half of it are minimised in batches that fit, with the
	// same result, and a problem that does not fit in it alone is refused.
	MaxBytes int64
	// batch, when positive, minimises at most this many problems at a
	// time whatever the memory: the package's tests, whose small data
	// would otherwise go all at once, run problems one at a time on it.
	batch int
	// LiveModel leaves the model's weights over the coordinates the
	// methods moved (libsvm.Model.Live), not laid out over every feature:
	// a caller that writes the model and little else saves the dead
	// features' share of a model's memory.
	LiveModel bool
	// Shelf, when set, takes each batch's weights once the batch is
	// finished (osgm.Settings.Shelf), and the model reads them from it
	// (libsvm.Model.Shelved): a model larger than the data is not held
	// while the other classes train. A run in one batch holds its model.
	Shelf Shelf
}

// Recorder hears the run, and may stop it.
type Recorder struct {
	Trace func(osgm.Record)
	// Started, when set, hears what training will do once that is known,
	// before the first pass: a long run can say so at its start.
	Started func(Plan)
	// Save receives a checkpoint every CheckpointEvery passes and when
	// Interrupt reports true (then Train returns osgm.ErrInterrupted).
	Save      func(*Checkpoint) error
	Interrupt func() bool
}

// Shelf is where finished problems' weights wait for the model file
// (FileShelf): Weights reads them back a block at a time.
type Shelf interface {
	osgm.Shelf
	// ReadWeights fills dst with problem k's weights from position from
	// of its vector on.
	ReadWeights(k, from int, dst []float64) error
}

// Result is a trained model and how it was reached.
type Result struct {
	Method string // the method that ran (Auto resolved)
	// Model is the model file's header and, unless Config.LiveModel,
	// every weight; with it, W is nil until Full, and Weights has them.
	Model   *libsvm.Model
	Weights *Weights
	Opt     *osgm.Result
	Summary shard.Summary
	Lambda  float64
	// Primal is LIBLINEAR's objective F = f/lambda of each problem, the
	// number its -s 2 solver minimises.
	Primal []float64
	Obj    *objective.Objective
	// PassTime is the time spent in passes over the data; the rest of the
	// training time is the method's own arithmetic on the coordinator.
	// SideTime is the part of it in passes side by side on forks, in this
	// process, the passes made at once counted once.
	PassTime, SideTime time.Duration
	// FirstGradient is how long Train took to have the gradient at the
	// start point: the objective built (the reduction tree) and its first
	// pass. With Resume there is no such pass: the objective alone.
	FirstGradient time.Duration
	// Batch is how many problems were minimised at a time (0: all), and
	// MemoryBound whether memory made it smaller (see Plan).
	Batch       int
	MemoryBound bool
}

// Train minimises every problem of the backend's data as cfg says: it
// settles the plan (classes, lambda, tolerances, batches, method) before
// any pass, then makes the pass at 0 and runs the methods.
func Train(b objective.Backend, cfg Config) (*Result, error) {
	start := time.Now()
	p, err := plan(b, cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Started != nil {
		cfg.Started(p.Plan)
	}
	r := cfg.Resume
	if r != nil {
		if err := r.check(p.dataFP, p.flagsFP); err != nil {
			return nil, err
		}
		if len(r.G0Norm) != p.Problems {
			return nil, fmt.Errorf("%w: it holds %d problems' starting gradients, this run has %d problems", ErrMismatch, len(r.G0Norm), p.Problems)
		}
		copy(p.stop.g0norm, r.G0Norm)
	}
	timed := newTimed(p.obj)
	zero := &zeroPass{obj: timed, K: p.Problems, n: p.Coordinates, diag: osgm.UsesStartDiag(p.Method, cfg.Params), warm: cfg.Init != nil,
		stop: p.stop, start: start}
	probs, settings, hooks := p.settings(cfg)
	x0, err := startPoints(cfg.Init, p.labels, p.Problems, p.Dim, p.Coordinates, p.live, cfg.Bias)
	if err != nil {
		return nil, err
	}
	zeroPassed := false
	switch {
	case p.Batch > 0 || r != nil && r.Opt.Batch > 0:
		hooks.BatchStart = zero.run
	case r == nil:
		st, err := zero.run(timed, nil)
		if err != nil {
			return nil, err
		}
		zeroPassed = true
		settings.F0, settings.G0 = st.F0, st.G0
		for k, d := range st.Diag {
			probs[k].Diag = d
		}
	}
	if r != nil {
		settings.Resume = &r.Opt
		for k := range p.stop.tol {
			p.stop.set(k)
		}
		zero.firstGradient = time.Since(start) // no pass: the objective alone
	}
	res, err := osgm.Minimize(timed, x0, probs, settings, hooks)
	if err != nil {
		return nil, err
	}
	if zeroPassed {
		res.Evals++ // batches count theirs
	}
	out, err := p.result(res, cfg)
	if err != nil {
		return nil, err
	}
	out.SideTime = timed.clock.sideWall()
	out.PassTime, out.FirstGradient = time.Duration(timed.clock.main.Load())+out.SideTime, zero.firstGradient
	return out, nil
}

// Full lays the model's weights out over every coordinate (Model.W), if
// LiveModel left them as the methods did.
func (r *Result) Full() error {
	if r.Model.W != nil {
		return nil
	}
	w, err := r.Weights.Full()
	r.Model.W = w
	return err
}
