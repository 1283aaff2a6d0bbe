package osgm

import (
	"math"
	"slices"

	"gonum.org/v1/gonum/floats"

	"github.com/osgm-svm/osgm/internal/vec"
)

// newton is a trust-region Newton method with conjugate-gradient steps,
// the method of LIBLINEAR's -s 2 solver (TRON, Lin and Moré), over the
// same objective: each CG step is one Hessian-vector product (one pass
// over the data, which workers share), each trial point one evaluation.
// It needs few passes, which is what lets a distributed trainer beat a
// single-threaded one end to end.
//
// With full set (newton-full) the same method may hold the whole Hessian:
// then a trial point's pass brings it (OpEvalHess), and the next CG solve
// multiplies by it here, n^2 flops a step, instead of asking for a pass
// per step. A Hessian pass costs hessPasses ordinary ones (rows of r
// nonzeros make r(r+1)/2 products), so it is asked for with a trial only
// when the solve that made the trial took more steps than that: solves
// lengthen as the iterates near the optimum, and the next is taken to
// be like the last. A trial that
// brings no Hessian drops the one held. The iterates are TRON's to
// rounding, which on ill-conditioned data (separable sets such as
// mushrooms) is not the same path, though in far fewer passes.
type newton struct {
	mu float64 // lambda: the objective is lambda times LIBLINEAR's F
	// dim and diag0 describe the problem: its coordinates, and the
	// Hessian's diagonal at 0 (the problem's, not a copy: at 1 M
	// features every vector held is 8 MB more resident).
	dim        int
	diag0      []float64
	hd         bool // the objective gives the Hessian's diagonal with an evaluation
	full       bool
	hessPasses float64   // newton-full: a Hessian pass's cost, in ordinary passes
	scratch    []float64 // newton-full: H d, and the held Hessian's diagonal
	S          newtonState
}

type newtonState struct {
	X, G  []float64
	F     float64
	Delta float64 // trust-region radius on ||s||_M, as in LIBLINEAR
	Iter  int     // trials
	// Accepts counts the accepted trials, TRON's iterations: it stops
	// after tronMaxIter of them, as liblinear-train does.
	Accepts int

	// M is the diagonal preconditioner, in F's scale: (1 - pcgMix) +
	// pcgMix diag(H) at the iterate (LIBLINEAR 2.30's PCG), or at 0 when
	// the objective cannot give the diagonal elsewhere. NeedDiag: the
	// diagonal at the start point is the first request.
	M        []float64
	NeedDiag bool

	// H is the Hessian at X (newton-full only), dim x dim, row by row;
	// nil until it is held. Checkpoints keep it (8 MB at MaxFullDim), so a
	// resumed run needs no pass to get it back. CGSteps counts the current
	// solve's steps.
	H       []float64
	CGSteps int

	// The preconditioned CG solve of H s = -g within ||s||_M <= Delta.
	// z = M^-1 r lives in the reply's memory (see cgStep).
	InCG     bool
	Step     []float64 // s
	R, D     []float64 // residual -g - H s, direction
	RZ       float64   // r·z
	CGTol    float64
	Boundary bool
	XT       []float64 // the trial point X + s

	// XAt and XTAt name X and XT in requests (Request.At): Points counts
	// the points made, so an accepted trial keeps its name.
	XAt, XTAt, Points uint64
}

// TRON's constants (LIBLINEAR 2.30, tron.cpp).
const (
	tronEta0, tronEta1, tronEta2       = 1e-4, 0.25, 0.75
	tronSigma1, tronSigma2, tronSigma3 = 0.25, 0.5, 4.0
	cgRelTol                           = 0.1
	pcgMix                             = 0.01 // M = (1 - pcgMix) I + pcgMix diag(H)

	// tronMaxIter is train_one's cap on TRON's accepted iterations: on
	// nearly separable wide data at a tight -e, TRON crawls, and a
	// class's path that rounding sent elsewhere would otherwise run many
	// times longer than LIBLINEAR's, which stops at the cap.
	tronMaxIter = 1000
)

// newNewton works in LIBLINEAR's scale where it matters: the trust region
// radius and the preconditioner are invariant to f = lambda F, so the same
// number of iterations follows whatever lambda is. Like LIBLINEAR, it
// builds the preconditioner from the Hessian's diagonal at each iterate
// when the objective can give it with an evaluation (then every trial
// point's evaluation brings it, in the same pass); otherwise from the
// diagonal at 0 (every row active), known from the data.
func newNewton(p Problem, _ Params) Method {
	return newTRON(p, false)
}

// newNewtonFull is newton that may hold the whole Hessian.
func newNewtonFull(p Problem, _ Params) Method { return newTRON(p, true) }

func newTRON(p Problem, full bool) *newton {
	m := &newton{mu: p.Mu, dim: p.Dim, hd: p.EvalDiag, full: full, hessPasses: p.HessPasses}
	if m.mu <= 0 {
		m.mu = 1
	}
	if len(p.Diag) == p.Dim {
		m.diag0 = p.Diag
	}
	return m
}

// precond0 is the preconditioner at 0, for n coordinates: from the
// problem's diagonal, from a diagonal of ones without it, and the
// identity (plain CG) for a problem not described.
func (m *newton) precond0(n int) []float64 {
	M := make([]float64, n)
	for j := range M {
		switch {
		case m.dim != n:
			M[j] = 1
		case m.diag0 != nil:
			M[j] = m.precond(m.diag0[j])
		default:
			M[j] = m.precond(1)
		}
	}
	return M
}

// precond is the preconditioner's entry for a Hessian diagonal entry d of
// f = lambda F.
func (m *newton) precond(d float64) float64 { return (1 - pcgMix) + pcgMix*d/m.mu }

// mnorm is ||v||_M. M is LIBLINEAR's (F's scale) and steps live in x's
// space, which both scales share, so step norms and the radius are
// LIBLINEAR's numbers.
func (m *newton) mnorm(v []float64) float64 {
	s := 0.0
	for j, x := range v {
		s += float64(x * x * m.S.M[j])
	}
	return math.Sqrt(s)
}

func (m *newton) state() any { return &m.S }

func (m *newton) Init(x []float64, f float64, g []float64) {
	n := len(x)
	s := &m.S
	s.X, s.G, s.F = clone(x), clone(g), f
	s.Points++
	s.XAt = s.Points
	s.M = m.precond0(n)
	s.Step, s.R, s.D, s.XT = make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	// At 0 the problem's Diag is the Hessian's diagonal (train computes
	// it there, class weights included, as LIBLINEAR does). Elsewhere (a
	// warm start) the first solve waits for the diagonal at x.
	s.H = nil
	if m.hd && slices.ContainsFunc(x, func(v float64) bool { return v != 0 }) {
		s.NeedDiag = true
		return
	}
	m.startCG()
}

// startCG starts an iteration's CG solve. The first also sizes the trust
// region as tron.cpp does: ||g_F||_M, F's gradient in the M norm. (Not
// ||g_f||_{M^-1}: on scaled data that is far below the first CG solve's
// step, and the radius then grows only fourfold per iteration, costing
// iterations TRON does not make.)
func (m *newton) startCG() {
	s := &m.S
	clear(s.Step)
	for j, gj := range s.G {
		s.R[j] = -gj
		s.D[j] = s.R[j] / s.M[j] // z
	}
	s.RZ = vec.Dot(s.R, s.D)
	s.CGTol = float64(cgRelTol * math.Sqrt(s.RZ))
	s.Boundary, s.InCG, s.CGSteps = false, true, 0
	if s.Iter == 0 {
		s.Delta = m.mnorm(s.G) / m.mu
	}
}

func (m *newton) Next() Request {
	s := &m.S
	if s.NeedDiag {
		return Request{Op: OpEvalDiag, X: s.X, At: s.XAt}
	}
	for s.H != nil && m.solving() {
		m.cgStep(m.hessVec(s.D))
	}
	if m.solving() {
		return Request{Op: OpHessVec, X: s.X, V: s.D, At: s.XAt}
	}
	s.InCG = false
	floats.AddTo(s.XT, s.X, s.Step)
	s.Points++
	s.XTAt = s.Points
	switch {
	case m.full && float64(s.CGSteps) > m.hessPasses:
		// The solve just made cost more than a Hessian pass would have:
		// the trial brings the Hessian at its point for the next.
		return Request{Op: OpEvalHess, X: s.XT, At: s.XTAt}
	case m.hd:
		return Request{Op: OpEvalDiag, X: s.XT, At: s.XTAt}
	}
	return Request{Op: OpEval, X: s.XT, At: s.XTAt}
}

// solving reports whether the CG solve goes on. The cap is tron.cpp's,
// max(dim, 5) steps: exact arithmetic ends a solve within dim steps, and
// the cap also stops a state damaged in ways resume cannot check (a held
// Hessian that is not symmetric), whose steps on the held Hessian would
// otherwise never end nor ask for a pass.
func (m *newton) solving() bool {
	s := &m.S
	return s.InCG && math.Sqrt(s.RZ) > s.CGTol && s.CGSteps < max(len(s.X), 5)
}

// hessVec is H d from the Hessian held (full only), in scratch memory.
func (m *newton) hessVec(d []float64) []float64 {
	n := len(d)
	hd := m.scratchOf(n)
	for i := range n {
		hd[i] = vec.Dot(m.S.H[i*n:(i+1)*n], d)
	}
	return hd
}

// diag is the diagonal of a dim x dim Hessian, in scratch memory (free
// between solves).
func (m *newton) diag(h []float64) []float64 {
	n := len(m.S.X)
	d := m.scratchOf(n)
	for j := range n {
		d[j] = h[j*n+j]
	}
	return d
}

func (m *newton) scratchOf(n int) []float64 {
	if len(m.scratch) != n {
		m.scratch = make([]float64, n)
	}
	return m.scratch
}

func (m *newton) Tell(r Reply) Step {
	s := &m.S
	if s.NeedDiag {
		m.setPrecond(r.D)
		s.NeedDiag = false
		m.startCG()
		return Step{}
	}
	if s.InCG {
		m.cgStep(r.HV)
		return Step{}
	}
	return m.trial(r.F, r.G, r.D, r.H)
}

// cgStep advances the CG solve by one Hessian-vector product hd = H d
// (overwritten: it ends holding z), stopping at the trust region's
// boundary.
func (m *newton) cgStep(hd []float64) {
	s := &m.S
	s.CGSteps++
	dHd := vec.Dot(s.D, hd)
	if !(dHd > 0) {
		s.InCG = false // no curvature along d (cannot happen here: H >= lambda I)
		return
	}
	alpha := s.RZ / dHd
	// The step moves and its M norm is summed in one sweep, and below r
	// and z in another: the same arithmetic element by element as
	// AddScaled and mnorm, in half the passes over the vectors.
	sq := 0.0
	for j, d := range s.D {
		x := s.Step[j] + float64(alpha*d)
		s.Step[j] = x
		sq += float64(x * x * s.M[j])
	}
	if math.Sqrt(sq) > s.Delta {
		// Back up and go to the boundary along d instead (in the M norm).
		vec.AddScaled(s.Step, -alpha, s.D)
		var std, sts, dtd float64
		for j, mj := range s.M {
			std += float64(s.Step[j] * mj * s.D[j])
			sts += float64(s.Step[j] * mj * s.Step[j])
			dtd += float64(s.D[j] * mj * s.D[j])
		}
		dsq := float64(s.Delta * s.Delta)
		rad := math.Sqrt(float64(std*std) + float64(dtd*(dsq-sts)))
		if std >= 0 {
			alpha = (dsq - sts) / (std + rad)
		} else {
			alpha = (rad - std) / dtd
		}
		vec.AddScaled(s.Step, alpha, s.D)
		vec.AddScaled(s.R, -alpha, hd)
		s.Boundary, s.InCG = true, false
		return
	}
	z := hd // H d is read once, element by element: its memory takes z
	rz := residualZ(s.R, z, s.M, alpha)
	beta := rz / s.RZ
	for j, zj := range z {
		s.D[j] = zj + float64(beta*s.D[j])
	}
	s.RZ = rz
}

// residualZ moves r by -alpha h, with h in z's memory, and leaves z = M^-1 r
// there; it returns r·z, summed in vec.Dot's order, so the bits are
// those of a z of its own and vec.Dot(r, z), in one sweep instead of two.
func residualZ(r, z, m []float64, alpha float64) float64 {
	z, m = z[:len(r)], m[:len(r)]
	var s [4]float64
	i := 0
	for ; i+4 <= len(r); i += 4 {
		for l := range 4 {
			rl := r[i+l] + float64(-alpha*z[i+l])
			zl := rl / m[i+l]
			r[i+l], z[i+l] = rl, zl
			s[l] += float64(rl * zl)
		}
	}
	for ; i < len(r); i++ {
		ri := r[i] + float64(-alpha*z[i])
		zi := ri / m[i]
		r[i], z[i] = ri, zi
		s[0] += float64(ri * zi)
	}
	return (s[0] + s[2]) + (s[1] + s[3])
}

// setPrecond builds M from the Hessian's diagonal d at the iterate.
func (m *newton) setPrecond(d []float64) {
	for j, dj := range d {
		m.S.M[j] = m.precond(dj)
	}
}

// trial judges the trial point by the ratio of actual to predicted
// reduction and resizes the trust region as TRON does; dnew, when the
// objective gave it, is the Hessian's diagonal at the trial point, hnew
// (full only) the whole Hessian.
func (m *newton) trial(fnew float64, gnew, dnew, hnew []float64) Step {
	s := &m.S
	s.Iter++
	gs := vec.Dot(s.G, s.Step)
	prered := float64(-0.5 * (gs - vec.Dot(s.Step, s.R)))
	actred := s.F - fnew
	snorm := m.mnorm(s.Step)
	if s.Iter == 1 {
		s.Delta = math.Min(s.Delta, snorm)
	}
	alpha := tronSigma3
	if fnew-s.F-gs > 0 {
		alpha = math.Max(tronSigma1, float64(-0.5*(gs/(fnew-s.F-gs))))
	}
	switch {
	case actred < float64(tronEta0*prered):
		s.Delta = math.Min(float64(alpha*snorm), float64(tronSigma2*s.Delta))
	case actred < float64(tronEta1*prered):
		s.Delta = math.Max(float64(tronSigma1*s.Delta), math.Min(float64(alpha*snorm), float64(tronSigma2*s.Delta)))
	case actred < float64(tronEta2*prered):
		s.Delta = math.Max(float64(tronSigma1*s.Delta), math.Min(float64(alpha*snorm), float64(tronSigma3*s.Delta)))
	case s.Boundary:
		s.Delta = float64(tronSigma3 * s.Delta)
	default:
		s.Delta = math.Max(s.Delta, math.Min(float64(alpha*snorm), float64(tronSigma3*s.Delta)))
	}
	accepted := actred > float64(tronEta0*prered) && !math.IsNaN(fnew)
	if accepted {
		s.Accepts++
		s.X, s.XT = s.XT, s.X
		s.XAt = s.XTAt
		copy(s.G, gnew)
		s.F = fnew
		if len(hnew) == len(s.X)*len(s.X) {
			s.H = append(s.H[:0], hnew...) // X's Hessian, for the next solve
			dnew = m.diag(s.H)
		} else {
			s.H = nil // another point's
		}
		if len(dnew) == len(s.M) {
			m.setPrecond(dnew)
		}
	}
	// Nothing left to gain at this precision: stop rather than spin.
	// TRON's tests come first: it stops on prered <= 0 alone (the model
	// predicts no decrease), whether or not the trial was taken, and after
	// train_one's iteration cap. Without its test of actred and prered
	// both below 1e-12 f, a run whose tolerance lies below what double
	// precision resolves shrank the region until delta squared
	// underflowed (about 1e-154); the step to the boundary then came out
	// NaN, the region grew again, and the run cycled to its iteration
	// limit.
	small := float64(1e-12 * math.Abs(s.F))
	stalled := !(prered > 0) || s.Accepts >= tronMaxIter ||
		(math.Abs(actred) <= small && math.Abs(prered) <= small) ||
		(!accepted && (s.Delta <= 1e-300 || snorm == 0))
	m.startCG()
	return Step{Iterated: true, Accepted: accepted, Stalled: stalled}
}

func (m *newton) Best() ([]float64, float64, []float64) { return m.S.X, m.S.F, m.S.G }
