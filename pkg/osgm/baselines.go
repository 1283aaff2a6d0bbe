package osgm

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/floats"

	"github.com/osgm-svm/osgm/internal/vec"
)

// tracker keeps the best evaluated point for methods whose iterates are
// not monotone.
type tracker struct {
	X, G []float64
	F    float64
}

func (t *tracker) init(x []float64, f float64, g []float64) {
	t.X, t.G, t.F = clone(x), clone(g), f
}

// best is the best point as Method.Best gives it.
func (t *tracker) best() ([]float64, float64, []float64) { return t.X, t.F, t.G }

// step takes a reply at x whose gradient is g's from now on: the step of
// a method that moves every time (gradient descent and its kin).
func (t *tracker) step(x, g []float64, r Reply) Step {
	copy(g, r.G)
	t.offer(x, r.F, r.G)
	return Step{Iterated: true, Accepted: true}
}

func (t *tracker) offer(x []float64, f float64, g []float64) {
	if f <= t.F {
		copy(t.X, x)
		copy(t.G, g)
		t.F = f
	}
}

// gd is gradient descent with the fixed step 1/L.
type gd struct {
	prob Problem
	S    struct {
		Best tracker
		X, G []float64
	}
}

func newGD(p Problem, _ Params) Method { return &gd{prob: p} }

func (m *gd) Init(x []float64, f float64, g []float64) {
	m.S.Best.init(x, f, g)
	m.S.X, m.S.G = clone(x), clone(g)
}

func (m *gd) Next() Request {
	vec.AddScaled(m.S.X, -1/m.prob.L, m.S.G)
	return Request{Op: OpEval, X: m.S.X}
}

func (m *gd) Tell(r Reply) Step                     { return m.S.Best.step(m.S.X, m.S.G, r) }
func (m *gd) Best() ([]float64, float64, []float64) { return m.S.Best.best() }
func (m *gd) state() any                            { return &m.S }
func (m *gd) check(n int) error {
	return vectors(n, field{"X", m.S.X}, field{"G", m.S.G}, field{"Best.X", m.S.Best.X}, field{"Best.G", m.S.Best.G})
}

// adaGrad is diagonal AdaGrad, x <- x - alpha g / sqrt(sum of g^2), with
// alpha chosen so the first step moves the largest coordinate like a 1/L
// gradient step would.
type adaGrad struct {
	L float64
	S struct {
		Best     tracker
		X, G, Sq []float64
		Alpha    float64
	}
}

func newAdaGrad(p Problem, _ Params) Method { return &adaGrad{L: p.L} }

func (m *adaGrad) Init(x []float64, f float64, g []float64) {
	m.S.Best.init(x, f, g)
	m.S.X, m.S.G, m.S.Sq = clone(x), clone(g), make([]float64, len(x))
	m.S.Alpha = floats.Norm(g, math.Inf(1)) / m.L
}

func (m *adaGrad) Next() Request {
	s := &m.S
	for j, gj := range s.G {
		s.Sq[j] += float64(gj * gj)
		if s.Sq[j] > 0 {
			s.X[j] -= s.Alpha * gj / math.Sqrt(s.Sq[j])
		}
	}
	return Request{Op: OpEval, X: s.X}
}

func (m *adaGrad) Tell(r Reply) Step                     { return m.S.Best.step(m.S.X, m.S.G, r) }
func (m *adaGrad) Best() ([]float64, float64, []float64) { return m.S.Best.best() }
func (m *adaGrad) state() any                            { return &m.S }
func (m *adaGrad) check(n int) error {
	s := &m.S
	return vectors(n, field{"X", s.X}, field{"G", s.G}, field{"Sq", s.Sq}, field{"Best.X", s.Best.X}, field{"Best.G", s.Best.G})
}

// agd is Nesterov's accelerated gradient: y = x + beta (x - x_prev),
// x_next = y - grad f(y) / L. With strong=true it is the strongly convex
// version (SAGD) with the constant beta = (sqrt(kappa)-1)/(sqrt(kappa)+1),
// kappa = L/mu; otherwise beta = (k-1)/(k+2). One evaluation (at y) per
// iteration; the best evaluated y is reported.
type agd struct {
	prob   Problem
	strong bool
	S      struct {
		Best     tracker
		X, XP, Y []float64 // x_k, x_{k-1}, and the point evaluated
		K        int
	}
}

func newAGD(p Problem, strong bool) Method { return &agd{prob: p, strong: strong} }

func (m *agd) Init(x []float64, f float64, g []float64) {
	s := &m.S
	s.Best.init(x, f, g)
	s.X, s.XP, s.Y = clone(x), clone(x), clone(x)
	// The first step is a gradient step from the start.
	vec.AddScaled(s.X, -1/m.prob.L, g)
	s.K = 1
}

func (m *agd) Next() Request {
	s := &m.S
	beta := float64(s.K-1) / float64(s.K+2)
	if m.strong {
		q := math.Sqrt(m.prob.L / m.prob.Mu)
		beta = (q - 1) / (q + 1)
	}
	for j := range s.Y {
		s.Y[j] = s.X[j] + float64(beta*(s.X[j]-s.XP[j]))
	}
	return Request{Op: OpEval, X: s.Y}
}

func (m *agd) Tell(r Reply) Step {
	s := &m.S
	s.Best.offer(s.Y, r.F, r.G)
	s.X, s.XP = s.XP, s.X
	for j := range s.X {
		s.X[j] = s.Y[j] - r.G[j]/m.prob.L
	}
	s.K++
	return Step{Iterated: true, Accepted: true}
}

func (m *agd) Best() ([]float64, float64, []float64) { return m.S.Best.best() }
func (m *agd) state() any                            { return &m.S }
func (m *agd) check(n int) error {
	s := &m.S
	if s.K < 1 {
		return fmt.Errorf("iteration count %d", s.K)
	}
	return vectors(n, field{"X", s.X}, field{"XP", s.XP}, field{"Y", s.Y}, field{"Best.X", s.Best.X}, field{"Best.G", s.Best.G})
}
