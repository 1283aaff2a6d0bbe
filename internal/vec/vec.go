// Package vec is the vector arithmetic of the methods and the stopping
// tests, with the same bits on every CPU. gonum's floats sums in the
// order of its amd64 assembly there and in plain order elsewhere, and Go
// may fuse x*y + z into one rounding (arm64 does): a model trained on
// amd64 and on arm64 then differs in its last bits. These functions sum
// in the order of gonum's amd64 assembly, so amd64's bits are unchanged,
// and round every product before it is added (an explicit float64
// conversion forbids the fusion), so arm64's are the same.
package vec

import "math"

// Dot is x·y in the order of gonum's amd64 DotUnitary: four running
// sums, a nonzero tail into the first, then (s0+s2) + (s1+s3).
func Dot(x, y []float64) float64 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += float64(x[i] * y[i])
		s1 += float64(x[i+1] * y[i+1])
		s2 += float64(x[i+2] * y[i+2])
		s3 += float64(x[i+3] * y[i+3])
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i] * y[i])
	}
	return (s0 + s2) + (s1 + s3)
}

// Norm is ||x||_2, scaled as gonum's L2NormUnitary is against overflow.
func Norm(x []float64) float64 {
	var l l2
	for _, v := range x {
		l.add(v)
	}
	return l.norm()
}

// Distance is ||x - y||_2, as Norm of the difference.
func Distance(x, y []float64) float64 {
	y = y[:len(x)]
	var l l2
	for i, v := range x {
		l.add(v - y[i])
	}
	return l.norm()
}

// l2 is gonum's scaled sum of squares: scale^2 ssq, ssq from 1.
type l2 struct {
	scale, ssq float64
	nan        bool
}

func (l *l2) add(v float64) {
	if v == 0 {
		return
	}
	if l.ssq == 0 {
		l.ssq = 1
	}
	a := math.Abs(v)
	switch {
	case math.IsNaN(a):
		l.nan = true
	case l.scale < a:
		s := l.scale / a
		l.ssq = 1 + float64(float64(l.ssq*s)*s)
		l.scale = a
	default:
		s := a / l.scale
		l.ssq += float64(s * s)
	}
}

func (l *l2) norm() float64 {
	switch {
	case l.nan:
		return math.NaN()
	case math.IsInf(l.scale, 1):
		return math.Inf(1)
	}
	return l.scale * math.Sqrt(l.ssq)
}

// AddScaled sets dst to dst + alpha s.
func AddScaled(dst []float64, alpha float64, s []float64) {
	s = s[:len(dst)]
	for i, v := range s {
		dst[i] += float64(alpha * v)
	}
}

// AddScaledTo sets dst to y + alpha s.
func AddScaledTo(dst, y []float64, alpha float64, s []float64) {
	y, s = y[:len(dst)], s[:len(dst)]
	for i, v := range s {
		dst[i] = float64(alpha*v) + y[i]
	}
}
