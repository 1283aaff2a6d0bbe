package osgm

import (
	"math"

	"gonum.org/v1/gonum/floats"

	"github.com/osgm-svm/osgm/internal/vec"
)

// lbfgs is limited-memory BFGS (Nocedal and Wright, algorithm 7.4) with a
// backtracking Armijo line search. Every trial point is one evaluation of
// value and gradient together; most iterations accept the first trial, so
// an iteration costs about one pass. Unlike gonum's implementation (kept
// as "gonum-lbfgs" for comparison), all of its state is in lbfgsState, so
// a checkpoint can stop and resume it bit for bit.
type lbfgs struct {
	mem int
	S   lbfgsState
}

type lbfgsState struct {
	X, G []float64 // the iterate and its gradient
	F    float64
	Dir  []float64 // search direction of the current line search
	D0   float64   // directional derivative g·Dir at step 0
	Step float64   // the trial step
	XT   []float64 // the trial point X + Step*Dir
	// History of the last pairs s = x_{k+1} - x_k, y = g_{k+1} - g_k as a
	// ring: pair i lives at (Head - Count + i) mod len.
	Hs, Hy    [][]float64
	Rho       []float64
	Gamma     float64 // s·y / y·y of the newest pair: H0 = Gamma I
	Head, Cnt int
	Trials    int
	Fresh     bool // Dir is steepest descent (history just reset)
	Stalled   bool
	Alpha     []float64 // scratch of the two-loop recursion
}

const (
	armijo      = 1e-4 // sufficient decrease
	maxTrials   = 40   // backtracking steps before the history is reset
	minCurvRate = 1e-12
)

func newLBFGS(_ Problem, q Params) Method {
	if q.Memory == 0 {
		q.Memory = 10
	}
	return &lbfgs{mem: q.Memory}
}

func (m *lbfgs) Init(x []float64, f float64, g []float64) {
	n := len(x)
	s := &m.S
	s.X, s.G, s.F = clone(x), clone(g), f
	s.Dir, s.XT = make([]float64, n), make([]float64, n)
	s.Hs, s.Hy = make([][]float64, m.mem), make([][]float64, m.mem)
	for i := range s.Hs {
		s.Hs[i], s.Hy[i] = make([]float64, n), make([]float64, n)
	}
	s.Rho, s.Alpha = make([]float64, m.mem), make([]float64, m.mem)
	m.startSearch()
}

// startSearch sets Dir = -H g by the two-loop recursion and the first
// trial step. Each loop's update and the next dot product go in one sweep
// (sweep.go), with the bits of the loops written out one operation at a
// time: pair i's update is followed by pair i-1's dot product in the
// first loop, and by pair i+1's in the second.
func (m *lbfgs) startSearch() {
	s := &m.S
	k := len(s.Rho)
	at := func(i int) int { return (s.Head - s.Cnt + i + k) % k } // pair i, 0 the oldest
	if s.Cnt == 0 {
		copy(s.Dir, s.G)
		floats.Scale(-1, s.Dir)
		s.D0 = vec.Dot(s.G, s.Dir)
	} else {
		j := at(s.Cnt - 1)
		s.Alpha[j] = float64(s.Rho[j] * copyDot(s.Dir, s.G, s.Hs[j]))
		for i := s.Cnt - 1; i > 0; i-- {
			j, next := at(i), at(i-1)
			s.Alpha[next] = float64(s.Rho[next] * axpyDot(s.Dir, -s.Alpha[j], s.Hy[j], s.Hs[next]))
		}
		// H0 = gamma I, gamma = s·y / y·y of the newest pair.
		j = at(0)
		beta := float64(s.Rho[j] * axpyScaleDot(s.Dir, -s.Alpha[j], s.Hy[j], s.Gamma, s.Hy[j]))
		for i := 0; i < s.Cnt-1; i++ {
			j, next := at(i), at(i+1)
			beta = float64(s.Rho[next] * axpyDot(s.Dir, s.Alpha[j]-beta, s.Hs[j], s.Hy[next]))
		}
		j = at(s.Cnt - 1)
		s.D0 = axpyScaleDot(s.Dir, s.Alpha[j]-beta, s.Hs[j], -1, s.G) // Dir = -H g
	}
	s.Fresh = s.Cnt == 0
	if !(s.D0 < 0) { // not a descent direction: forget the history
		s.Cnt = 0
		copy(s.Dir, s.G)
		floats.Scale(-1, s.Dir)
		s.D0 = -vec.Dot(s.G, s.G)
		s.Fresh = true
	}
	s.Step = 1
	if s.Fresh {
		// No curvature known: a first step of unit length.
		s.Step = 1 / math.Max(vec.Norm(s.Dir), 1e-300)
	}
	s.Trials = 0
}

func (m *lbfgs) Next() Request {
	s := &m.S
	if s.Stalled {
		return Request{Op: OpEval, X: s.X}
	}
	vec.AddScaledTo(s.XT, s.X, s.Step, s.Dir)
	return Request{Op: OpEval, X: s.XT}
}

func (m *lbfgs) Tell(r Reply) Step {
	s := &m.S
	if s.Stalled {
		return Step{Iterated: true, Stalled: true}
	}
	s.Trials++
	if r.F <= s.F+float64(armijo*s.Step*s.D0) && !math.IsNaN(r.F) {
		m.accept(r)
		m.startSearch()
		return Step{Iterated: true, Accepted: true}
	}
	if s.Trials >= maxTrials || float64(s.Step*floats.Norm(s.Dir, math.Inf(1))) <= float64(1e-16*math.Max(1, floats.Norm(s.X, math.Inf(1)))) {
		if s.Fresh {
			s.Stalled = true // no decrease even along -g: done at this precision
			return Step{Iterated: true, Stalled: true}
		}
		s.Cnt = 0
		m.startSearch()
		return Step{Iterated: true}
	}
	// Backtrack to the minimiser of the quadratic through f(0), f'(0) and
	// f(Step), kept within [0.1, 0.5] of the step.
	t := s.Step
	q := -s.D0 * t * t / (2 * (r.F - s.F - float64(s.D0*t)))
	if math.IsNaN(q) || math.IsInf(q, 0) {
		q = float64(0.5 * t)
	}
	s.Step = math.Min(math.Max(q, float64(0.1*t)), float64(0.5*t))
	return Step{}
}

// accept moves to the trial point and records the curvature pair.
func (m *lbfgs) accept(r Reply) {
	s := &m.S
	k := len(s.Rho)
	j := s.Head
	sy, yy := pairDots(s.Hs[j], s.Hy[j], s.XT, s.X, r.G, s.G) // and G = r.G
	// Keep the pair only with positive curvature, so H stays positive
	// definite (always true for this convex problem, up to rounding).
	switch {
	case sy > float64(minCurvRate*yy) && sy > 0:
		s.Rho[j], s.Gamma = 1/sy, sy/yy
		s.Head = (s.Head + 1) % k
		s.Cnt = min(s.Cnt+1, k)
	case s.Cnt == k:
		s.Cnt-- // the pair just overwritten was the oldest one kept
	}
	s.X, s.XT = s.XT, s.X
	s.F = r.F
}

func (m *lbfgs) Best() ([]float64, float64, []float64) { return m.S.X, m.S.F, m.S.G }
