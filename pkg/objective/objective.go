package objective

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/osgm-svm/osgm/pkg/cols"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/shard"
)

// Backend runs passes over every shard, wherever the shards live: in this
// process (Local) or on workers across the network. It hands each shard's
// partial to add, one call at a time, in any order; add owns the partial.
type Backend interface {
	// Meta lists the shards in shard order.
	Meta() []shard.Meta
	// SetClasses fixes the class of every row from the global label order.
	SetClasses(order []float64) error
	// SetFolds splits the rows into n cross-validation folds, numbered
	// 1..n as Folds does; points then name a fold to hold out.
	SetFolds(n int) error
	Eval(op osgm.Op, p, v *shard.Point, add func(*reduce.Partial) error) error
	// Tally counts rows and correct predictions by class (only the
	// held-out fold's rows when p.Holdout is set).
	Tally(p *shard.Point) (shard.Tally, error)

	// What a backend can do beyond passes over its shards, each
	// answering "cannot" where it cannot (Alone answers so for all).
	//
	// Fork is a copy of the backend over the same data for another
	// goroutine (Local: the shards are in this process); ErrNoFork where
	// its shards are elsewhere.
	Fork(live *cols.LiveMap) (Backend, error)
	// Place minimises a whole problem where its data is (a worker that
	// holds every shard) over an objective of the same constants; ok
	// false: it cannot (see osgm.Objective's Place).
	Place(c Constants, k int, x0 []float64, p osgm.Problem, s osgm.Settings, h osgm.Hooks) (r *osgm.Result, ok bool, err error)
	// PlacePass makes a whole pass where its data is, reduced there to
	// the sums this objective would have added; ok false: it cannot
	// (this pass, or any).
	PlacePass(c Constants, b *osgm.Pass) (ok bool, err error)
	// Release takes back a partial Eval gave, once added, for reuse.
	Release(p *reduce.Partial)
}

// ErrNoFork is Fork's error where the shards are not in this process.
var ErrNoFork = errors.New("objective: the shards are not in this process: no fork")

// Alone is a Backend's answers where it can do nothing beyond its
// passes: it does not fork, place problems or passes, or reuse
// partials. Embed it.
type Alone struct{}

// Fork fails: ErrNoFork.
func (Alone) Fork(*cols.LiveMap) (Backend, error) { return nil, ErrNoFork }

// Place declines.
func (Alone) Place(Constants, int, []float64, osgm.Problem, osgm.Settings, osgm.Hooks) (*osgm.Result, bool, error) {
	return nil, false, nil
}

// PlacePass declines.
func (Alone) PlacePass(Constants, *osgm.Pass) (bool, error) { return false, nil }

// Release lets the partial go.
func (Alone) Release(*reduce.Partial) {}

// Objective is the L2-regularised objective of K problems over a
// backend's shards:
//
//	f_k(x) = (1/m) sum_i φ(y_ik, a_i·x) + (lambda/2) ||x||^2
//
// φ its Loss (the squared hinge max(0, 1 - y z)^2 unless set), where a_i
// carries the bias feature when Bias >= 0, and x's last entry is then the
// bias weight. It is an osgm.Objective.
type Objective struct {
	Backend  Backend
	Rows     int // m: the rows counted, which excludes a held-out fold
	Features int
	Lambda   float64
	// Terms go into every point (see Point): the loss, the bias feature,
	// class weights that scale rows' losses, a held-out fold whose rows
	// are left out.
	shard.Terms

	cols []cols.List
	// live, when set, is the coordinates the objective works over (see
	// LeaveOutDead); cols are then positions among them.
	live *cols.LiveMap
	sum  reduce.Total
	// The last stamped point, as its problems and their methods' names
	// for it (osgm.Request.At), and its stamp (see Point.Stamp).
	lastKs    []int
	lastAt    []uint64
	lastStamp uint64
	red       *reduce.Reducer
	normSq    float64
}

// New binds a backend to the problem's constants.
func New(b Backend, features int, lambda, bias float64) *Objective {
	o := &Objective{Backend: b, Features: features, Lambda: lambda, Terms: shard.Terms{Bias: bias}}
	for _, m := range b.Meta() {
		o.Rows += m.Rows
		o.cols = append(o.cols, m.Cols)
	}
	o.red = newReducer(b, o.cols)
	for _, m := range b.Meta() {
		o.normSq += m.NormSq
	}
	return o
}

// Forked is the objective over a fork of its backend, for minimising
// some problems on another goroutine, side by side with this objective
// and its other forks: every sum comes out as it would here, the
// reduction tree being the same. It is nil when the backend cannot fork
// (its shards are on workers) or its shards cannot take the live
// coordinates (which the first pass would then report). Call it after
// LeaveOutDead.
func (o *Objective) Forked() *Objective {
	b, err := o.Backend.Fork(o.live)
	if err != nil {
		return nil
	}
	return &Objective{Backend: b, Rows: o.Rows, Features: o.Features, Lambda: o.Lambda, Terms: o.Terms,
		cols: o.cols, live: o.live, normSq: o.normSq, red: newReducer(b, o.cols)}
}

// Fork is Forked as the methods take it (osgm.Objective's Fork).
func (o *Objective) Fork() osgm.Objective {
	if f := o.Forked(); f != nil {
		return f
	}
	return nil
}

// Constants are what an Objective adds to its backend's shards: with
// the same shards, classes and folds they make the same objective
// (Build).
type Constants struct {
	Rows, Features int
	Lambda         float64
	shard.Terms
	// Live says the objective left out its dead coordinates
	// (LeaveOutDead), which the shards determine.
	Live bool
}

// Constants are the objective's.
func (o *Objective) Constants() Constants {
	return Constants{Rows: o.Rows, Features: o.Features, Lambda: o.Lambda, Terms: o.Terms, Live: o.live != nil}
}

// Build is the objective of constants c over b.
func (c Constants) Build(b Backend) *Objective {
	o := New(b, c.Features, c.Lambda, c.Bias)
	o.Rows, o.Terms = c.Rows, c.Terms
	if c.Live {
		o.LeaveOutDead()
	}
	return o
}

// Place minimises problem k where the backend places it (see Placer).
func (o *Objective) Place(k int, x0 []float64, p osgm.Problem, s osgm.Settings, h osgm.Hooks) (*osgm.Result, bool, error) {
	return o.Backend.Place(o.Constants(), k, x0, p, s, h)
}

// newReducer is a reduction of b's shards' partials, handing each back to
// b once added.
func newReducer(b Backend, lists []cols.List) *reduce.Reducer {
	red := reduce.NewReducer(lists)
	red.Release = b.Release
	return red
}

// LeaveOutDead makes the objective work over the coordinates of features
// some row holds, and the bias, when enough others are dead (see
// LiveBits): its vectors, and the points workers get, hold those only.
// It returns their positions in the full vectors, or nil when it changed
// nothing. Call it before any pass.
func (o *Objective) LeaveOutDead() []int {
	full := o.fullDim()
	b := LiveBits(o.Backend.Meta(), o.Features, full)
	if b == nil {
		return nil
	}
	live, err := cols.NewLiveMap(b, full)
	if err != nil {
		return nil // LiveBits sizes b for full: not reached
	}
	var ranked []uint32
	for i, c := range o.cols {
		ranked = c.Append(ranked[:0])
		for l, j := range ranked {
			ranked[l], _ = live.Rank(j) // LiveBits set every shard's columns
		}
		o.cols[i] = cols.NewList(ranked)
	}
	release := o.red.Release
	o.red = reduce.NewReducer(o.cols)
	o.red.Release = release
	o.live = live
	return live.Indices()
}

// fullDim is the length of a model's vectors: the features, plus the bias.
func (o *Objective) fullDim() int {
	if o.Bias >= 0 {
		return o.Features + 1
	}
	return o.Features
}

// Dim is the length of each problem's vector: the (live) features, plus
// the bias.
func (o *Objective) Dim() int {
	if o.live != nil {
		return o.live.Len()
	}
	return o.fullDim()
}

// features is how many of a vector's coordinates are features': the bias
// weight, if any, sits there.
func (o *Objective) features() int {
	if o.Bias >= 0 {
		return o.Dim() - 1
	}
	return o.Dim()
}

// Point views x, vectors of Dim coordinates, as a kernel point.
func (o *Objective) Point(x [][]float64) *shard.Point {
	p := shard.NewPoint(x, o.Bias, o.features())
	p.Terms, p.Live = o.Terms, o.live
	return p
}

// ModelPoint views a model's weights, vectors of every feature, as a
// kernel point for this objective's data, class weights and held-out fold.
func (o *Objective) ModelPoint(w [][]float64) *shard.Point {
	p := shard.NewPoint(w, o.Bias, o.Features)
	p.Terms = o.Terms
	return p
}

// pointFor is the kernel point of problems ks (nil: all) at x.
func (o *Objective) pointFor(ks []int, x [][]float64) *shard.Point {
	p := o.Point(x)
	if ks == nil {
		return p
	}
	p.Classes = make([]int32, len(ks))
	for i, k := range ks {
		p.Classes[i] = int32(k)
	}
	if o.Weights != nil {
		p.Weights = make([]float64, 0, 2*len(ks))
		for _, k := range ks {
			p.Weights = append(p.Weights, o.Weights[2*k], o.Weights[2*k+1])
		}
	}
	return p
}

// stamp gives the point of a Hessian-vector or EvalDiag pass a stamp:
// the last one when its problems and their methods' names for their
// points (at) are the last stamped pass's, all named (Newton's CG steps
// share their point, and its accepted trial's EvalDiag pass), a fresh
// random one otherwise, so workers can keep which rows are active.
func (o *Objective) stamp(ks []int, at []uint64) {
	named := len(at) > 0 && !slices.Contains(at, 0)
	same := named && o.lastStamp != 0 && slices.Equal(ks, o.lastKs) && slices.Equal(at, o.lastAt)
	if same {
		return
	}
	o.lastKs = append(o.lastKs[:0], ks...)
	o.lastAt = append(o.lastAt[:0], at...)
	o.lastStamp = rand.Uint64() | 1
}

// pass runs one reduction of op for problems ks (nil: all) into out (the
// data sums, unscaled): a vector per problem, two for osgm.OpEvalDiag.
func (o *Objective) pass(op osgm.Op, ks []int, x, v [][]float64, out [][]float64) ([]float64, error) {
	K := len(out)
	o.sum.Loss = growTo(o.sum.Loss, K)
	o.sum.BiasGrad = growTo(o.sum.BiasGrad, K)
	o.sum.Grad = o.sum.Grad[:0]
	o.sum.Hess = o.sum.Hess[:0]
	if op == osgm.OpEvalHess {
		o.sum.Hess = growTo(o.sum.Hess, shard.HessLen(o.Dim()))
	}
	for k := range out {
		o.sum.Grad = append(o.sum.Grad, out[k][:o.features()])
	}
	red := o.red
	red.Reset(&o.sum)
	var vp *shard.Point
	if v != nil {
		vp = o.pointFor(ks, v)
	}
	pt := o.pointFor(ks, x)
	if op == osgm.OpHessVec || op == osgm.OpEvalDiag {
		pt.Stamp = o.lastStamp
	}
	if err := o.Backend.Eval(op, pt, vp, func(p *reduce.Partial) error {
		if p.Group {
			_, err := red.AddNode(reduce.NodeID{Level: p.Level, Index: p.Shard}, p)
			return err
		}
		_, err := red.Add(p)
		return err
	}); err != nil {
		return nil, err
	}
	if !red.Done() {
		return nil, fmt.Errorf("evaluation incomplete: shards %v missing", red.Missing())
	}
	if o.Bias >= 0 {
		for k := range out {
			out[k][o.features()] = o.sum.BiasGrad[k]
		}
	}
	return o.sum.Loss, nil
}

// Ops is every evaluation the kernels make.
func (o *Objective) Ops() osgm.Op { return osgm.OpEval | osgm.OpDiag | osgm.OpHess | osgm.OpHessVec }

// Evaluate makes one pass over the data for b.Op, for the problems b.Ks
// (nil: all) held in b's vectors in that order: a pass costs in
// proportion to the problems it carries.
func (o *Objective) Evaluate(b *osgm.Pass) error {
	if ok, err := o.Backend.PlacePass(o.Constants(), b); ok || err != nil {
		return err
	}
	switch b.Op {
	case osgm.OpEval:
		return o.evalSome(b.Ks, b.X, b.F, b.G)
	case osgm.OpEvalDiag:
		return o.evalDiagSome(b.Ks, b.At, b.X, b.F, b.G, b.D)
	case osgm.OpEvalHess:
		return o.evalHessSome(b.Ks, b.X, b.F, b.G, b.H)
	case osgm.OpHessVec:
		return o.hessVecSome(b.Ks, b.At, b.X, b.V, b.HV)
	}
	return fmt.Errorf("%w: %v", osgm.ErrUnsupported, b.Op)
}

// Eval computes every problem's value and gradient in one pass.
func (o *Objective) Eval(x [][]float64, f []float64, g [][]float64) error {
	return o.evalSome(nil, x, f, g)
}

// evalSome is Eval for the problems ks only (nil: all), held in x, f and g
// in the order of ks.
func (o *Objective) evalSome(ks []int, x [][]float64, f []float64, g [][]float64) error {
	loss, err := o.pass(osgm.OpEval, ks, x, nil, g)
	if err != nil {
		return err
	}
	o.finishEval(x, loss, f, g)
	return nil
}

// finishEval turns a pass's data sums into f and g: the 1/m scaling and
// the regulariser.
func (o *Objective) finishEval(x [][]float64, loss, f []float64, g [][]float64) {
	m := float64(o.Rows)
	for k := range x {
		sq := 0.0
		for j, xj := range x[k] {
			sq += float64(xj * xj)
			g[k][j] = g[k][j]/m + float64(o.Lambda*xj)
		}
		f[k] = loss[k]/m + float64(o.Lambda/2*sq)
	}
}

// hessVecSome computes hv[k] = (lambda I + (2/m) A^T D A) v[k], D the
// rows' Hessian weights at x[k] (Loss.curv: for the squared hinge, the
// class weight of the active rows and zero elsewhere), for the problems
// ks (nil: all).
func (o *Objective) hessVecSome(ks []int, at []uint64, x, v, hv [][]float64) error {
	o.stamp(ks, at)
	if _, err := o.pass(osgm.OpHessVec, ks, x, v, hv); err != nil {
		return err
	}
	m := float64(o.Rows)
	for k := range x {
		for j := range hv[k] {
			hv[k][j] = 2*hv[k][j]/m + float64(o.Lambda*v[k][j])
		}
	}
	return nil
}

// evalDiagSome is evalSome that also computes, in the same pass, d[k]: the
// diagonal of the generalised Hessian at x[k], lambda + (2/m) sum over the
// rows active at x[k] of d a_j^2, d the row's Hessian weight (see
// hessVecSome; 0 in a held-out fold). Newton's preconditioner is built from it at every
// iterate, as LIBLINEAR's is.
//
// The pass is stamped: it records which rows are active at x, so that
// Newton's Hessian-vector passes at an accepted trial point do not
// compute every margin again. One point is remembered: after a rejected
// trial, the next pass at the iterate finds the activity afresh.
func (o *Objective) evalDiagSome(ks []int, at []uint64, x [][]float64, f []float64, g, d [][]float64) error {
	o.stamp(ks, at)
	loss, err := o.pass(osgm.OpEvalDiag, ks, x, nil, append(slices.Clip(g), d...))
	if err != nil {
		return err
	}
	o.finishEval(x, loss, f, g)
	m := float64(o.Rows)
	for k := range d {
		for j := range d[k] {
			d[k][j] = o.Lambda + 2*d[k][j]/m
		}
	}
	return nil
}

// evalHessSome is evalSome that also computes, in the same pass, h[k]:
// the generalised Hessian at x[k], lambda I + (2/m) sum over the rows
// active at x[k] of d a a^T (see hessVecSome), as a dense symmetric Dim x Dim matrix, row
// by row. One problem at a time: a pass carries one Hessian.
func (o *Objective) evalHessSome(ks []int, x [][]float64, f []float64, g, h [][]float64) error {
	if len(x) != 1 {
		return fmt.Errorf("objective: a Hessian pass carries one problem, not %d", len(x))
	}
	n, m := o.Dim(), float64(o.Rows)
	if n > shard.MaxHessDim {
		return fmt.Errorf("objective: a Hessian over %d coordinates is too large (at most %d)", n, shard.MaxHessDim)
	}
	if len(h[0]) != n*n {
		return fmt.Errorf("objective: Hessian buffer of %d entries for dimension %d", len(h[0]), n)
	}
	loss, err := o.pass(osgm.OpEvalHess, ks, x, nil, g)
	if err != nil {
		return err
	}
	o.finishEval(x, loss, f, g)
	for a := range n {
		row := o.sum.Hess[shard.HessAt(n, a, a)-a:]
		for b := a; b < n; b++ {
			v := 2 * row[b] / m
			if a == b {
				v += o.Lambda
			}
			h[0][a*n+b], h[0][b*n+a] = v, v
		}
	}
	return nil
}

// LipschitzBound is (2/m) b sum_i ||a_i||^2 + lambda, b the loss's bound
// on φ”/2 (1 for the squared hinge): a bound on the Hessian's trace,
// cheap and always at least the true constant.
func (o *Objective) LipschitzBound() float64 {
	s := o.normSq
	if o.Bias >= 0 {
		s += float64(float64(o.Rows) * o.Bias * o.Bias)
	}
	return 2*float64(s*o.Loss.CurvBound())/float64(o.Rows) + o.Lambda
}

// growTo is b with length n, its memory reused when it has room.
func growTo(b []float64, n int) []float64 { return slices.Grow(b[:0], n)[:n] }
