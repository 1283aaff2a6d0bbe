// The plan: what a run settles from the shards' descriptions and the
// flags before its first pass (classes, problems, lambda, batches).

package train

import (
	"errors"
	"fmt"
	"slices"

	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/shard"
)

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
	p.sum = shard.Summarize(metas, cfg.Loss)
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

func countOf(sum shard.Summary, label float64) int {
	for i, l := range sum.Labels {
		if l == label {
			return sum.LabelCount[i]
		}
	}
	return 0
}

// vectors is m zero vectors of n.
func vectors(m, n int) [][]float64 {
	out := make([][]float64, m)
	for k := range out {
		out[k] = make([]float64, n)
	}
	return out
}
