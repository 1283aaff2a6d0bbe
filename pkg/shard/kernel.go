package shard

import (
	"fmt"

	"github.com/osgm-svm/osgm/pkg/cols"
	"github.com/osgm-svm/osgm/pkg/reduce"
)

// Point is where the data term is evaluated: one weight vector per problem
// (K = 1 for two classes, one per class otherwise) over the global features,
// and the bias value with each problem's bias weight.
type Point struct {
	Terms
	W     [][]float64 // W[k][j], j a zero-based feature index
	WBias []float64   // W's bias weights, one per problem (when Bias >= 0)

	// Classes, when set, is the class each problem separates from the
	// rest, so a pass can carry some of the one-vs-rest problems only (a
	// pass costs in proportion to its problems). Nil: problem k is class k
	// (class 0 for a single binary problem). Tally needs it nil.
	Classes []int32
	// Stamp, when not zero, names W: Hessian-vector passes at the same
	// stamp (Newton's CG steps) reuse the rows' activity that the first
	// pass at it, EvalDiag or Hessian-vector, found, instead of
	// recomputing every margin. Stamps must not repeat for different
	// points. Single-problem points only.
	Stamp uint64
	// Live, when set, says that W carries the live coordinates only, in
	// order, the bias weight last as ever (see cols.LiveMap): workers get
	// points without the features no row holds. Shards must have seen
	// the map (CheckLive).
	Live *cols.LiveMap
}

// NewPoint views vectors laid out as features then (when bias >= 0) the
// bias weight at index features, as the kernels take them.
func NewPoint(x [][]float64, bias float64, features int) *Point {
	p := &Point{W: x, Terms: Terms{Bias: bias}}
	if bias >= 0 {
		p.WBias = make([]float64, len(x))
		for k := range x {
			p.WBias[k] = x[k][features]
		}
	}
	return p
}

// class is the class problem k separates from the rest.
func (p *Point) class(k int) int32 {
	if p.Classes != nil {
		return p.Classes[k]
	}
	return int32(k)
}

// K is the number of problems.
func (p *Point) K() int { return len(p.W) }

// binary reports whether a pass at p takes the binary kernels: one
// problem of two classes, or a regression. A one-vs-rest problem takes the multi-class
// arithmetic even alone (the last still learning, or a batch of one),
// whose sums are in another order: its bits then do not depend on which
// problems share its passes, whatever the method. Its value and
// Hessian-vector passes have loops of their own in that arithmetic
// (evalSeq, hessVecSeq).
func (s *Shard) binary(p *Point) bool {
	return p.K() == 1 && (s.classes <= 2 || p.Loss.Regression())
}

// Scratch is per-goroutine working memory for evaluations.
type Scratch struct {
	wl   []float64
	z    []float64
	coef []float64
	cols []uint32 // the shard's column map, decoded
	act  []int32  // a multi-class row's active problems
	sel  []rows   // each problem's rows (multi-class Hessian passes)
	// cache is the activity of the shard being evaluated (nil: none),
	// set by its evaluator: the cache belongs to whoever steps through
	// the points, not to the shard, which forks evaluate side by side.
	cache *Activity
	sq    []float64
	// A row's global columns and values, for EvalHess.
	hcols []int32
	hvals []float64
	// allProblems takes every row over every problem, as sparseRow would
	// not: the test that sparse rows change no bit compares the two.
	allProblems bool
}

// vecs are a single-problem pass's local vectors: the point's weights w,
// for a Hessian-vector pass the direction v, and g, which the pass adds
// into (the gradient, or H·v); with the bias feature's value (< 0: none)
// and the bias weights of w and v.
type vecs struct {
	w, v, g      []float64
	bias, wb, vb float64
}

// vecsAt is the vectors of a pass at p over local weights w into g.
func vecsAt(p *Point, w, g []float64) vecs {
	x := vecs{w: w, g: g, bias: p.Bias}
	if p.Bias >= 0 {
		x.wb = p.WBias[0]
	}
	return x
}

// along is x for a Hessian-vector pass along v, local vl.
func (x vecs) along(v *Point, vl []float64) vecs {
	x.v = vl
	if x.bias >= 0 {
		x.vb = v.WBias[0]
	}
	return x
}

func grow(b []float64, n int) []float64 {
	if cap(b) < n {
		return make([]float64, n)
	}
	return b[:n]
}

// gather copies the weights of the shard's columns into local, interleaved
// order (l*K+k), so one row's K margins read contiguous memory.
func (s *Shard) gather(p *Point, sc *Scratch) []float64 {
	K := p.K()
	sc.wl = grow(sc.wl, s.Cols.Len()*K)
	wl := sc.wl
	cm := s.colsFor(p)
	if K == 1 {
		cm.Gather(wl, p.W[0])
		return wl
	}
	sc.cols = cm.Append(sc.cols[:0])
	cols := sc.cols
	// Column by column: K reads, one from each problem's vector, and
	// one contiguous write. Problem by problem instead wrote one weight
	// per cache line of wl, K times over: on wide multi-class text that
	// gather cost more than the rows themselves.
	for l, g := range cols {
		dst := wl[l*K : l*K+K]
		for k := range dst {
			dst[k] = p.W[k][g]
		}
	}
	return wl
}

// PassKind is what a pass over a shard computes: the value and gradient
// (osgm.OpEval), with the Hessian's diagonal (OpEvalDiag) or whole
// (OpEvalHess), or a Hessian-vector product (OpHessVec). Shards know
// passes, not the methods that ask for them.
type PassKind uint8

const (
	PassEval PassKind = iota
	PassHessVec
	PassEvalDiag
	PassEvalHess
)

// Pass evaluates kind at p (and v, for Hessian-vector products) into
// out, with sc's memory and act, the activity this caller keeps for s.
func (s *Shard) Pass(kind PassKind, p, v *Point, sc *Scratch, act *Activity, out *reduce.Partial) {
	sc.cache = act
	switch kind {
	case PassEval:
		s.Eval(p, sc, out)
	case PassHessVec:
		s.HessVec(p, v, sc, out)
	case PassEvalDiag:
		s.EvalDiag(p, sc, out)
	case PassEvalHess:
		s.EvalHess(p, sc, out)
	default:
		panic(fmt.Sprintf("shard: unknown pass %d", kind))
	}
}

func (s *Shard) newPartial(K int, out *reduce.Partial) {
	out.Shard = s.ID
	out.Zero(K, s.Cols.Len())
}

// Eval computes the shard's loss and gradient sums at p in one pass over
// the rows: each row's margins, loss terms and gradient contributions come
// from a single read of the row.
func (s *Shard) Eval(p *Point, sc *Scratch, out *reduce.Partial) {
	K := p.K()
	s.newPartial(K, out)
	wl := s.gather(p, sc)
	if K == 1 {
		// A lone one-vs-rest problem (seq) takes a loop of its own in the
		// multi-class loop's arithmetic: see HessVec.
		seq := !s.binary(p)
		x := vecsAt(p, wl, out.Grad)
		r := s.rowsFor(p, 0)
		out.Loss[0], out.BiasGrad[0] = s.kernels().evalOne(s, &r, x, seq)
		return
	}
	sc.z = grow(sc.z, K)
	sc.coef = grow(sc.coef, K)
	if cap(sc.act) < K {
		sc.act = make([]int32, K)
	}
	s.kernels().evalMany(s, p, wl, sc, out)
}

// rows says, for one problem, which rows a pass counts and how much each
// one's loss weighs: rows of the held-out fold count nothing, the others
// their side's weight (w[0] positive, w[1] negative).
type rows struct {
	fold []uint16 // nil: every row counts
	hold uint16
	pos  int32 // the class that is positive
	w    [2]float64
	loss Loss
	// class is each row's class, or with ys (regression) its target's
	// index in ys; eps is the regression loss's epsilon.
	class []int32
	ys    []float64
	eps   float64

	// Hessian-vector passes: act holds a bit per row, set when the row
	// is active at the point, row i's at i*stride+off (the point's K
	// problems share one cache), and hw its Hessian weight when the loss
	// is not Cached; known says they are those of this point already
	// (nil act: no caching).
	act         []uint64
	hw          []float64
	stride, off int
	known       bool
}

// rowsFor is problem k's row selection at p.
func (s *Shard) rowsFor(p *Point, k int) rows {
	r := rows{w: [2]float64{1, 1}, pos: p.class(k), loss: p.Loss, class: s.Class}
	if p.Loss.Regression() {
		r.class, r.ys, r.pos, r.eps = s.LabelOf, s.Labels, -1, p.Epsilon
	}
	if len(p.Weights) > 0 {
		r.w = [2]float64{p.Weights[2*k], p.Weights[2*k+1]}
	}
	if p.Holdout > 0 {
		r.fold, r.hold = s.Fold, uint16(p.Holdout)
	}
	return r
}

func (r *rows) skip(i int) bool { return r.fold != nil && r.fold[i] == r.hold }

// y is the label of a row of class (or target index) c on side sd: its
// target in a regression, else ±1. The squared hinge's paths read signs
// directly.
func (r *rows) y(sd int, c int32) float64 {
	if r.ys != nil {
		return r.ys[c]
	}
	return signs[sd]
}

// side is 0 for a row of the positive class, 1 for the others: the index
// of its label in signs and of its weight in w.
func (r *rows) side(c int32) int {
	if c == r.pos {
		return 0
	}
	return 1
}

var signs = [2]float64{1, -1}

// margins finishes one row of a multi-class pass: loss terms and the
// gradient coefficients c_k φ'(z_k) of the active problems, c_k
// the row's weight in problem k (nil weights: 1). It lists the active
// problems in act, in order, and returns how many there are.
func margins(p *Point, class int32, z, coef, loss []float64, act []int32) (n int) {
	weights := p.Weights
	for k := range z {
		y, w := -1.0, 1.0
		if p.class(k) == class {
			y = 1
		}
		if len(weights) > 0 {
			w = weights[2*k]
			if y < 0 {
				w = weights[2*k+1]
			}
		}
		l, c, ok := hingeGrad(y, z[k], w)
		if p.Loss != SquaredHinge {
			l, c, ok = p.Loss.grad(y, z[k], w, p.Epsilon)
		}
		if ok {
			loss[k] += l
			coef[k] = c
			act[n] = int32(k)
			n++
		} else {
			coef[k] = 0
		}
	}
	return n
}

// sparseRow says a row's gradient goes problem by problem down its list
// of active ones: near an optimum a row is active in few of many
// one-vs-rest problems, and skipping a zero coefficient changes no bit
// (a sum that starts at +0 never becomes -0, so adding +0 or -0 leaves
// it as it is).
func (sc *Scratch) sparseRow(n, K int) bool { return 2*n < K && !sc.allProblems }

// sparse is act when sparseRow holds, else nil: scatterRow's problems.
func (sc *Scratch) sparse(act []int32, K int) []int32 {
	if sc.sparseRow(len(act), K) {
		return act
	}
	return nil
}

func addBias(p *Point, z []float64) {
	if p.Bias >= 0 {
		for k := range z {
			z[k] += float64(p.Bias * p.WBias[k])
		}
	}
}

func addBiasGrad(p *Point, coef, gb []float64) {
	if p.Bias >= 0 {
		for k := range coef {
			gb[k] += float64(coef[k] * p.Bias)
		}
	}
}
