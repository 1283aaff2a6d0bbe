package shard

import (
	"unsafe"

	"github.com/osgm-svm/osgm/pkg/reduce"
)

// EvalDiag is Eval that also sums, in the same pass, the data part of the
// generalised Hessian's diagonal at p: over the rows active at p, c a_j^2,
// c the row's weight. Newton asks for it at its trial points, to build its
// preconditioner at the iterate as LIBLINEAR does, without a pass of its
// own. The partial carries 2K problems: problem k's loss and gradient at
// k (as Eval's), its diagonal at K+k (with a zero loss).
func (s *Shard) EvalDiag(p *Point, sc *Scratch, out *reduce.Partial) {
	K := p.K()
	s.newPartial(2*K, out)
	wl := s.gather(p, sc)
	if K == 1 && (s.binary(p) || s.Values != Ones) {
		s.evalDiagAlone(p, wl, sc, out)
		return
	}
	// Loss and gradient in evalMulti's arithmetic, to the bit.
	sel := s.selections(p, sc)
	sc.coef = grow(sc.coef, 3*K)
	z, coef, dg := sc.coef[:K], sc.coef[K:2*K], sc.coef[2*K:]
	act := grow32(&sc.act, K)
	scale, K2 := s.Scale, 2*K
	read := s.kernels().reader(s)
	for i := range s.Rows() {
		if sel[0].skip(i) {
			continue
		}
		cols, vals := s.rowInto(read, i, sc)
		clear(z)
		rowSums(cols, vals, wl, z)
		n := 0
		for k := range z {
			coef[k], dg[k] = 0, 0
			z[k] /= scale
			if p.Bias >= 0 {
				z[k] += float64(p.Bias * p.WBias[k])
			}
			side := sel[k].side(s.Class[i]) & 1
			l, c, ok := hingeGrad(signs[side], z[k], sel[k].w[side]) // see hingeGrad
			h := sel[k].w[side]
			if sel[k].loss != SquaredHinge {
				l, c, h, ok = sel[k].otherGradCurv(i, signs[side], z[k], sel[k].w[side])
			} else if ok {
				sel[k].markActive(i, h)
			}
			if !ok {
				continue
			}
			out.Loss[k] += l
			if p.Bias >= 0 {
				out.BiasGrad[k] += float64(c * p.Bias)
				out.BiasGrad[K+k] += float64(h * p.Bias * p.Bias)
			}
			coef[k], dg[k] = c/scale, h/(scale*scale)
			act[n] = int32(k)
			n++
		}
		if n > 0 {
			sq := grow(sc.sq, len(vals))
			sc.sq = sq
			for q, x := range vals {
				sq[q] = float64(x * x)
			}
			act := sc.sparse(act[:n], K)
			scatterRow(cols, vals, coef, act, out.Grad, K2, 0)
			scatterRow(cols, sq, dg, act, out.Grad, K2, K)
		}
	}
}

// evalDiagAlone is EvalDiag for one problem: a binary one, or a lone
// one-vs-rest problem (classes side by side, or one at a time), which
// reads the storage directly, in the multi-class loop's arithmetic.
func (s *Shard) evalDiagAlone(p *Point, wl []float64, sc *Scratch, out *reduce.Partial) {
	r := &s.selections(p, sc)[0]
	seq := !s.binary(p)
	x := vecsAt(p, wl, out.Grad)
	sums := s.kernels().diagOne(s, r, x, seq)
	out.Loss[0], out.BiasGrad[0], out.BiasGrad[1] = sums[0], sums[1], sums[2]
}

// evalDiagSeq is EvalDiag's multi-class loop for K = 1, to the bit: the
// margin summed a nonzero at a time (as rowSums does), divided by the
// scale, and the gradient and diagonal coefficients as that loop makes
// them. Through rowInto and rowSums a lone one-vs-rest problem's pass
// decoded every row first.
func evalDiagSeq[V value, I colID](rowPtr []uint32, idx []I, vs values[V], class []int32, r *rows, x vecs) (sums [3]float64) {
	wl, gl, bias, wb := x.w, x.g, x.bias, x.wb
	scale := vs.scale
	class = class[:len(rowPtr)-1]
	m := newRowView(rowPtr, idx, vs)
	wp := unsafe.Pointer(unsafe.SliceData(wl))
	for i := range class {
		if r.skip(i) {
			continue
		}
		a, b := uintptr(rowPtr[i]), uintptr(rowPtr[i+1])
		var z float64
		for q := a; q < b; q++ {
			z += float64(m.val(q) * *at(wp, m.col(q)))
		}
		z /= scale
		if bias >= 0 {
			z += float64(bias * wb)
		}
		sd := r.side(class[i]) & 1
		l, c, ok := hingeGrad(signs[sd], z, r.w[sd]) // see hingeGrad
		h := r.w[sd]
		if r.loss != SquaredHinge {
			l, c, h, ok = r.otherGradCurv(i, r.y(sd, class[i]), z, r.w[sd])
		} else if ok {
			r.markActive(i, h)
		}
		if !ok {
			continue
		}
		sums[0] += l
		if bias >= 0 {
			sums[1] += float64(c * bias)
			sums[2] += float64(h * bias * bias)
		}
		coef, dg := c/scale, h/(scale*scale)
		for q := a; q < b; q++ {
			x, j := m.val(q), int(m.col(q))
			g := gl[2*j : 2*j+2 : 2*j+2]
			g[0] += float64(coef * x)
			g[1] += float64(dg * (x * x))
		}
	}
	return sums
}

// evalDiagOnes and evalDiagBinary are evalOnes and evalBinary with the
// diagonal: the same margins and gradient arithmetic, the gradient and
// diagonal interleaved.
func evalDiagOnes[I colID](rowPtr []uint32, idx []I, class []int32, r *rows, x vecs) (sums [3]float64) {
	wl, gl, bias, wb := x.w, x.g, x.bias, x.wb
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
			z += float64(bias * wb)
		}
		sd := r.side(class[i]) & 1
		l, c, ok := hingeGrad(signs[sd], z, r.w[sd]) // see hingeGrad
		h := r.w[sd]
		if r.loss != SquaredHinge {
			l, c, h, ok = r.otherGradCurv(i, r.y(sd, class[i]), z, r.w[sd])
		} else if ok {
			r.markActive(i, h)
		}
		if ok {
			sums[0] += l
			for q := a; q < b; q++ {
				j := int(m.col(q))
				g := gl[2*j : 2*j+2 : 2*j+2]
				g[0] += c
				g[1] += h
			}
			if bias >= 0 {
				sums[1] += float64(c * bias)
				sums[2] += float64(h * bias * bias)
			}
		}
	}
	return sums
}

func evalDiagBinary[V value, I colID](rowPtr []uint32, idx []I, vs values[V], class []int32, r *rows, x vecs) (sums [3]float64) {
	wl, gl, bias, wb := x.w, x.g, x.bias, x.wb
	inv := 1 / vs.scale
	class = class[:len(rowPtr)-1]
	m := newRowView(rowPtr, idx, vs)
	wp := unsafe.Pointer(unsafe.SliceData(wl))
	for i := range class {
		if r.skip(i) {
			continue
		}
		a, b := uintptr(rowPtr[i]), uintptr(rowPtr[i+1])
		z := float64(m.dot(wp, a, b) * inv)
		if bias >= 0 {
			z += float64(bias * wb)
		}
		sd := r.side(class[i]) & 1
		l, c, ok := hingeGrad(signs[sd], z, r.w[sd]) // see hingeGrad
		h := r.w[sd]
		if r.loss != SquaredHinge {
			l, c, h, ok = r.otherGradCurv(i, r.y(sd, class[i]), z, r.w[sd])
		} else if ok {
			r.markActive(i, h)
		}
		if ok {
			sums[0] += l
			ci, wi := float64(c*inv), float64(h*inv*inv)
			for q := a; q < b; q++ {
				x, j := m.val(q), int(m.col(q))
				g := gl[2*j : 2*j+2 : 2*j+2]
				g[0] += float64(ci * x)
				g[1] += float64(wi * x * x)
			}
			if bias >= 0 {
				sums[1] += float64(c * bias)
				sums[2] += float64(h * bias * bias)
			}
		}
	}
	return sums
}
