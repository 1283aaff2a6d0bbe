package osgm

import (
	"math"

	"gonum.org/v1/gonum/floats"
)

// tracker keeps the best evaluated point for methods whose iterates are
// not monotone.
type tracker struct {
	x, g []float64
	f    float64
}

func (t *tracker) init(x []float64, f float64, g []float64) {
	t.x, t.g, t.f = clone(x), clone(g), f
}

func (t *tracker) offer(x []float64, f float64, g []float64) {
	if f <= t.f {
		copy(t.x, x)
		copy(t.g, g)
		t.f = f
	}
}

// gd is gradient descent with the fixed step 1/L.
type gd struct {
	prob Problem
	best tracker
	x, g []float64
}

func newGD(p Problem, _ Params) Method { return &gd{prob: p} }

func (m *gd) Init(x []float64, f float64, g []float64) {
	m.best.init(x, f, g)
	m.x, m.g = clone(x), clone(g)
}

func (m *gd) Next() Request {
	floats.AddScaled(m.x, -1/m.prob.L, m.g)
	return Request{Op: OpEval, X: m.x}
}

func (m *gd) Tell(r Reply) Step {
	copy(m.g, r.G)
	m.best.offer(m.x, r.F, r.G)
	return Step{Iterated: true, Accepted: true}
}

func (m *gd) Best() ([]float64, float64, []float64) { return m.best.x, m.best.f, m.best.g }

// adaGrad is diagonal AdaGrad, x <- x - alpha g / sqrt(sum of g^2), with
// alpha chosen so the first step moves the largest coordinate like a 1/L
// gradient step would.
type adaGrad struct {
	best     tracker
	x, g, G  []float64
	alpha, L float64
}

func newAdaGrad(p Problem, _ Params) Method { return &adaGrad{L: p.L} }

func (m *adaGrad) Init(x []float64, f float64, g []float64) {
	m.best.init(x, f, g)
	m.x, m.g, m.G = clone(x), clone(g), make([]float64, len(x))
	m.alpha = floats.Norm(g, math.Inf(1)) / m.L
}

func (m *adaGrad) Next() Request {
	for j, gj := range m.g {
		m.G[j] += gj * gj
		if m.G[j] > 0 {
			m.x[j] -= m.alpha * gj / math.Sqrt(m.G[j])
		}
	}
	return Request{Op: OpEval, X: m.x}
}

func (m *adaGrad) Tell(r Reply) Step {
	copy(m.g, r.G)
	m.best.offer(m.x, r.F, r.G)
	return Step{Iterated: true, Accepted: true}
}

func (m *adaGrad) Best() ([]float64, float64, []float64) { return m.best.x, m.best.f, m.best.g }

// agd is Nesterov's accelerated gradient: y = x + beta (x - x_prev),
// x_next = y - grad f(y) / L. With strong=true it is the strongly convex
// version (SAGD) with the constant beta = (sqrt(kappa)-1)/(sqrt(kappa)+1),
// kappa = L/mu; otherwise beta = (k-1)/(k+2). One evaluation (at y) per
// iteration; the best evaluated y is reported.
type agd struct {
	prob   Problem
	strong bool
	best   tracker
	x, xp  []float64 // x_k and x_{k-1}
	y      []float64
	k      int
}

func newAGD(p Problem, strong bool) Method { return &agd{prob: p, strong: strong} }

func (m *agd) Init(x []float64, f float64, g []float64) {
	m.best.init(x, f, g)
	m.x, m.xp, m.y = clone(x), clone(x), clone(x)
	// The first step is a gradient step from the start.
	floats.AddScaled(m.x, -1/m.prob.L, g)
	m.k = 1
}

func (m *agd) Next() Request {
	beta := float64(m.k-1) / float64(m.k+2)
	if m.strong {
		q := math.Sqrt(m.prob.L / m.prob.Mu)
		beta = (q - 1) / (q + 1)
	}
	for j := range m.y {
		m.y[j] = m.x[j] + beta*(m.x[j]-m.xp[j])
	}
	return Request{Op: OpEval, X: m.y}
}

func (m *agd) Tell(r Reply) Step {
	m.best.offer(m.y, r.F, r.G)
	m.x, m.xp = m.xp, m.x
	for j := range m.x {
		m.x[j] = m.y[j] - r.G[j]/m.prob.L
	}
	m.k++
	return Step{Iterated: true, Accepted: true}
}

func (m *agd) Best() ([]float64, float64, []float64) { return m.best.x, m.best.f, m.best.g }
