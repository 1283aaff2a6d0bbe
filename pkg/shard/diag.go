package shard

import (
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
