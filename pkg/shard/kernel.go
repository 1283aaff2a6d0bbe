package shard

import "unsafe"

// Point is where the data term is evaluated: one weight vector per problem
// (K = 1 for two classes, one per class otherwise) over the global features,
// and the bias value with each problem's bias weight.
type Point struct {
	W     [][]float64 // W[k][j], j a zero-based feature index
	Bias  float64     // the bias feature's value; < 0 means no bias
	WBias []float64   // W's bias weights, one per problem (when Bias >= 0)

	// Weights, when set, scale each row's loss by its class's weight
	// (LIBLINEAR's -wi): Weights[2k] for the rows positive in problem k,
	// Weights[2k+1] for the others. Nil means every weight is 1.
	Weights []float64
	// Holdout, when positive, is a cross-validation fold: Eval and HessVec
	// leave its rows out, and Tally counts only them. Shards must have
	// their folds set (SetFolds).
	Holdout int
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
	// order, the bias weight last as ever (see LiveMap): workers get
	// points without the features no row holds. Shards must have seen
	// the map (CheckLive).
	Live *LiveMap
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

// binary reports whether a pass over K problems takes the binary
// kernels: two classes only. A one-vs-rest problem takes the multi-class
// arithmetic even alone (the last still learning, or a batch of one),
// whose sums are in another order: its bits then do not depend on which
// problems share its passes, whatever the method. Its value and
// Hessian-vector passes have loops of their own in that arithmetic
// (evalSeq, hessVecSeq).
func (s *Shard) binary(K int) bool { return K == 1 && s.classes <= 2 }

// Partial is one shard's contribution to the data term, in the shard's
// local columns. The coordinator adds partials in shard order.
type Partial struct {
	Shard    int       // the shard, or the node's index when Group is set
	Group    bool      // a node's sum (see Reducer), over the node's columns
	Level    int       // with Group: the node's level (0: a group)
	Loss     []float64 // per problem: sum of max(0, 1 - y a·w)^2
	Grad     []float64 // local column l, problem k at l*K+k: sum of -2 y (1 - z) a
	BiasGrad []float64 // per problem, the bias feature's gradient sum
	// Hess, for OpEvalHess only, is the data part of the Hessian over the
	// point's whole dimension, packed (see HessLen); nil otherwise.
	Hess []float64
	// Seconds is how long the worker that sent it had been computing the
	// round when it did: the coordinator splits round time into compute
	// and communication with it. Zero in-process.
	Seconds float64
}

// Scratch is per-goroutine working memory for evaluations.
type Scratch struct {
	wl   []float64
	z    []float64
	coef []float64
	cols []uint32 // the shard's column map, decoded
	act  []int32  // a multi-class row's active problems
	sel  []rows   // each problem's rows (multi-class Hessian passes)
	sq   []float64
	// A row's global columns and values, for EvalHess.
	hcols []int32
	hvals []float64
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
		cm.gather(wl, p.W[0])
		return wl
	}
	sc.cols = cm.Append(sc.cols[:0])
	cols := sc.cols
	// Column by column: K reads, one from each problem's vector, and
	// one contiguous write. Problem by problem instead wrote one weight
	// per cache line of wl, K times over: on news20.t (20 classes, each
	// of 16 shards touching 9,000 of 62,060 columns) that gather cost
	// more than the rows themselves.
	for l, g := range cols {
		dst := wl[l*K : l*K+K]
		for k := range dst {
			dst[k] = p.W[k][g]
		}
	}
	return wl
}

func (s *Shard) newPartial(K int, out *Partial) {
	out.Shard = s.ID
	out.Loss = grow(out.Loss, K)
	out.BiasGrad = grow(out.BiasGrad, K)
	out.Grad = grow(out.Grad, s.Cols.Len()*K)
	out.Hess = out.Hess[:0]
	clear(out.Loss)
	clear(out.BiasGrad)
	clear(out.Grad)
}

// Eval computes the shard's loss and gradient sums at p in one pass over
// the rows: each row's margins, loss terms and gradient contributions come
// from a single read of the row.
func (s *Shard) Eval(p *Point, sc *Scratch, out *Partial) {
	K := p.K()
	s.newPartial(K, out)
	wl := s.gather(p, sc)
	if K == 1 {
		// A lone one-vs-rest problem (seq) takes a loop of its own in the
		// multi-class loop's arithmetic: see HessVec.
		seq := !s.binary(K)
		wb := 0.0
		if p.Bias >= 0 {
			wb = p.WBias[0]
		}
		var loss, gb float64
		r := s.rowsFor(p, 0)
		switch {
		case s.Idx16 != nil:
			loss, gb = evalOne(s, s.Idx16, &r, wl, out.Grad, p.Bias, wb, seq)
		case s.Idx24 != nil:
			loss, gb = evalOne(s, s.Idx24, &r, wl, out.Grad, p.Bias, wb, seq)
		default:
			loss, gb = evalOne(s, s.Idx, &r, wl, out.Grad, p.Bias, wb, seq)
		}
		out.Loss[0], out.BiasGrad[0] = loss, gb
		return
	}
	sc.z = grow(sc.z, K)
	sc.coef = grow(sc.coef, K)
	if cap(sc.act) < K {
		sc.act = make([]int32, K)
	}
	switch {
	case s.Idx16 != nil:
		evalMany(s, s.Idx16, p, wl, sc, out)
	case s.Idx24 != nil:
		evalMany(s, s.Idx24, p, wl, sc, out)
	default:
		evalMany(s, s.Idx, p, wl, sc, out)
	}
}

// valuesOf is the shard's values held in val.
func valuesOf[V value](s *Shard, val []V) values[V] { return values[V]{val, s.Table, s.Scale} }

// evalOne and evalMany pick the kernel for the shard's value storage, with
// its column ids of any width.
func evalOne[I colID](s *Shard, idx []I, r *rows, wl, gl []float64, bias, wb float64, seq bool) (loss, gb float64) {
	switch {
	case s.Values == Ones && seq:
		return evalSeqOnes(s.RowPtr, idx, s.Class, r, wl, gl, bias, wb)
	case s.Values == Ones:
		return evalOnes(s.RowPtr, idx, s.Class, r, wl, gl, bias, wb)
	case s.Code8 != nil:
		return evalValues(s, idx, valuesOf(s, s.Code8), r, wl, gl, bias, wb, seq)
	case s.Code16 != nil:
		return evalValues(s, idx, valuesOf(s, s.Code16), r, wl, gl, bias, wb, seq)
	case s.Val32 != nil:
		return evalValues(s, idx, valuesOf(s, s.Val32), r, wl, gl, bias, wb, seq)
	case s.Mant != nil:
		return evalValues(s, idx, valuesOf(s, s.Mant), r, wl, gl, bias, wb, seq)
	default:
		return evalValues(s, idx, valuesOf(s, s.Val64), r, wl, gl, bias, wb, seq)
	}
}

func evalValues[V value, I colID](s *Shard, idx []I, vs values[V], r *rows, wl, gl []float64, bias, wb float64, seq bool) (loss, gb float64) {
	if seq {
		return evalSeq(s.RowPtr, idx, vs, s.Class, r, wl, gl, bias, wb)
	}
	return evalBinary(s.RowPtr, idx, vs, s.Class, r, wl, gl, bias, wb)
}

// evalSeq and evalSeqOnes are evalMulti and evalMultiOnes for a lone
// problem: a row's margin summed in order and then scaled, where
// evalBinary's is four-way and multiplied by the scale's inverse. Two,
// as hessVecSeq's pair (see there).
func evalSeq[V value, I colID](rowPtr []uint32, idx []I, vs values[V], class []int32, r *rows, wl, gl []float64, bias, wb float64) (loss, gb float64) {
	scale := vs.scale
	class = class[:len(rowPtr)-1]
	m := newRowView(rowPtr, idx, vs)
	wp, gp := unsafe.Pointer(unsafe.SliceData(wl)), unsafe.Pointer(unsafe.SliceData(gl))
	for i := range class {
		if r.skip(i) {
			continue
		}
		a, b := uintptr(rowPtr[i]), uintptr(rowPtr[i+1])
		var z float64
		for q := a; q < b; q++ {
			z += m.val(q) * *at(wp, m.col(q))
		}
		z /= scale
		if bias >= 0 {
			z += bias * wb
		}
		sd := r.side(class[i]) & 1
		y := signs[sd]
		if d := 1 - y*z; d > 0 {
			w := r.w[sd]
			loss += w * d * d
			c := -2 * w * y * d
			if bias >= 0 {
				gb += c * bias
			}
			c /= scale
			for q := a; q < b; q++ {
				*at(gp, m.col(q)) += c * m.val(q)
			}
		}
	}
	return loss, gb
}

func evalSeqOnes[I colID](rowPtr []uint32, idx []I, class []int32, r *rows, wl, gl []float64, bias, wb float64) (loss, gb float64) {
	class = class[:len(rowPtr)-1]
	m := newColView(rowPtr, idx)
	wp, gp := unsafe.Pointer(unsafe.SliceData(wl)), unsafe.Pointer(unsafe.SliceData(gl))
	for i := range class {
		if r.skip(i) {
			continue
		}
		a, b := uintptr(rowPtr[i]), uintptr(rowPtr[i+1])
		var z float64
		for q := a; q < b; q++ {
			z += *at(wp, m.col(q))
		}
		if bias >= 0 {
			z += bias * wb
		}
		sd := r.side(class[i]) & 1
		y := signs[sd]
		if d := 1 - y*z; d > 0 {
			w := r.w[sd]
			loss += w * d * d
			c := -2 * w * y * d
			if bias >= 0 {
				gb += c * bias
			}
			for q := a; q < b; q++ {
				*at(gp, m.col(q)) += c
			}
		}
	}
	return loss, gb
}

func evalMany[I colID](s *Shard, idx []I, p *Point, wl []float64, sc *Scratch, out *Partial) {
	switch {
	case s.Values == Ones:
		evalMultiOnes(s, idx, p, wl, sc, out)
	case s.Code8 != nil:
		evalMulti(s, idx, valuesOf(s, s.Code8), p, wl, sc, out)
	case s.Code16 != nil:
		evalMulti(s, idx, valuesOf(s, s.Code16), p, wl, sc, out)
	case s.Val32 != nil:
		evalMulti(s, idx, valuesOf(s, s.Val32), p, wl, sc, out)
	case s.Mant != nil:
		evalMulti(s, idx, valuesOf(s, s.Mant), p, wl, sc, out)
	default:
		evalMulti(s, idx, valuesOf(s, s.Val64), p, wl, sc, out)
	}
}

// rows says, for one problem, which rows a pass counts and how much each
// one's loss weighs: rows of the held-out fold count nothing, the others
// their side's weight (w[0] positive, w[1] negative).
type rows struct {
	fold []uint16 // nil: every row counts
	hold uint16
	pos  int32 // the class that is positive
	w    [2]float64

	// Hessian-vector passes: act holds a bit per row, set when the row
	// is active at the point, row i's at i*stride+off (the point's K
	// problems share one cache); known says the bits are those of this
	// point already (nil act: no caching).
	act         []uint64
	stride, off int
	known       bool
}

// rowsFor is problem k's row selection at p.
func (s *Shard) rowsFor(p *Point, k int) rows {
	r := rows{w: [2]float64{1, 1}, pos: p.class(k)}
	if len(p.Weights) > 0 {
		r.w = [2]float64{p.Weights[2*k], p.Weights[2*k+1]}
	}
	if p.Holdout > 0 {
		r.fold, r.hold = s.Fold, uint16(p.Holdout)
	}
	return r
}

func (r *rows) skip(i int) bool { return r.fold != nil && r.fold[i] == r.hold }

// side is 0 for a row of the positive class, 1 for the others: the index
// of its label in signs and of its weight in w.
func (r *rows) side(c int32) int {
	if c == r.pos {
		return 0
	}
	return 1
}

var signs = [2]float64{1, -1}

func evalOnes[I colID](rowPtr []uint32, idx []I, class []int32, r *rows, wl, gl []float64, bias, wb float64) (loss, gb float64) {
	hasBias := bias >= 0
	class = class[:len(rowPtr)-1]
	m := newColView(rowPtr, idx)
	wp, gp := unsafe.Pointer(unsafe.SliceData(wl)), unsafe.Pointer(unsafe.SliceData(gl))
	a := uintptr(rowPtr[0])
	for i := range class {
		b := uintptr(rowPtr[i+1])
		if r.skip(i) {
			a = b
			continue
		}
		// dotOnes inline, in its order (see evalBinary).
		var s0, s1, s2, s3 float64
		q := a
		for ; q+4 <= b; q += 4 {
			s0 += *at(wp, m.col(q))
			s1 += *at(wp, m.col(q+1))
			s2 += *at(wp, m.col(q+2))
			s3 += *at(wp, m.col(q+3))
		}
		for ; q < b; q++ {
			s0 += *at(wp, m.col(q))
		}
		z := (s0 + s1) + (s2 + s3)
		if hasBias {
			z += bias * wb
		}
		sd := r.side(class[i]) & 1
		y := signs[sd]
		if d := 1 - y*z; d > 0 {
			w := r.w[sd]
			loss += w * d * d
			c := -2 * w * y * d
			q := a
			for ; q+4 <= b; q += 4 {
				*at(gp, m.col(q)) += c
				*at(gp, m.col(q+1)) += c
				*at(gp, m.col(q+2)) += c
				*at(gp, m.col(q+3)) += c
			}
			for ; q < b; q++ {
				*at(gp, m.col(q)) += c
			}
			if hasBias {
				gb += c * bias
			}
		}
		a = b
	}
	return loss, gb
}

// evalBinary's values are val/scale: the scale (a power of ten for
// decimal storage, else 1) is applied once to the row's sum and once to
// its gradient coefficient, as a product with its inverse: on short rows
// a division per row costs as much as the row's arithmetic.
func evalBinary[V value, I colID](rowPtr []uint32, idx []I, vs values[V], class []int32, r *rows, wl, gl []float64, bias, wb float64) (loss, gb float64) {
	hasBias := bias >= 0
	inv := 1 / vs.scale
	class = class[:len(rowPtr)-1]
	m := newRowView(rowPtr, idx, vs)
	wp, gp := unsafe.Pointer(unsafe.SliceData(wl)), unsafe.Pointer(unsafe.SliceData(gl))
	a := uintptr(rowPtr[0])
	for i := range class {
		b := uintptr(rowPtr[i+1])
		if r.skip(i) {
			a = b
			continue
		}
		// m.dot's sums in its order, so every kernel finds the same
		// margins to the bit.
		var s0, s1, s2, s3 float64
		q := a
		for ; q+4 <= b; q += 4 {
			s0 += m.val(q) * *at(wp, m.col(q))
			s1 += m.val(q+1) * *at(wp, m.col(q+1))
			s2 += m.val(q+2) * *at(wp, m.col(q+2))
			s3 += m.val(q+3) * *at(wp, m.col(q+3))
		}
		for ; q < b; q++ {
			s0 += m.val(q) * *at(wp, m.col(q))
		}
		z := ((s0 + s1) + (s2 + s3)) * inv
		if hasBias {
			z += bias * wb
		}
		sd := r.side(class[i]) & 1
		y := signs[sd]
		if d := 1 - y*z; d > 0 {
			w := r.w[sd]
			loss += w * d * d
			c := -2 * w * y * d
			ci := c * inv
			q := a
			for ; q+4 <= b; q += 4 {
				*at(gp, m.col(q)) += ci * m.val(q)
				*at(gp, m.col(q+1)) += ci * m.val(q+1)
				*at(gp, m.col(q+2)) += ci * m.val(q+2)
				*at(gp, m.col(q+3)) += ci * m.val(q+3)
			}
			for ; q < b; q++ {
				*at(gp, m.col(q)) += ci * m.val(q)
			}
			if hasBias {
				gb += c * bias
			}
		}
		a = b
	}
	return loss, gb
}

// margins finishes one row of a multi-class pass: loss terms and the
// gradient coefficients -2 c_k y_k (1 - z_k) of the active problems, c_k
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
		d := 1 - y*z[k]
		if d > 0 {
			loss[k] += w * d * d
			coef[k] = -2 * w * y * d
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
func sparseRow(n, K int) bool { return 2*n < K && !denseRowsOnly }

// denseRowsOnly turns sparseRow off, for the test that it changes no bit.
var denseRowsOnly = false

func evalMulti[V value, I colID](s *Shard, idx []I, vs values[V], p *Point, wl []float64, sc *Scratch, out *Partial) {
	K := p.K()
	scale := vs.scale
	z, coef, gl := sc.z, sc.coef, out.Grad
	r := s.rowsFor(p, 0)
	m := newRowView(s.RowPtr, idx, vs)
	for i := 0; i < s.Rows(); i++ {
		if r.skip(i) {
			continue
		}
		a, b := uintptr(s.RowPtr[i]), uintptr(s.RowPtr[i+1])
		clear(z)
		// Two nonzeros a sweep of z, added in the order one at a time
		// would (the same bits), halve z's loads and stores.
		q := a
		for ; q+2 <= b; q += 2 {
			x0, j0 := m.val(q), int(m.col(q))
			x1, j1 := m.val(q+1), int(m.col(q+1))
			w0, w1 := wl[j0*K:j0*K+K], wl[j1*K:j1*K+K]
			w0, w1 = w0[:len(z)], w1[:len(z)]
			for k := range z {
				z[k] = z[k] + x0*w0[k] + x1*w1[k]
			}
		}
		for ; q < b; q++ {
			x, j := m.val(q), int(m.col(q))
			w := wl[j*K : j*K+K]
			for k := range z {
				z[k] += x * w[k]
			}
		}
		for k := range z {
			z[k] /= scale
		}
		addBias(p, z)
		n := margins(p, s.Class[i], z, coef, out.Loss, sc.act)
		if n == 0 {
			continue
		}
		addBiasGrad(p, coef, out.BiasGrad)
		if sparseRow(n, K) {
			act := sc.act[:n]
			for _, k := range act {
				coef[k] /= scale
			}
			for q := a; q < b; q++ {
				x, j := m.val(q), int(m.col(q))
				g := gl[j*K : j*K+K]
				for _, k := range act {
					g[k] += coef[k] * x
				}
			}
			continue
		}
		for k := range coef {
			coef[k] /= scale
		}
		q = a
		for ; q+2 <= b; q += 2 { // coef's loads shared by two nonzeros
			x0, j0 := m.val(q), int(m.col(q))
			x1, j1 := m.val(q+1), int(m.col(q+1))
			g0, g1 := gl[j0*K:j0*K+K], gl[j1*K:j1*K+K]
			g0, g1 = g0[:len(coef)], g1[:len(coef)]
			for k, c := range coef {
				g0[k] += c * x0
				g1[k] += c * x1
			}
		}
		for ; q < b; q++ {
			x, j := m.val(q), int(m.col(q))
			g := gl[j*K : j*K+K]
			for k := range coef {
				g[k] += coef[k] * x
			}
		}
	}
}

func evalMultiOnes[I colID](s *Shard, idx []I, p *Point, wl []float64, sc *Scratch, out *Partial) {
	K := p.K()
	z, coef, gl := sc.z, sc.coef, out.Grad
	r := s.rowsFor(p, 0)
	m := newColView(s.RowPtr, idx)
	for i := 0; i < s.Rows(); i++ {
		if r.skip(i) {
			continue
		}
		a, b := uintptr(s.RowPtr[i]), uintptr(s.RowPtr[i+1])
		clear(z)
		q := a
		for ; q+2 <= b; q += 2 { // as evalMulti
			j0, j1 := int(m.col(q)), int(m.col(q+1))
			w0, w1 := wl[j0*K:j0*K+K], wl[j1*K:j1*K+K]
			w0, w1 = w0[:len(z)], w1[:len(z)]
			for k := range z {
				z[k] = z[k] + w0[k] + w1[k]
			}
		}
		for ; q < b; q++ {
			j := int(m.col(q))
			w := wl[j*K : j*K+K]
			for k := range z {
				z[k] += w[k]
			}
		}
		addBias(p, z)
		n := margins(p, s.Class[i], z, coef, out.Loss, sc.act)
		if n == 0 {
			continue
		}
		if act := sc.act[:n]; sparseRow(n, K) {
			for q := a; q < b; q++ {
				j := int(m.col(q))
				g := gl[j*K : j*K+K]
				for _, k := range act {
					g[k] += coef[k]
				}
			}
		} else {
			q = a
			for ; q+2 <= b; q += 2 {
				j0, j1 := int(m.col(q)), int(m.col(q+1))
				g0, g1 := gl[j0*K:j0*K+K], gl[j1*K:j1*K+K]
				g0, g1 = g0[:len(coef)], g1[:len(coef)]
				for k, c := range coef {
					g0[k] += c
					g1[k] += c
				}
			}
			for ; q < b; q++ {
				j := int(m.col(q))
				g := gl[j*K : j*K+K]
				for k := range coef {
					g[k] += coef[k]
				}
			}
		}
		addBiasGrad(p, coef, out.BiasGrad)
	}
}

func addBias(p *Point, z []float64) {
	if p.Bias >= 0 {
		for k := range z {
			z[k] += p.Bias * p.WBias[k]
		}
	}
}

func addBiasGrad(p *Point, coef, gb []float64) {
	if p.Bias >= 0 {
		for k := range coef {
			gb[k] += coef[k] * p.Bias
		}
	}
}

// HessVec computes, for each problem k, the data part of the generalised
// Hessian at p applied to v: sum over rows active at p of c a (a·v_k), c the
// row's weight. Rows are active when 1 - y a·w_k > 0. The result is in
// out.Grad (local columns) and out.BiasGrad; out.Loss is left at zero.
func (s *Shard) HessVec(p *Point, v *Point, sc *Scratch, out *Partial) {
	K := p.K()
	s.newPartial(K, out)
	sel := s.selections(p, sc)
	// Rows known to be active need no margins, so no point: only the
	// first pass at a stamp gathers it (on wide data a gather is as costly
	// as the rows), and a row the cache has active in no problem is
	// skipped. The cache was filled with these margins' arithmetic, by
	// EvalDiag or the first pass at the stamp.
	known := sel[0].known
	var wl []float64
	if !known {
		wl = append(sc.z[:0], s.gather(p, sc)...) // sc.z is free in this pass
		sc.z = wl
	}
	vl := s.gather(v, sc)
	if K == 1 {
		// A lone one-vs-rest problem (seq) takes a loop of its own in the
		// multi-class loop's arithmetic below, reading the storage
		// directly: 3-4 times the speed of that loop with K = 1.
		seq := !s.binary(K)
		var gb float64
		switch {
		case s.Idx16 != nil:
			gb = hessVecOne(s, s.Idx16, &sel[0], wl, vl, out.Grad, p.Bias, p.WBias, v.WBias, seq)
		case s.Idx24 != nil:
			gb = hessVecOne(s, s.Idx24, &sel[0], wl, vl, out.Grad, p.Bias, p.WBias, v.WBias, seq)
		default:
			gb = hessVecOne(s, s.Idx, &sel[0], wl, vl, out.Grad, p.Bias, p.WBias, v.WBias, seq)
		}
		out.BiasGrad[0] = gb
		return
	}
	sc.coef = grow(sc.coef, 3*K)
	z, t, coef := sc.coef[:K], sc.coef[K:2*K], sc.coef[2*K:]
	act := grow32(&sc.act, K)
	scale := s.Scale
	for i := range s.Rows() {
		if sel[0].skip(i) || known && !anyActive(sel, i) {
			continue
		}
		cols, vals := s.rowInto(i, sc)
		clear(t)
		rowSums(cols, vals, vl, t)
		if !known {
			clear(z)
			rowSums(cols, vals, wl, z)
		}
		n := 0
		for k := range z {
			coef[k] = 0
			z[k] /= scale
			t[k] /= scale
			if p.Bias >= 0 {
				z[k] += p.Bias * p.WBias[k]
				t[k] += p.Bias * v.WBias[k]
			}
			side := sel[k].side(s.Class[i]) & 1
			if known {
				if sel[k].knownInactive(i) {
					continue
				}
			} else if !sel[k].isActive(i, signs[side], z[k]) {
				continue
			}
			c := t[k] * sel[k].w[side]
			if p.Bias >= 0 {
				out.BiasGrad[k] += c * p.Bias
			}
			coef[k] = c / scale
			act[n] = int32(k)
			n++
		}
		if n > 0 {
			scatterRow(cols, vals, coef, act[:n], out.Grad, K, 0)
		}
	}
}

// hessVecSeq and hessVecSeqOnes are HessVec's loop for a lone one-vs-rest
// problem: a row's sums in order (the multi-class loop's for one
// problem), where hessVecBinary's are four-way. They are two for the reason hessVecOnes and
// hessVecBinary are: a shard of ones has no values to read, and a
// generic reader would cost an indirect call a nonzero.
func hessVecSeq[V value, I colID](rowPtr []uint32, idx []I, vs values[V], class []int32, r *rows, wl, vl, hl []float64, bias float64, wb, vb []float64) (hb float64) {
	zb, tb := biasTerms(bias, wb, vb)
	scale := vs.scale
	class = class[:len(rowPtr)-1]
	m := newRowView(rowPtr, idx, vs)
	wp, vp, hp := unsafe.Pointer(unsafe.SliceData(wl)), unsafe.Pointer(unsafe.SliceData(vl)), unsafe.Pointer(unsafe.SliceData(hl))
	for i := range class {
		if r.skip(i) || r.known && r.knownInactive(i) {
			continue
		}
		a, b := uintptr(rowPtr[i]), uintptr(rowPtr[i+1])
		var z, t float64
		if r.known {
			for q := a; q < b; q++ {
				t += m.val(q) * *at(vp, m.col(q))
			}
		} else {
			for q := a; q < b; q++ {
				x, j := m.val(q), m.col(q)
				t += x * *at(vp, j)
				z += x * *at(wp, j)
			}
		}
		sd := r.side(class[i]) & 1
		if !r.known && !r.isActive(i, signs[sd], z/scale+zb) {
			continue
		}
		c := (t/scale + tb) * r.w[sd]
		if bias >= 0 {
			hb += c * bias
		}
		coef := c / scale
		for q := a; q < b; q++ {
			*at(hp, m.col(q)) += coef * m.val(q)
		}
	}
	return hb
}

func hessVecSeqOnes[I colID](rowPtr []uint32, idx []I, class []int32, r *rows, wl, vl, hl []float64, bias float64, wb, vb []float64) (hb float64) {
	zb, tb := biasTerms(bias, wb, vb)
	class = class[:len(rowPtr)-1]
	m := newColView(rowPtr, idx)
	wp, vp, hp := unsafe.Pointer(unsafe.SliceData(wl)), unsafe.Pointer(unsafe.SliceData(vl)), unsafe.Pointer(unsafe.SliceData(hl))
	for i := range class {
		if r.skip(i) || r.known && r.knownInactive(i) {
			continue
		}
		a, b := uintptr(rowPtr[i]), uintptr(rowPtr[i+1])
		var z, t float64
		if r.known {
			for q := a; q < b; q++ {
				t += *at(vp, m.col(q))
			}
		} else {
			for q := a; q < b; q++ {
				j := m.col(q)
				t += *at(vp, j)
				z += *at(wp, j)
			}
		}
		sd := r.side(class[i]) & 1
		if !r.known && !r.isActive(i, signs[sd], z+zb) {
			continue
		}
		c := (t + tb) * r.w[sd]
		if bias >= 0 {
			hb += c * bias
		}
		for q := a; q < b; q++ {
			*at(hp, m.col(q)) += c
		}
	}
	return hb
}

// rowSums adds to u[k], for each problem k, the row's product with the
// interleaved vector ul (column j's K entries from j*K). Two nonzeros a
// sweep of u, added in the order one at a time would (the same bits),
// halve u's loads and stores.
func rowSums(cols []int32, vals, ul, u []float64) {
	K := len(u)
	vals = vals[:len(cols)]
	q := 0
	for ; q+2 <= len(cols); q += 2 {
		x0, j0 := vals[q], int(cols[q])
		x1, j1 := vals[q+1], int(cols[q+1])
		u0, u1 := ul[j0*K : j0*K+K][:len(u)], ul[j1*K : j1*K+K][:len(u)]
		for k := range u {
			u[k] = u[k] + x0*u0[k] + x1*u1[k]
		}
	}
	if q < len(cols) {
		x, j := vals[q], int(cols[q])
		u0 := ul[j*K : j*K+K][:len(u)]
		for k := range u {
			u[k] += x * u0[k]
		}
	}
}

// scatterRow adds coef[k] x_j into g[j*stride+off+k] at each of the row's
// nonzeros: for the problems listed in act when they are few (see
// sparseRow), else for all, coef being zero for the others.
func scatterRow(cols []int32, vals, coef []float64, act []int32, g []float64, stride, off int) {
	K := len(coef)
	vals = vals[:len(cols)]
	if sparseRow(len(act), K) {
		for q, j := range cols {
			x, gj := vals[q], g[int(j)*stride+off:][:K]
			for _, k := range act {
				gj[k] += coef[k] * x
			}
		}
		return
	}
	for q, j := range cols {
		x, gj := vals[q], g[int(j)*stride+off:][:K]
		for k, c := range coef {
			gj[k] += c * x
		}
	}
}

// rowInto decodes row i into the scratch: its local columns, and its
// numbers as the kernels read them (mantissas and codes' values, before
// the scale). The multi-class Hessian passes read a row K times over;
// decoded once, it costs one switch on the storage a row, not two a
// nonzero. (EvalHess decodes its rows into global columns in one loop of
// its own: through rowInto and a second loop, newton-full's pass on a9a
// took 10-15% longer.)
func (s *Shard) rowInto(i int, sc *Scratch) ([]int32, []float64) {
	a, b := int(s.RowPtr[i]), int(s.RowPtr[i+1])
	cols, vals := sc.hcols[:0], sc.hvals[:0]
	switch {
	case s.Idx16 != nil:
		for _, j := range s.Idx16[a:b] {
			cols = append(cols, int32(j))
		}
	case s.Idx24 != nil:
		for _, j := range s.Idx24[a:b] {
			cols = append(cols, int32(j.index()))
		}
	default:
		for _, j := range s.Idx[a:b] {
			cols = append(cols, int32(j))
		}
	}
	switch {
	case s.Code8 != nil:
		for _, c := range s.Code8[a:b] {
			vals = append(vals, s.Table[c])
		}
	case s.Code16 != nil:
		for _, c := range s.Code16[a:b] {
			vals = append(vals, s.Table[c])
		}
	case s.Val32 != nil:
		for _, x := range s.Val32[a:b] {
			vals = append(vals, float64(x))
		}
	case s.Mant != nil:
		for _, x := range s.Mant[a:b] {
			vals = append(vals, float64(x))
		}
	case s.Val64 != nil:
		vals = append(vals, s.Val64[a:b]...)
	default:
		for range b - a {
			vals = append(vals, 1)
		}
	}
	sc.hcols, sc.hvals = cols, vals
	return cols, vals
}

func grow32(b *[]int32, n int) []int32 {
	if cap(*b) < n {
		*b = make([]int32, n)
	}
	return (*b)[:n]
}

// selections is each problem's rows at p, with the shard's activity
// cache for Hessian-vector and diagonal passes.
func (s *Shard) selections(p *Point, sc *Scratch) []rows {
	K := p.K()
	if cap(sc.sel) < K {
		sc.sel = make([]rows, K)
	}
	sel := sc.sel[:K]
	for k := range sel {
		sel[k] = s.rowsFor(p, k)
	}
	s.activity(p, sel)
	return sel
}

// activity hands each problem's selection the shard's cache of which
// rows are active at p, when p has a stamp: known if it was filled at the
// same stamp, classes and fold.
func (s *Shard) activity(p *Point, sel []rows) {
	if p.Stamp == 0 {
		return
	}
	c, K := &s.act, len(sel)
	words := (s.Rows()*K + 63) / 64
	known := c.stamp == p.Stamp && c.pos == sel[0].pos && c.k == K && c.hold == p.Holdout && len(c.bits) == words
	if !known {
		if cap(c.bits) < words {
			c.bits = make([]uint64, words)
		}
		c.bits = c.bits[:words]
		clear(c.bits)
		c.stamp, c.pos, c.k, c.hold = p.Stamp, sel[0].pos, K, p.Holdout
	}
	for k := range sel {
		sel[k].act, sel[k].stride, sel[k].off, sel[k].known = c.bits, K, k, known
	}
}

// anyActive reports whether the known cache has row i active in some
// problem.
func anyActive(sel []rows, i int) bool {
	for k := range sel {
		if !sel[k].knownInactive(i) {
			return true
		}
	}
	return false
}

// isActive reports whether row i is active from its margin, 1 - y z > 0,
// and records it in the cache.
func (r *rows) isActive(i int, y, z float64) bool {
	if 1-y*z <= 0 {
		return false
	}
	r.markActive(i)
	return true
}

// markActive records in the cache (if any) that row i is active. A
// known cache already holds the bit, the same margin having set it.
func (r *rows) markActive(i int) {
	if r.act != nil {
		b := i*r.stride + r.off
		r.act[b>>6] |= 1 << (uint(b) & 63)
	}
}

func (r *rows) knownInactive(i int) bool {
	b := i*r.stride + r.off
	return r.act[b>>6]&(1<<(uint(b)&63)) == 0
}

// hessVecOne picks the single-problem kernel for the shard's storage:
// the sequential one with seq (a lone one-vs-rest problem), else the
// binary one.
func hessVecOne[I colID](s *Shard, idx []I, r *rows, wl, vl, hl []float64, bias float64, wb, vb []float64, seq bool) float64 {
	switch {
	case s.Values == Ones && seq:
		return hessVecSeqOnes(s.RowPtr, idx, s.Class, r, wl, vl, hl, bias, wb, vb)
	case s.Values == Ones:
		return hessVecOnes(s.RowPtr, idx, s.Class, r, wl, vl, hl, bias, wb, vb)
	case s.Code8 != nil:
		return hessVecValues(s, idx, valuesOf(s, s.Code8), r, wl, vl, hl, bias, wb, vb, seq)
	case s.Code16 != nil:
		return hessVecValues(s, idx, valuesOf(s, s.Code16), r, wl, vl, hl, bias, wb, vb, seq)
	case s.Val32 != nil:
		return hessVecValues(s, idx, valuesOf(s, s.Val32), r, wl, vl, hl, bias, wb, vb, seq)
	case s.Mant != nil:
		return hessVecValues(s, idx, valuesOf(s, s.Mant), r, wl, vl, hl, bias, wb, vb, seq)
	default:
		return hessVecValues(s, idx, valuesOf(s, s.Val64), r, wl, vl, hl, bias, wb, vb, seq)
	}
}

func hessVecValues[V value, I colID](s *Shard, idx []I, vs values[V], r *rows, wl, vl, hl []float64, bias float64, wb, vb []float64, seq bool) float64 {
	if seq {
		return hessVecSeq(s.RowPtr, idx, vs, s.Class, r, wl, vl, hl, bias, wb, vb)
	}
	return hessVecBinary(s.RowPtr, idx, vs, s.Class, r, wl, vl, hl, bias, wb, vb)
}

// biasTerms returns the bias contributions to a row's margin and to a·v.
func biasTerms(bias float64, wb, vb []float64) (float64, float64) {
	if bias < 0 {
		return 0, 0
	}
	return bias * wb[0], bias * vb[0]
}

func hessVecOnes[I colID](rowPtr []uint32, idx []I, class []int32, r *rows, wl, vl, hl []float64, bias float64, wb, vb []float64) (hb float64) {
	zb, tb := biasTerms(bias, wb, vb)
	class = class[:len(rowPtr)-1]
	m := newColView(rowPtr, idx)
	wp, vp, hp := unsafe.Pointer(unsafe.SliceData(wl)), unsafe.Pointer(unsafe.SliceData(vl)), unsafe.Pointer(unsafe.SliceData(hl))
	a := uintptr(rowPtr[0])
	for i := range class {
		b := uintptr(rowPtr[i+1])
		if r.skip(i) {
			a = b
			continue
		}
		sd := r.side(class[i]) & 1
		if r.known {
			if r.knownInactive(i) {
				a = b
				continue
			}
		} else if !r.isActive(i, signs[sd], m.dotOnes(wp, a, b)+zb) {
			a = b
			continue
		}
		// a·v inline, in dotOnes's order (see evalBinary).
		var s0, s1, s2, s3 float64
		q := a
		for ; q+4 <= b; q += 4 {
			s0 += *at(vp, m.col(q))
			s1 += *at(vp, m.col(q+1))
			s2 += *at(vp, m.col(q+2))
			s3 += *at(vp, m.col(q+3))
		}
		for ; q < b; q++ {
			s0 += *at(vp, m.col(q))
		}
		t := ((s0 + s1) + (s2 + s3) + tb) * r.w[sd]
		for q = a; q+4 <= b; q += 4 {
			*at(hp, m.col(q)) += t
			*at(hp, m.col(q+1)) += t
			*at(hp, m.col(q+2)) += t
			*at(hp, m.col(q+3)) += t
		}
		for ; q < b; q++ {
			*at(hp, m.col(q)) += t
		}
		if bias >= 0 {
			hb += t * bias
		}
		a = b
	}
	return hb
}

func hessVecBinary[V value, I colID](rowPtr []uint32, idx []I, vs values[V], class []int32, r *rows, wl, vl, hl []float64, bias float64, wb, vb []float64) (hb float64) {
	zb, tb := biasTerms(bias, wb, vb)
	inv := 1 / vs.scale
	class = class[:len(rowPtr)-1]
	m := newRowView(rowPtr, idx, vs)
	wp, vp, hp := unsafe.Pointer(unsafe.SliceData(wl)), unsafe.Pointer(unsafe.SliceData(vl)), unsafe.Pointer(unsafe.SliceData(hl))
	a := uintptr(rowPtr[0])
	for i := range class {
		b := uintptr(rowPtr[i+1])
		if r.skip(i) {
			a = b
			continue
		}
		sd := r.side(class[i]) & 1
		if r.known {
			if r.knownInactive(i) {
				a = b
				continue
			}
		} else if !r.isActive(i, signs[sd], m.dot(wp, a, b)*inv+zb) {
			a = b
			continue
		}
		// a·v inline, in m.dot's order (see evalBinary).
		var s0, s1, s2, s3 float64
		q := a
		for ; q+4 <= b; q += 4 {
			s0 += m.val(q) * *at(vp, m.col(q))
			s1 += m.val(q+1) * *at(vp, m.col(q+1))
			s2 += m.val(q+2) * *at(vp, m.col(q+2))
			s3 += m.val(q+3) * *at(vp, m.col(q+3))
		}
		for ; q < b; q++ {
			s0 += m.val(q) * *at(vp, m.col(q))
		}
		t := (((s0+s1)+(s2+s3))*inv + tb) * r.w[sd]
		ti := t * inv
		for q = a; q+4 <= b; q += 4 {
			*at(hp, m.col(q)) += ti * m.val(q)
			*at(hp, m.col(q+1)) += ti * m.val(q+1)
			*at(hp, m.col(q+2)) += ti * m.val(q+2)
			*at(hp, m.col(q+3)) += ti * m.val(q+3)
		}
		for ; q < b; q++ {
			*at(hp, m.col(q)) += ti * m.val(q)
		}
		if bias >= 0 {
			hb += t * bias
		}
		a = b
	}
	return hb
}

// EvalDiag is Eval that also sums, in the same pass, the data part of the
// generalised Hessian's diagonal at p: over the rows active at p, c a_j^2,
// c the row's weight. Newton asks for it at its trial points, to build its
// preconditioner at the iterate as LIBLINEAR does, without a pass of its
// own. The partial carries 2K problems: problem k's loss and gradient at
// k (as Eval's), its diagonal at K+k (with a zero loss).
func (s *Shard) EvalDiag(p *Point, sc *Scratch, out *Partial) {
	K := p.K()
	s.newPartial(2*K, out)
	wl := s.gather(p, sc)
	if s.binary(K) {
		r := &s.selections(p, sc)[0]
		wb := 0.0
		if p.Bias >= 0 {
			wb = p.WBias[0]
		}
		var sums [3]float64
		switch {
		case s.Idx16 != nil:
			sums = evalDiagOne(s, s.Idx16, r, wl, out.Grad, p.Bias, wb)
		case s.Idx24 != nil:
			sums = evalDiagOne(s, s.Idx24, r, wl, out.Grad, p.Bias, wb)
		default:
			sums = evalDiagOne(s, s.Idx, r, wl, out.Grad, p.Bias, wb)
		}
		out.Loss[0], out.BiasGrad[0], out.BiasGrad[1] = sums[0], sums[1], sums[2]
		return
	}
	// Loss and gradient in evalMulti's arithmetic, to the bit.
	sel := s.selections(p, sc)
	sc.coef = grow(sc.coef, 3*K)
	z, coef, dg := sc.coef[:K], sc.coef[K:2*K], sc.coef[2*K:]
	act := grow32(&sc.act, K)
	scale, K2 := s.Scale, 2*K
	for i := range s.Rows() {
		if sel[0].skip(i) {
			continue
		}
		cols, vals := s.rowInto(i, sc)
		clear(z)
		rowSums(cols, vals, wl, z)
		n := 0
		for k := range z {
			coef[k], dg[k] = 0, 0
			z[k] /= scale
			if p.Bias >= 0 {
				z[k] += p.Bias * p.WBias[k]
			}
			side := sel[k].side(s.Class[i]) & 1
			y := signs[side]
			d := 1 - y*z[k]
			if d <= 0 {
				continue
			}
			sel[k].markActive(i)
			w := sel[k].w[side]
			out.Loss[k] += w * d * d
			c := -2 * w * y * d
			if p.Bias >= 0 {
				out.BiasGrad[k] += c * p.Bias
				out.BiasGrad[K+k] += w * p.Bias * p.Bias
			}
			coef[k], dg[k] = c/scale, w/(scale*scale)
			act[n] = int32(k)
			n++
		}
		if n > 0 {
			sq := grow(sc.sq, len(vals))
			sc.sq = sq
			for q, x := range vals {
				sq[q] = x * x
			}
			scatterRow(cols, vals, coef, act[:n], out.Grad, K2, 0)
			scatterRow(cols, sq, dg, act[:n], out.Grad, K2, K)
		}
	}
}

// evalDiagOne returns the loss, the bias gradient and the bias diagonal;
// gl holds column j's gradient at 2j and its diagonal at 2j+1.
func evalDiagOne[I colID](s *Shard, idx []I, r *rows, wl, gl []float64, bias, wb float64) [3]float64 {
	switch {
	case s.Values == Ones:
		return evalDiagOnes(s.RowPtr, idx, s.Class, r, wl, gl, bias, wb)
	case s.Code8 != nil:
		return evalDiagBinary(s.RowPtr, idx, valuesOf(s, s.Code8), s.Class, r, wl, gl, bias, wb)
	case s.Code16 != nil:
		return evalDiagBinary(s.RowPtr, idx, valuesOf(s, s.Code16), s.Class, r, wl, gl, bias, wb)
	case s.Val32 != nil:
		return evalDiagBinary(s.RowPtr, idx, valuesOf(s, s.Val32), s.Class, r, wl, gl, bias, wb)
	case s.Mant != nil:
		return evalDiagBinary(s.RowPtr, idx, valuesOf(s, s.Mant), s.Class, r, wl, gl, bias, wb)
	default:
		return evalDiagBinary(s.RowPtr, idx, valuesOf(s, s.Val64), s.Class, r, wl, gl, bias, wb)
	}
}

// evalDiagOnes and evalDiagBinary are evalOnes and evalBinary with the
// diagonal: the same margins and gradient arithmetic, the gradient and
// diagonal interleaved.
func evalDiagOnes[I colID](rowPtr []uint32, idx []I, class []int32, r *rows, wl, gl []float64, bias, wb float64) (sums [3]float64) {
	class = class[:len(rowPtr)-1]
	m := newColView(rowPtr, idx)
	wp := unsafe.Pointer(unsafe.SliceData(wl))
	for i := range class {
		if r.skip(i) {
			continue
		}
		a, b := uintptr(rowPtr[i]), uintptr(rowPtr[i+1])
		z := m.dotOnes(wp, a, b)
		if bias >= 0 {
			z += bias * wb
		}
		sd := r.side(class[i]) & 1
		y := signs[sd]
		if d := 1 - y*z; d > 0 {
			r.markActive(i)
			w := r.w[sd]
			sums[0] += w * d * d
			c := -2 * w * y * d
			for q := a; q < b; q++ {
				j := int(m.col(q))
				g := gl[2*j : 2*j+2 : 2*j+2]
				g[0] += c
				g[1] += w
			}
			if bias >= 0 {
				sums[1] += c * bias
				sums[2] += w * bias * bias
			}
		}
	}
	return sums
}

func evalDiagBinary[V value, I colID](rowPtr []uint32, idx []I, vs values[V], class []int32, r *rows, wl, gl []float64, bias, wb float64) (sums [3]float64) {
	inv := 1 / vs.scale
	class = class[:len(rowPtr)-1]
	m := newRowView(rowPtr, idx, vs)
	wp := unsafe.Pointer(unsafe.SliceData(wl))
	for i := range class {
		if r.skip(i) {
			continue
		}
		a, b := uintptr(rowPtr[i]), uintptr(rowPtr[i+1])
		z := m.dot(wp, a, b) * inv
		if bias >= 0 {
			z += bias * wb
		}
		sd := r.side(class[i]) & 1
		y := signs[sd]
		if d := 1 - y*z; d > 0 {
			r.markActive(i)
			w := r.w[sd]
			sums[0] += w * d * d
			c := -2 * w * y * d
			ci, wi := c*inv, w*inv*inv
			for q := a; q < b; q++ {
				x, j := m.val(q), int(m.col(q))
				g := gl[2*j : 2*j+2 : 2*j+2]
				g[0] += ci * x
				g[1] += wi * x * x
			}
			if bias >= 0 {
				sums[1] += c * bias
				sums[2] += w * bias * bias
			}
		}
	}
	return sums
}

// rowMargins writes each row's a·w into z (wl gathered, one problem, no
// bias), summed as m.dot sums: the kernels' margins to the bit.
func (s *Shard) rowMargins(wl, z []float64) {
	switch {
	case s.Idx16 != nil:
		marginsOf(s, s.Idx16, wl, z)
	case s.Idx24 != nil:
		marginsOf(s, s.Idx24, wl, z)
	default:
		marginsOf(s, s.Idx, wl, z)
	}
}

func marginsOf[I colID](s *Shard, idx []I, wl, z []float64) {
	switch {
	case s.Values == Ones:
		m, wp := newColView(s.RowPtr, idx), unsafe.Pointer(unsafe.SliceData(wl))
		for i := range z {
			z[i] = m.dotOnes(wp, uintptr(s.RowPtr[i]), uintptr(s.RowPtr[i+1]))
		}
	case s.Code8 != nil:
		marginsBinary(s.RowPtr, idx, valuesOf(s, s.Code8), wl, z)
	case s.Code16 != nil:
		marginsBinary(s.RowPtr, idx, valuesOf(s, s.Code16), wl, z)
	case s.Val32 != nil:
		marginsBinary(s.RowPtr, idx, valuesOf(s, s.Val32), wl, z)
	case s.Mant != nil:
		marginsBinary(s.RowPtr, idx, valuesOf(s, s.Mant), wl, z)
	default:
		marginsBinary(s.RowPtr, idx, valuesOf(s, s.Val64), wl, z)
	}
}

func marginsBinary[V value, I colID](rowPtr []uint32, idx []I, vs values[V], wl, z []float64) {
	m, wp, inv := newRowView(rowPtr, idx, vs), unsafe.Pointer(unsafe.SliceData(wl)), 1/vs.scale
	for i := range z {
		z[i] = m.dot(wp, uintptr(rowPtr[i]), uintptr(rowPtr[i+1])) * inv
	}
}

// Tally counts, per class, the rows and the rows whose predicted class
// (LIBLINEAR's rule) is their class. With p.Holdout set it counts only
// that fold's rows: the held-out accuracy of cross-validation.
type Tally struct {
	Rows, Correct []int
}

// Add adds t's counts to a tally of the same classes.
func (a *Tally) Add(t Tally) {
	if a.Rows == nil {
		a.Rows, a.Correct = make([]int, len(t.Rows)), make([]int, len(t.Rows))
	}
	for c := range t.Rows {
		a.Rows[c] += t.Rows[c]
		a.Correct[c] += t.Correct[c]
	}
}

// Total is the number of rows counted and of those predicted correctly.
func (a *Tally) Total() (rows, correct int) {
	for c := range a.Rows {
		rows += a.Rows[c]
		correct += a.Correct[c]
	}
	return rows, correct
}

// Tally counts the shard's rows and correct predictions at p, by class
// (SetClasses fixes the classes).
func (s *Shard) Tally(p *Point) Tally {
	K, classes := p.K(), s.classes
	t := Tally{Rows: make([]int, classes), Correct: make([]int, classes)}
	var sc Scratch
	wl := s.gather(p, &sc)
	z := make([]float64, K)
	sel := s.rowsFor(p, 0)
	var zs []float64 // one problem: every row's margin from the kernels' loops
	if K == 1 {
		zs = make([]float64, s.Rows())
		s.rowMargins(wl, zs)
	}
	for i := 0; i < s.Rows(); i++ {
		if p.Holdout > 0 && !sel.skip(i) {
			continue
		}
		if K == 1 {
			z[0] = zs[i]
		} else {
			clear(z)
			for q := int(s.RowPtr[i]); q < int(s.RowPtr[i+1]); q++ {
				j, x := s.col(q), s.rowValue(q)
				for k := 0; k < K; k++ {
					z[k] += x * wl[j*K+k]
				}
			}
		}
		addBias(p, z)
		pred := int32(0)
		if K == 1 {
			if z[0] <= 0 {
				pred = 1
			}
		} else {
			for k := 1; k < K; k++ {
				if z[k] > z[pred] {
					pred = int32(k)
				}
			}
		}
		c := s.Class[i]
		if c < 0 || int(c) >= classes {
			continue // a label outside the order: counted nowhere
		}
		t.Rows[c]++
		if pred == c {
			t.Correct[c]++
		}
	}
	return t
}
