package shard

import (
	"github.com/osgm-svm/osgm/pkg/reduce"
)

// HessVec computes, for each problem k, the data part of the generalised
// Hessian at p applied to v, halved: sum over rows active at p of
// c φ”/2 a (a·v_k), c the row's weight (see Loss.curv). The result is in
// out.Grad (local columns) and out.BiasGrad; out.Loss is left at zero.
func (s *Shard) HessVec(p *Point, v *Point, sc *Scratch, out *reduce.Partial) {
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
		seq := !s.binary(p)
		x := vecsAt(p, wl, out.Grad).along(v, vl)
		out.BiasGrad[0] = s.kernels().hessVecOne(s, &sel[0], x, seq)
		return
	}
	sc.coef = grow(sc.coef, 3*K)
	z, t, coef := sc.coef[:K], sc.coef[K:2*K], sc.coef[2*K:]
	act := grow32(&sc.act, K)
	scale := s.Scale
	read := s.kernels().reader(s)
	for i := range s.Rows() {
		if sel[0].skip(i) || known && !anyActive(sel, i) {
			continue
		}
		cols, vals := s.rowInto(read, i, sc)
		clear(coef)
		var n int
		if known {
			// A row's a·v_k for its active problems alone: near the
			// optimum a one-vs-rest row is active in few of its
			// classes, and the others' products are thrown away.
			n = activeAt(sel, i, act)
			rowSumsAt(cols, vals, vl, t, act[:n])
			for _, k := range act[:n] {
				z[k] = sel[k].knownWeight(i, sel[k].w[sel[k].side(s.Class[i])&1])
			}
		} else {
			clear(t)
			rowSums(cols, vals, vl, t)
			clear(z)
			rowSums(cols, vals, wl, z)
			n = s.activeFrom(p, sel, i, z, act)
		}
		for _, k := range act[:n] {
			tk := t[k] / scale
			if p.Bias >= 0 {
				tk += float64(p.Bias * v.WBias[k])
			}
			c := float64(tk * z[k])
			if p.Bias >= 0 {
				out.BiasGrad[k] += float64(c * p.Bias)
			}
			coef[k] = c / scale
		}
		if n > 0 {
			scatterRow(cols, vals, coef, sc.sparse(act[:n], K), out.Grad, K, 0)
		}
	}
}

// activeAt lists in act the problems the known cache has row i active in.
func activeAt(sel []rows, i int, act []int32) int {
	n := 0
	for k := range sel {
		if !sel[k].knownInactive(i) {
			act[n] = int32(k)
			n++
		}
	}
	return n
}

// activeFrom lists in act the problems row i is active in from its
// margins' sums z (unscaled, without the bias), and records them in the
// cache; it leaves in z[k] each active problem's Hessian weight.
func (s *Shard) activeFrom(p *Point, sel []rows, i int, z []float64, act []int32) int {
	n := 0
	for k := range z {
		zk := z[k] / s.Scale
		if p.Bias >= 0 {
			zk += float64(p.Bias * p.WBias[k])
		}
		sd := sel[k].side(s.Class[i]) & 1
		if h, ok := sel[k].curvAt(i, signs[sd], zk, sel[k].w[sd]); ok {
			z[k] = h
			act[n] = int32(k)
			n++
		}
	}
	return n
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
			u[k] = u[k] + float64(x0*u0[k]) + float64(x1*u1[k])
		}
	}
	if q < len(cols) {
		x, j := vals[q], int(cols[q])
		u0 := ul[j*K : j*K+K][:len(u)]
		for k := range u {
			u[k] += float64(x * u0[k])
		}
	}
}

// rowSumsAt is rowSums for the problems in act alone, each sum in
// rowSums's order (the same bits), the others' left as they were.
func rowSumsAt(cols []int32, vals, ul, u []float64, act []int32) {
	K := len(u)
	vals = vals[:len(cols)]
	for _, k := range act {
		s := 0.0
		q := 0
		for ; q+2 <= len(cols); q += 2 {
			s = s + float64(vals[q]*ul[int(cols[q])*K+int(k)]) + float64(vals[q+1]*ul[int(cols[q+1])*K+int(k)])
		}
		if q < len(cols) {
			s += float64(vals[q] * ul[int(cols[q])*K+int(k)])
		}
		u[k] = s
	}
}

// scatterRow adds coef[k] x_j into g[j*stride+off+k] at each of the row's
// nonzeros: for the problems listed in act (see Scratch.sparse), or
// with act nil for all, coef being zero for the others.
func scatterRow(cols []int32, vals, coef []float64, act []int32, g []float64, stride, off int) {
	K := len(coef)
	vals = vals[:len(cols)]
	if act != nil {
		for q, j := range cols {
			x, gj := vals[q], g[int(j)*stride+off:][:K]
			for _, k := range act {
				gj[k] += float64(coef[k] * x)
			}
		}
		return
	}
	for q, j := range cols {
		x, gj := vals[q], g[int(j)*stride+off:][:K]
		for k, c := range coef {
			gj[k] += float64(c * x)
		}
	}
}

// rowInto decodes row i into the scratch with the shard's reader: its
// local columns, and its numbers as the kernels read them (mantissas and
// codes' values, before the scale). The multi-class Hessian passes read
// a row K times over; decoded once, it costs one call a row, not a look
// at the storage a nonzero.
func (s *Shard) rowInto(read rowReader, i int, sc *Scratch) ([]int32, []float64) {
	cols, vals := read(int(s.RowPtr[i]), int(s.RowPtr[i+1]), nil, sc.hcols[:0], sc.hvals[:0])
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
	s.activity(p, sel, sc.cache)
	return sel
}

// activity hands each problem's selection c, the cache of which of the
// shard's rows are active at p, when p has a stamp: known if it was filled
// at the same stamp, classes and fold.
func (s *Shard) activity(p *Point, sel []rows, c *Activity) {
	if p.Stamp == 0 || c == nil {
		return
	}
	K := len(sel)
	words := (s.Rows()*K + 63) / 64
	var weights int // a weight a row, when the bits do not say it
	if !p.Loss.Cached() {
		weights = s.Rows() * K
	}
	known := c.stamp == p.Stamp && c.pos == sel[0].pos && c.k == K && c.hold == p.Holdout && len(c.bits) == words && len(c.weights) == weights
	if !known {
		if cap(c.bits) < words {
			c.bits = make([]uint64, words)
		}
		c.bits = c.bits[:words]
		clear(c.bits)
		c.weights = grow(c.weights, weights)
		c.stamp, c.pos, c.k, c.hold = p.Stamp, sel[0].pos, K, p.Holdout
	}
	var hw []float64
	if weights > 0 {
		hw = c.weights
	}
	for k := range sel {
		sel[k].act, sel[k].hw, sel[k].stride, sel[k].off, sel[k].known = c.bits, hw, K, k, known
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

// curvAt is row i's Hessian weight at margin z (see Loss.curv), for
// class weight c, and whether it is active, which it records in the
// cache.
func (r *rows) curvAt(i int, y, z, c float64) (float64, bool) {
	h, ok := hingeCurv(y, z, c)
	if r.loss != SquaredHinge {
		h, ok = r.loss.curv(y, z, c, r.eps)
	}
	if ok {
		r.markActive(i, h)
	}
	return h, ok
}

// otherGradCurv is Loss.grad and Loss.curv of row i for losses other
// than the squared hinge (which the kernels inline: see hingeGrad),
// recording in the cache whether it is active, and its weight.
func (r *rows) otherGradCurv(i int, y, z, c float64) (loss, dz, h float64, ok bool) {
	loss, dz, ok = r.loss.grad(y, z, c, r.eps)
	if ok {
		h, _ = r.loss.curv(y, z, c, r.eps)
		r.markActive(i, h)
	}
	return loss, dz, h, ok
}

// markActive records in the cache (if any) that row i is active, of
// Hessian weight h. A known cache already holds them, the same margin
// having set them.
func (r *rows) markActive(i int, h float64) {
	if r.act != nil {
		b := i*r.stride + r.off
		r.act[b>>6] |= 1 << (uint(b) & 63)
		if r.hw != nil {
			r.hw[b] = h
		}
	}
}

// knownWeight is the Hessian weight of row i, active in a known cache,
// of class weight c.
func (r *rows) knownWeight(i int, c float64) float64 {
	if r.hw != nil {
		return r.hw[i*r.stride+r.off]
	}
	return c
}

func (r *rows) knownInactive(i int) bool {
	b := i*r.stride + r.off
	return r.act[b>>6]&(1<<(uint(b)&63)) == 0
}

// biasTerms returns the bias contributions to a row's margin and to a·v.
func (x vecs) biasTerms() (float64, float64) {
	if x.bias < 0 {
		return 0, 0
	}
	return float64(x.bias * x.wb), float64(x.bias * x.vb)
}
