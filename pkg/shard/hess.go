package shard

import (
	"fmt"
	"unsafe"

	"github.com/osgm-svm/osgm/pkg/reduce"
)

// The full generalised Hessian, for Newton on data with few features
// (osgm's newton-full): one pass gives it, where a CG solve spends tens of
// Hessian-vector passes, each a round trip to every worker.

// MaxHessDim bounds the passes' Hessians (8 MB packed); osgm's newton-full
// stops at fewer coordinates.
const MaxHessDim = 1448

// HessLen is the length of a packed Hessian over dim coordinates: the
// upper triangle, row by row.
func HessLen(dim int) int { return dim * (dim + 1) / 2 }

// HessAt is the position of entry (a, b), a <= b, in a packed Hessian over
// dim coordinates.
func HessAt(dim, a, b int) int { return a*dim - a*(a-1)/2 + b - a }

// EvalHess is Eval that also sums, over the rows active at p, c a a^T (c
// the row's weight): the data part of the generalised Hessian, packed over
// the point's whole dimension, the bias weight last. Single problem only.
//
// A row of r nonzeros costs r(r+1)/2 multiply-adds here against r for
// the gradient; the method asks for it only where that, and the solve,
// cost less than the CG steps it saves.
func (s *Shard) EvalHess(p *Point, sc *Scratch, out *reduce.Partial) {
	dim, full := len(p.W[0]), len(p.W[0])
	if p.Live != nil {
		full = p.Live.Full
	}
	if features := full - btoi(p.Bias >= 0); int(s.MaxIndex) > features {
		// The updates below write unchecked.
		panic(fmt.Sprintf("shard %d: feature %d beyond the point's %d", s.ID, s.MaxIndex, features))
	}
	s.Eval(p, sc, out)
	out.Hess = grow(out.Hess, HessLen(dim))
	clear(out.Hess)
	h := out.Hess
	// Eval's margins, from its gather: only active rows are read again.
	sc.z = grow(sc.z, s.Rows())
	s.rowMargins(sc.wl[:s.Cols.Len()], sc.z)
	sc.cols = s.colsFor(p).Append(sc.cols[:0])
	global := sc.cols
	r := s.rowsFor(p, 0)
	ones, read := s.Values == Ones, s.kernels().reader(s)
	// Decimals are read as mantissas and the scale applied once per row,
	// to the weight: (c/S^2) m_a m_b.
	inv2 := 1 / (s.Scale * s.Scale)
	for i, z := range sc.z {
		if r.skip(i) {
			continue
		}
		if p.Bias >= 0 {
			z += float64(p.Bias * p.WBias[0])
		}
		side := r.side(r.class[i])
		cw, ok := hingeCurv(signs[side], z, r.w[side]) // see hingeGrad
		if p.Loss != SquaredHinge {
			cw, ok = p.Loss.curv(r.y(side, r.class[i]), z, r.w[side], r.eps)
		}
		if !ok {
			continue
		}
		cols, vals := read(int(s.RowPtr[i]), int(s.RowPtr[i+1]), global, sc.hcols[:0], sc.hvals[:0])
		if p.Bias >= 0 { // in the mantissas' scale
			cols, vals = append(cols, int32(dim-1)), append(vals, float64(p.Bias*s.Scale))
		}
		sc.hcols, sc.hvals = cols, vals
		// Columns increase along a row (Cols is increasing, the bias is
		// last), so every (ju, jv) below is in the upper triangle. row
		// points ju places before (ju, ju), so that row[jv] is (ju, jv).
		c := float64(cw * inv2)
		hp := unsafe.Pointer(unsafe.SliceData(h))
		for u, ju := range cols {
			row := unsafe.Add(hp, 8*(HessAt(dim, int(ju), int(ju))-int(ju)))
			if ones && p.Bias < 0 {
				outerOnes(row, cols[u:], c)
			} else {
				outer(row, cols[u:], vals[u:], float64(c*vals[u]))
			}
		}
	}
}

// outer adds cu times vals into row at cols; outerOnes adds c.
func outer(row unsafe.Pointer, cols []int32, vals []float64, cu float64) {
	vals = vals[:len(cols)]
	for v, j := range cols {
		*at(row, uintptr(j)) += float64(cu * vals[v])
	}
}

func outerOnes(row unsafe.Pointer, cols []int32, c float64) {
	for _, j := range cols {
		*at(row, uintptr(j)) += c
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pairs is the number of products a Hessian pass over every row makes,
// bias aside.
func (s *Shard) pairs() int {
	n := 0
	for i := range s.Rows() {
		r := int(s.RowPtr[i+1] - s.RowPtr[i])
		n += r * (r + 1) / 2
	}
	return n
}
