// Package train turns loaded shards into a LIBLINEAR-compatible model: it
// reads the data summary, fixes the classes, sets up the one-vs-rest
// problems and runs an osgm method over whatever backend holds the shards.
package train

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/osgm-svm/osgm/internal/vec"
	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/shard"
)

// minLambda is the least lambda (the largest C m) a run takes: the
// objective's values in LIBLINEAR's scale reach C m, and their squares
// must not overflow (heart_scale trains at C m = 2.7e102 and stalls at
// w = 0 by C m = 2.7e202).
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

// Plan is what a run settled before its first pass.
type Plan struct {
	Method   string // Auto resolved
	Problems int
	Batch    int // problems minimised at a time (0: all)
	// MemoryBound: the batches are smaller than they would be, all the
	// problems' state at once not fitting in memory.
	MemoryBound bool
	// Gap is the relative gap each problem is certified within (0: none;
	// see Config.MaxGap).
	Gap float64
	// Coordinates is how many weights per problem the method moves: the
	// features some row holds, and the bias. A model has Dim.
	Coordinates, Dim int
	Resumed          bool
	// InitFeatures is the warm start's feature count where it is not the
	// data's (0: it is, or there is none): its weights are padded with
	// zeros to the data's features, or those past them are dropped, as
	// no row has them and their optimum is 0. A model always has the
	// data's features, as liblinear-train's has.
	InitFeatures int
}

// Summarize merges the shards' descriptions in shard order. A
// regression's targets are left out: they are no classes, and a file
// holds about as many as it has rows, which would cost the merge a map
// as large.
func Summarize(metas []shard.Meta, loss shard.Loss) shard.Summary {
	var s shard.Summary
	for _, m := range metas {
		labels, counts := m.Labels, m.LabelCount
		if loss.Regression() {
			labels, counts = nil, nil
		}
		s.Merge(m.Rows, m.NNZ, m.MaxIndex, m.NormSq, labels, counts)
	}
	return s
}

// Rows is the number of rows the shards hold.
func Rows(metas []shard.Meta) int {
	n := 0
	for _, m := range metas {
		n += m.Rows
	}
	return n
}

// Classes checks the labels and returns them in model order with their
// integer form.
func Classes(sum shard.Summary) (order []float64, labels []int, err error) {
	if sum.Rows == 0 {
		return nil, nil, libsvm.ErrNoData
	}
	order = shard.LabelOrder(sum.Labels)
	for _, l := range order {
		il, err := libsvm.IntLabel(l)
		if err != nil {
			return nil, nil, err
		}
		labels = append(labels, il)
	}
	if len(order) < 2 {
		return nil, nil, fmt.Errorf("only one class (label %v) in %d rows: a classifier needs at least two", order[0], sum.Rows)
	}
	return order, labels, nil
}

// ClassWeight multiplies C for the rows of one label.
type ClassWeight struct {
	Label  int
	Weight float64
}

// problemWeights lays out the weights as shard.Point wants them, following
// LIBLINEAR: with two classes the positive side (first label) has C w_0 and
// the negative C w_1; one-vs-rest problem k has C w_k on its class and C on
// the rest. Weights of one label multiply; labels absent from the data are
// reported. Nil when no weight is set.
func problemWeights(ws []ClassWeight, labels []int) (out []float64, unknown []int) {
	if len(ws) == 0 {
		return nil, nil
	}
	per := make([]float64, len(labels))
	for i := range per {
		per[i] = 1
	}
	for _, w := range ws {
		i := slices.Index(labels, w.Label)
		if i < 0 {
			unknown = append(unknown, w.Label)
			continue
		}
		per[i] *= w.Weight
	}
	if len(labels) == 2 {
		return per, unknown
	}
	for _, p := range per {
		out = append(out, p, 1)
	}
	return out, unknown
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

// planned is what Train settles before its first pass.
type planned struct {
	Plan
	sum             shard.Summary
	labels          []int
	stop            *stopping
	lambda          float64
	features        int
	obj             *objective.Objective
	live            []int // the coordinates the methods see (nil: all)
	shape           osgm.Shape
	dataFP, flagsFP string // for checkpoints
}

// plan reads the shards' descriptions and decides what the run will do.
func plan(b objective.Backend, cfg Config) (*planned, error) {
	p := &planned{}
	metas := b.Meta()
	p.sum = Summarize(metas, cfg.Loss)
	K, order, err := p.problems(b, cfg)
	if err != nil {
		return nil, err
	}
	p.Problems = K
	p.Gap = cfg.MaxGap
	if p.stop, err = trainingRows(b, p.sum, order, cfg.Holdout, cfg.Loss); err != nil {
		return nil, err
	}
	p.stop.eps, p.stop.g0norm, p.stop.tol = cfg.Eps, make([]float64, K), make([]float64, K)
	weights, unknown := problemWeights(cfg.Weights, p.labels)
	if len(unknown) > 0 {
		return nil, fmt.Errorf("-w: class weights given for labels %v, which the data does not have (its labels: %v)", unknown, p.labels)
	}
	if p.lambda, err = regularisation(cfg, p.stop.rows); err != nil {
		return nil, err
	}
	p.features = int(p.sum.MaxIndex)
	if cfg.Init != nil && cfg.Init.NFeature != p.features {
		p.InitFeatures = cfg.Init.NFeature
	}
	if p.features == 0 && cfg.Bias < 0 {
		// LIBLINEAR writes a model of no weights, which predicts one
		// class for every row: an error says more.
		return nil, errors.New("no row has a feature (each holds a label only) and there is no bias: nothing to learn; a bias (-B 1) would learn the classes' balance")
	}
	// Only checkpoints need the fingerprints, and hashing every shard's
	// column map costs time before the first gradient.
	if cfg.Save != nil || cfg.Resume != nil {
		p.dataFP, p.flagsFP = DataFingerprint(metas), FlagsFingerprint(cfg)
	}
	p.obj = objective.New(b, p.features, p.lambda, cfg.Bias)
	p.obj.Rows, p.obj.Terms = p.stop.rows, cfg.terms(weights)
	// The methods see the live coordinates of a model's dim only (see
	// objective.Objective.LeaveOutDead).
	p.Dim = p.obj.Dim()
	p.live = p.obj.LeaveOutDead()
	p.Coordinates = p.obj.Dim()
	if p.Batch, p.MemoryBound, err = batchSize(cfg, p.features, p.Dim, p.Coordinates, K, p.sum.NNZ); err != nil {
		return nil, err
	}
	p.shape = dataShape(metas, p.sum, p.Dim, cfg.Bias)
	p.Method = osgm.Choose(cfg.Method, K, p.shape)
	p.Resumed = cfg.Resume != nil
	return p, nil
}

// problems settles the run's problems: one per class against the rest
// (one for two classes), the classes set on b in their order, or one
// regression, whose rows keep their targets (order nil).
func (p *planned) problems(b objective.Backend, cfg Config) (K int, order []float64, err error) {
	if cfg.Loss.Regression() {
		if p.sum.Rows == 0 {
			return 0, nil, libsvm.ErrNoData
		}
		if len(cfg.Weights) > 0 {
			return 0, nil, errors.New("class weights (-wi) are for classification; a regression has no classes")
		}
		return 1, nil, nil
	}
	order, p.labels, err = Classes(p.sum)
	if err != nil {
		return 0, nil, err
	}
	if err := b.SetClasses(order); err != nil {
		return 0, nil, err
	}
	if K = len(order); K == 2 {
		K = 1
	}
	return K, order, nil
}

// settings are the problems, and Minimize's settings and hooks, of the
// plan.
func (p *planned) settings(cfg Config) ([]osgm.Problem, osgm.Settings, osgm.Hooks) {
	probs := make([]osgm.Problem, p.Problems)
	for k := range probs {
		probs[k] = osgm.Problem{Dim: p.Coordinates, L: p.obj.LipschitzBound(), Mu: p.lambda, HessPasses: p.shape.HessPasses()}
	}
	s := osgm.Settings{Options: cfg.Options, GradTol: p.stop.tol, MaxGap: p.Gap, Batch: p.Batch}
	h := osgm.Hooks{Shelf: cfg.Shelf, Interrupt: cfg.Interrupt}
	s.Method = p.Method // Auto resolved
	if p.MemoryBound {
		s.Parallel = 0 // one problem's state is what memory allows
	}
	if cfg.Trace != nil {
		h.Trace = func(r osgm.Record) {
			r.F /= p.lambda // report LIBLINEAR's objective, as the log and model do
			cfg.Trace(r)
		}
	}
	if cfg.Save != nil {
		h.Checkpoint = func(snap *osgm.Snapshot) error {
			// The pass at zero counts among the passes; the snapshot keeps
			// the optimiser's own count.
			p.stop.mu.Lock()
			g0 := slices.Clone(p.stop.g0norm)
			p.stop.mu.Unlock()
			return cfg.Save(&Checkpoint{Version: checkpointVersion, Data: p.dataFP, Flags: p.flagsFP, G0Norm: g0, Opt: *snap})
		}
	}
	return probs, s, h
}

// result is the model of the methods' result: every feature's weight,
// the dead ones at their optimum, 0; with LiveModel, the weights as the
// methods left them (Weights), the live ones alone and the shelved
// problems on the shelf.
func (p *planned) result(res *osgm.Result, cfg Config) (*Result, error) {
	model := &libsvm.Model{Solver: SolverOf(cfg.Loss).Name, Labels: p.labels, NFeature: p.features, Bias: cfg.Bias}
	if cfg.Bias < 0 {
		model.Bias = -1
	}
	ws := &Weights{W: res.X, Live: p.live, Shelf: cfg.Shelf, Dim: model.Dim()}
	if !cfg.LiveModel {
		full, err := ws.Full()
		if err != nil {
			return nil, err
		}
		model.W = full
		copy(res.X, full) // the methods' result over every coordinate too
		ws = &Weights{W: full, Dim: model.Dim()}
	}
	primal := make([]float64, p.Problems)
	for k := range primal {
		primal[k] = res.F[k] / p.lambda
	}
	return &Result{Method: p.Method, Model: model, Weights: ws, Opt: res, Summary: p.sum, Lambda: p.lambda, Primal: primal, Obj: p.obj, Batch: p.Batch, MemoryBound: p.MemoryBound}, nil
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

// stopping is LIBLINEAR's stopping test, ||g|| <= eps * max(min(#pos,
// #neg), 1) / m * ||g(0)||, for each problem: counts are the rows per
// class that training sees, rows their sum, and tol[k] the threshold once
// g0norm[k] is known.
type stopping struct {
	// mu guards g0norm and tol, which problems side by side set at once
	// (their pass at 0) and checkpoints read.
	mu          sync.Mutex
	eps         float64
	counts      []int
	rows        int
	g0norm, tol []float64
}

func (s *stopping) set(k int) {
	if s.counts == nil { // a regression: LIBLINEAR's -s 11 test
		s.tol[k] = float64(s.eps * s.g0norm[k])
		return
	}
	pos := s.counts[k]
	s.tol[k] = float64(s.eps * math.Max(float64(min(pos, s.rows-pos)), 1) / float64(s.rows) * s.g0norm[k])
}

// trainingRows counts the rows per class that training sees: all of
// them, or all but the held-out fold's.
func trainingRows(b objective.Backend, sum shard.Summary, order []float64, holdout int, loss shard.Loss) (*stopping, error) {
	s := &stopping{rows: sum.Rows}
	if order != nil {
		s.counts = make([]int, len(order))
	}
	for c, l := range order {
		s.counts[c] = countOf(sum, l)
	}
	if holdout <= 0 {
		return s, nil
	}
	// The tally counts rows by class whatever the weights: one zero
	// vector, not K, which a batched run could not hold at once (of one
	// weight at least: a point carries one).
	zero := [][]float64{make([]float64, max(sum.MaxIndex, 1))}
	t, err := b.Tally(&shard.Point{W: zero, Terms: shard.Terms{Bias: -1, Holdout: holdout, Loss: loss}})
	if err != nil {
		return nil, err
	}
	for c := range s.counts {
		s.counts[c] -= t.Rows[c]
	}
	held, _ := t.Total()
	s.rows -= held
	if s.rows == 0 {
		return nil, fmt.Errorf("fold %d holds every row", holdout)
	}
	return s, nil
}

// regularisation is lambda: given, or LIBLINEAR's 1/(C m).
func regularisation(cfg Config, rows int) (float64, error) {
	lambda := cfg.Lambda
	if lambda == 0 {
		if !(cfg.C > 0) {
			return 0, errors.New("the cost C must be positive")
		}
		lambda = 1 / (cfg.C * float64(rows))
	}
	if !(lambda >= minLambda) {
		return 0, fmt.Errorf("lambda = %.3g (C m = %.3g) is below %g, where the objective's arithmetic overflows double precision; the model stops changing long before (heart_scale: the same weights to 13 digits from C = 1e20 to 1e100): use a smaller C", lambda, 1/lambda, minLambda)
	}
	return lambda, nil
}

// batchSize is how many problems are minimised at a time (0: all), and
// whether memory decided it. One-vs-rest problems go in batches whose
// methods' state is at most what LIBLINEAR holds for the data (16 bytes
// a nonzero), or batchFloor: LIBLINEAR trains one class at a time, and
// all of a wide set's problems at once (news20.t's 20 L-BFGS states)
// made our peak many times its own for no gain in time, as a batch's
// passes carry its problems alone. Where the methods' state is small
// beside the data, all the problems go in one batch, whose passes stream
// the rows once for all of them.
//
// The state's estimate may also take at most half of MaxBytes: passes'
// buffers and the collector's headroom need the rest (a run's peak can
// be nearly twice the estimate). Problems that do not fit in it go in
// batches that do, one at a time if need be; only a problem that does
// not fit in MaxBytes alone is refused.
func batchSize(cfg Config, features, dim, n, K, nnz int) (batch int, memoryBound bool, err error) {
	batch = cfg.batch
	if batch <= 0 {
		budget := max(16*int64(nnz), batchFloor)
		batch = int(max(budget/max(stateBytes(dim, n, 0, 1), 1), 1))
	}
	if need := StateBytes(dim, n, K); cfg.MaxBytes > 0 && need > cfg.MaxBytes/2 {
		fit := max(batchFitting(dim, n, K, cfg.MaxBytes/2), 1)
		if batchFitting(dim, n, K, cfg.MaxBytes) < 1 {
			return 0, false, fmt.Errorf("largest feature index %d (%d of them in the data) with %d problem(s) needs about %s for the model and the optimiser's state (%s with one problem at a time); only %s is available",
				features, n, K, human(need), human(stateBytes(dim, n, K, 1)), human(cfg.MaxBytes))
		}
		if batch > fit {
			batch, memoryBound = fit, true
		}
	}
	if batch >= K {
		return 0, false, nil
	}
	return batch, memoryBound, nil
}

// batchFloor is the methods' state a batch may always hold, whatever
// the data's size.
const batchFloor = 8 << 20

// dataShape is the whole data's shape, a held-out fold's rows included:
// the choice of method must not depend on the fold.
func dataShape(metas []shard.Meta, sum shard.Summary, dim int, bias float64) osgm.Shape {
	shape := osgm.Shape{Dim: dim, NNZ: sum.NNZ, Shards: len(metas)}
	for _, m := range metas {
		shape.Pairs += m.Pairs
	}
	if bias >= 0 { // one more nonzero per row
		shape.Pairs += sum.NNZ + sum.Rows
	}
	return shape
}

// startPoints are the methods' x0 over their n coordinates: 0, or the
// initial model's weights on the live coordinates. A resumed run starts
// its problems yet to start (in batches) where the first run did; the
// others' x0 gives their dimensions only.
func startPoints(init *libsvm.Model, labels []int, K, dim, n int, live []int, bias float64) ([][]float64, error) {
	if init == nil {
		// One zero vector for every problem: the methods start from a
		// copy of theirs, and K of them would be a whole model's memory
		// from the first pass on, however few problems run at a time.
		zero, x0 := make([]float64, n), make([][]float64, K)
		for k := range x0 {
			x0[k] = zero
		}
		return x0, nil
	}
	x0, err := warmStart(init, labels, dim, bias)
	if err != nil {
		return nil, err
	}
	if live != nil { // dead coordinates start at their optimum, 0
		for k, x := range x0 {
			x0[k] = make([]float64, n)
			for i, j := range live {
				x0[k][i] = x[j]
			}
		}
	}
	return x0, nil
}

// zeroPass makes the pass at 0 that the stopping test needs, over some
// problems or all. It brings the Hessian's diagonal too (diag), for
// methods that start from it: every row is active at 0, so it is the
// data's column squares (with class weights), reduced as gradients are,
// the same bits on any backend. Problems in batches make it a batch at a
// time, so that its vectors are a batch's too.
type zeroPass struct {
	obj           osgm.Objective // for the pass over every problem
	K, n          int
	diag          bool
	warm          bool // the methods start elsewhere: the values at 0 are not theirs
	stop          *stopping
	start         time.Time
	firstGradient time.Duration // since start, at the first pass
}

// run is the pass over problems ks (nil: all) on obj; problems side by
// side make theirs at once, on forks.
func (z *zeroPass) run(obj osgm.Objective, ks []int) (st osgm.Start, err error) {
	m := len(ks)
	if ks == nil {
		m = z.K
	}
	x, f, g := vectors(m, z.n), make([]float64, m), vectors(m, z.n)
	b := &osgm.Pass{Op: osgm.OpEval, Ks: ks, X: x, F: f, G: g}
	if z.diag {
		st.Diag = vectors(m, z.n)
		b.Op, b.D = osgm.OpEvalDiag, st.Diag
	}
	if err = obj.Evaluate(b); err != nil {
		return st, err
	}
	z.stop.mu.Lock()
	defer z.stop.mu.Unlock()
	if z.firstGradient == 0 {
		z.firstGradient = time.Since(z.start)
	}
	st.GradTol = make([]float64, m)
	for i := range g {
		k := i
		if ks != nil {
			k = ks[i]
		}
		z.stop.g0norm[k] = vec.Norm(g[i])
		z.stop.set(k)
		st.GradTol[i] = z.stop.tol[k]
	}
	if !z.warm { // 0 is where the methods start
		st.F0, st.G0 = f, g
	}
	return st, nil
}

// timedObjective measures the time spent in passes over the data (on
// workers and on the bus), as opposed to the method's own arithmetic.
// Its forks add theirs to the same clock.
type timedObjective struct {
	obj   *objective.Objective
	clock *passClock
	fork  bool
}

// passClock is the time in passes of the objective, and of its forks,
// which make passes at once.
type passClock struct {
	main, side, forks atomic.Int64
}

// sideWall is the time of the forks' passes, those made at once counted
// once.
func (c *passClock) sideWall() time.Duration {
	return time.Duration(c.side.Load() / max(c.forks.Load(), 1))
}

func newTimed(obj *objective.Objective) *timedObjective {
	return &timedObjective{obj: obj, clock: &passClock{}}
}

func (t *timedObjective) Ops() osgm.Op { return t.obj.Ops() }

func (t *timedObjective) Evaluate(b *osgm.Pass) error {
	start := time.Now()
	defer func() {
		if t.fork {
			t.clock.side.Add(int64(time.Since(start)))
		} else {
			t.clock.main.Add(int64(time.Since(start)))
		}
	}()
	return t.obj.Evaluate(b)
}

// Place places problem k where the objective's backend can, its time
// counted as the forks' passes: the whole problem is one.
func (t *timedObjective) Place(k int, x0 []float64, p osgm.Problem, s osgm.Settings, h osgm.Hooks) (*osgm.Result, bool, error) {
	start := time.Now()
	defer func() { t.clock.side.Add(int64(time.Since(start))) }()
	return t.obj.Place(k, x0, p, s, h)
}

func (t *timedObjective) Fork() osgm.Objective {
	f := t.obj.Forked()
	if f == nil {
		return nil
	}
	t.clock.forks.Add(1)
	return &timedObjective{obj: f, clock: t.clock, fork: true}
}

func countOf(sum shard.Summary, label float64) int {
	for i, l := range sum.Labels {
		if l == label {
			return sum.LabelCount[i]
		}
	}
	return 0
}

// CheckBias refuses an initial model trained with a bias feature for a
// run without one, or the other way round: what the command line alone
// decides, so it can say so before the data is read.
func CheckBias(m *libsvm.Model, bias float64) error {
	if (m.Bias >= 0) != (bias >= 0) {
		return fmt.Errorf("initial model has bias %v, training uses %v: use the same -B", m.Bias, bias)
	}
	return nil
}

// warmStart maps a model's weights onto this problem's classes.
func warmStart(m *libsvm.Model, labels []int, dim int, bias float64) ([][]float64, error) {
	if err := CheckBias(m, bias); err != nil {
		return nil, err
	}
	if len(m.Labels) != len(labels) {
		return nil, fmt.Errorf("initial model has %d classes, the data %d", len(m.Labels), len(labels))
	}
	for i := range labels {
		if m.Labels[i] != labels[i] {
			return nil, fmt.Errorf("initial model's labels %v differ from the data's %v", m.Labels, labels)
		}
	}
	features := dim // the data's; the model's past them are dropped
	if bias >= 0 {
		features--
	}
	x := make([][]float64, len(m.W))
	for k, w := range m.W {
		x[k] = make([]float64, dim)
		copy(x[k], w[:min(m.NFeature, features)])
		if bias >= 0 {
			x[k][dim-1] = w[m.NFeature]
		}
	}
	return x, nil
}

// ObjectiveFor loads a data set locally and binds it to a model's classes,
// features, bias and loss, with lambda = 1/(C m) and, for a regression,
// the loss's epsilon: the objective that model was trained for.
func ObjectiveFor(path string, m *libsvm.Model, c, epsilon float64, parallel int) (*objective.Objective, error) {
	loss, ok := LossOf(m)
	if !ok {
		return nil, fmt.Errorf("solver_type %s: not a problem this trainer has (LIBLINEAR -s 0, 1, 2 or 11)", m.Solver)
	}
	info, err := input.Stat(path)
	if err != nil {
		return nil, err
	}
	shards, err := shard.Load(path, input.Layout(info.Size, 0), shard.Options{Parallel: parallel})
	if err != nil {
		return nil, err
	}
	b := objective.NewLocal(shards, parallel)
	sum := Summarize(b.Meta(), loss)
	order := make([]float64, len(m.Labels))
	for i, l := range m.Labels {
		order[i] = float64(l)
	}
	if err := b.SetClasses(order); err != nil {
		return nil, err
	}
	features := m.NFeature
	if int(sum.MaxIndex) > features {
		return nil, fmt.Errorf("%s has %d features, the model %d", path, sum.MaxIndex, m.NFeature)
	}
	bias := m.Bias
	if bias < 0 {
		bias = -1
	}
	obj := objective.New(b, features, 1/(c*float64(sum.Rows)), bias)
	obj.Loss, obj.Epsilon = loss, epsilon
	return obj, nil
}

// The coordinator holds per problem at most methodVectors vectors of the
// methods' length (L-BFGS's 10 pairs and its iterate, gradient, direction
// and trial point, the passes' arguments and results) and fullVectors of
// a model's (the model, and the one it started from).
const (
	methodVectors = 30
	fullVectors   = 2
)

// StateBytes estimates the coordinator's memory for K problems of dim
// coordinates, n of which the methods work over.
func StateBytes(dim, n, K int) int64 { return stateBytes(dim, n, K, K) }

// stateBytes is StateBytes with the methods working on batch problems at
// a time, every problem's model held.
func stateBytes(dim, n, K, batch int) int64 {
	return 8 * (int64(K)*int64(dim)*fullVectors + int64(batch)*int64(n)*methodVectors)
}

// batchFitting is the largest batch for which stateBytes is at most max
// (0: not even one problem at a time).
func batchFitting(dim, n, K int, max int64) int {
	free := max - stateBytes(dim, n, K, 0)
	if free <= 0 {
		return 0
	}
	return int(min(free/stateBytes(dim, n, 0, 1), int64(K)))
}

func human(b int64) string {
	const unit = 1 << 10
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}

// vectors is m zero vectors of n.
func vectors(m, n int) [][]float64 {
	out := make([][]float64, m)
	for k := range out {
		out[k] = make([]float64, n)
	}
	return out
}

// Losses are the problems this package trains, by LIBLINEAR's -s.
var Losses = map[int]shard.Loss{0: shard.Logistic, 2: shard.SquaredHinge, 11: shard.SquaredEpsilon}

// SolverOf is the LIBLINEAR solver whose problem loss l makes: its model
// files' solver_type.
func SolverOf(l shard.Loss) libsvm.Solver {
	for t, lt := range Losses {
		if lt == l {
			s, _ := libsvm.SolverNumbered(t)
			return s
		}
	}
	panic(fmt.Sprintf("train: no solver for the %v loss", l))
}

// LossOf is the loss of a model's problem, and whether this package
// trains it: a warm start needs the same problem's model (LIBLINEAR's
// -s 1 and -s 2 are one problem).
func LossOf(m *libsvm.Model) (shard.Loss, bool) {
	if m.L2LossSVM() {
		return shard.SquaredHinge, true
	}
	if s, ok := libsvm.SolverNamed(m.Solver); ok {
		l, ok := Losses[s.Type]
		return l, ok
	}
	return 0, false
}
