package osgm

import (
	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/optimize"
)

// gonumLBFGS drives gonum's L-BFGS direction and More-Thuente line search as a
// state machine. gonum's LinesearchMethod already is one (it moves
// Location.X and asks for evaluations); this adapter always evaluates value
// and gradient together and answers a request for the other half at the
// point just evaluated from a cache, so no data pass is spent twice.
type gonumLBFGS struct {
	mem     int
	ls      optimize.LinesearchMethod
	loc     *optimize.Location
	op      optimize.Operation
	stalled bool
	best    tracker
	cacheX  []float64
	cacheF  float64
	cacheG  []float64
}

func newGonumLBFGS(_ Problem, q Params) Method {
	if q.Memory == 0 {
		q.Memory = 10
	}
	return &gonumLBFGS{mem: q.Memory}
}

func (m *gonumLBFGS) Init(x []float64, f float64, g []float64) {
	m.best.init(x, f, g)
	m.cacheX, m.cacheG = clone(x), clone(g)
	m.restart()
}

// restart begins a fresh L-BFGS run from the best point; gonum signals a
// non-descent direction or no progress with an error, which at this
// accuracy means the history no longer helps.
func (m *gonumLBFGS) restart() bool {
	m.ls = optimize.LinesearchMethod{
		NextDirectioner: &optimize.LBFGS{Store: m.mem},
		Linesearcher:    &optimize.MoreThuente{},
	}
	m.loc = &optimize.Location{X: clone(m.best.X), F: m.best.F, Gradient: clone(m.best.G)}
	op, err := m.ls.Init(m.loc)
	m.op = op
	return err == nil
}

func (m *gonumLBFGS) Next() Request {
	if m.stalled {
		return Request{Op: OpEval, X: m.best.X}
	}
	return Request{Op: OpEval, X: m.loc.X}
}

func (m *gonumLBFGS) Tell(r Reply) Step {
	if m.stalled {
		return Step{Iterated: true, Stalled: true}
	}
	copy(m.cacheX, m.loc.X)
	copy(m.cacheG, r.G)
	m.cacheF = r.F
	m.best.offer(m.loc.X, r.F, r.G)
	step := Step{}
	for {
		// Everything gonum may ask about the point just evaluated is known.
		m.loc.F = m.cacheF
		copy(m.loc.Gradient, m.cacheG)
		op, err := m.ls.Iterate(m.loc)
		if err != nil {
			if !m.restart() {
				m.stalled = true
				return Step{Iterated: true, Stalled: true}
			}
			return Step{Iterated: true}
		}
		m.op = op
		if op == optimize.MajorIteration {
			step = Step{Iterated: true, Accepted: true}
			continue
		}
		if !floats.Equal(m.loc.X, m.cacheX) {
			return step
		}
	}
}

func (m *gonumLBFGS) Best() ([]float64, float64, []float64) { return m.best.best() }
