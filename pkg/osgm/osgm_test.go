package osgm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/floats"
)

// quadratic is f_k(x) = 1/2 (x - c_k)' A (x - c_k) with A = Q' D Q
// symmetric positive definite: a problem with a known minimiser c_k and a
// known Lipschitz constant max(D).
type quadratic struct {
	Here
	A     [][]float64
	c     [][]float64
	evals int
}

func newQuadratic(rng *rand.Rand, n, K int, cond float64, rotate bool) *quadratic {
	d := make([]float64, n)
	for j := range d {
		d[j] = math.Pow(cond, float64(j)/float64(n-1))
	}
	rng.Shuffle(n, func(i, j int) { d[i], d[j] = d[j], d[i] })
	A := make([][]float64, n)
	for i := range A {
		A[i] = make([]float64, n)
		A[i][i] = d[i]
	}
	if rotate { // a few Givens rotations couple the coordinates mildly
		for r := 0; r < n; r++ {
			i, j := rng.IntN(n), rng.IntN(n)
			if i == j {
				continue
			}
			th := 0.2 * rng.NormFloat64()
			cs, sn := math.Cos(th), math.Sin(th)
			for k := 0; k < n; k++ { // A <- G A G'
				ai, aj := A[i][k], A[j][k]
				A[i][k], A[j][k] = cs*ai-sn*aj, sn*ai+cs*aj
			}
			for k := 0; k < n; k++ {
				ai, aj := A[k][i], A[k][j]
				A[k][i], A[k][j] = cs*ai-sn*aj, sn*ai+cs*aj
			}
		}
	}
	q := &quadratic{A: A}
	for k := 0; k < K; k++ {
		c := make([]float64, n)
		for j := range c {
			c[j] = rng.NormFloat64()
		}
		q.c = append(q.c, c)
	}
	return q
}

// Eval is every problem's value and gradient.
func (q *quadratic) Eval(x [][]float64, f []float64, g [][]float64) error {
	return q.Evaluate(&Pass{Op: OpEval, X: x, F: f, G: g})
}

func (q *quadratic) Ops() Op { return OpEval | OpHessVec | OpHess }

// Evaluate is Eval over any problems, with Hessian-vector products and
// the (constant) Hessian for newton-full.
func (q *quadratic) Evaluate(b *Pass) error {
	q.evals++
	for i := range b.X {
		k := i
		if b.Ks != nil {
			k = b.Ks[i]
		}
		if b.Op == OpHessVec {
			for a := range b.HV[i] {
				b.HV[i][a] = floats.Dot(q.A[a], b.V[i])
			}
			continue
		}
		r := make([]float64, len(b.X[i]))
		floats.SubTo(r, b.X[i], q.c[k])
		n := len(r)
		for a := range n {
			b.G[i][a] = floats.Dot(q.A[a], r)
			if b.Op&OpHess != 0 {
				copy(b.H[i][a*n:(a+1)*n], q.A[a])
			}
		}
		b.F[i] = floats.Dot(r, b.G[i]) / 2
	}
	return nil
}

// diagQuadratic also gives a diagonal with each evaluation. A quadratic's
// Hessian is constant, so it makes one up that varies with x, positive
// and near A's diagonal: what a preconditioner needs to be, and enough
// for the methods' paths and checkpoints to depend on it.
type diagQuadratic struct{ *quadratic }

func (q diagQuadratic) Ops() Op { return q.quadratic.Ops() | OpDiag }

// Evaluate makes the Hessian vary with x too: A with each row and column
// scaled by sqrt(1 + |sin x_i|), still positive definite.
func (q diagQuadratic) Evaluate(b *Pass) error {
	if err := q.quadratic.Evaluate(b); err != nil {
		return err
	}
	for i, x := range b.X {
		n := len(x)
		if b.Op&OpDiag != 0 {
			for a := range n {
				b.D[i][a] = q.A[a][a] * (1 + math.Abs(math.Sin(x[a])))
			}
		}
		if b.Op&OpHess != 0 {
			for a := range n {
				for c := range n {
					b.H[i][a*n+c] *= math.Sqrt((1 + math.Abs(math.Sin(x[a]))) * (1 + math.Abs(math.Sin(x[c]))))
				}
			}
		}
	}
	return nil
}

func (q *quadratic) problems() []Problem {
	n := len(q.A)
	L, mu := 0.0, math.Inf(1)
	diag := make([]float64, n)
	for i := range q.A {
		diag[i] = q.A[i][i]
		s := 0.0
		for _, a := range q.A[i] {
			s += math.Abs(a)
		}
		L = math.Max(L, s) // Gershgorin: an upper bound on the largest eigenvalue
		mu = math.Min(mu, diag[i])
	}
	out := make([]Problem, len(q.c))
	for k := range out {
		out[k] = Problem{Dim: n, L: L, Mu: mu / 4, Diag: diag}
	}
	return out
}

// TestMethodsReachTheMinimum runs every method on the same table of
// problems, as gonum/optimize's tests do, and checks the point it returns
// against the known minimiser.
func TestMethodsReachTheMinimum(t *testing.T) {
	cases := []struct {
		name    string
		n, K    int
		cond    float64
		rotate  bool
		noDiag  bool // OSGM learns P from zero instead of the diagonal
		maxIter int
	}{
		{"diagonal/cond=1e3", 30, 1, 1e3, false, false, 40000},
		{"diagonal/cond=1e3/P0=0", 30, 1, 1e3, false, true, 40000},
		{"rotated/cond=30/K=3", 20, 3, 30, true, false, 40000},
		{"rotated/cond=30/K=3/P0=0", 20, 3, 30, true, true, 40000},
	}
	// Plain first-order methods on cond 1e3 need their ~sqrt(kappa) or
	// kappa iterations; the table gives every method the same budget.
	for _, tc := range cases {
		for _, name := range Methods() {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(3, 5))
				q := newQuadratic(rng, tc.n, tc.K, tc.cond, tc.rotate)
				// One start vector for every problem, as train passes it:
				// x0 is the caller's, and methods start from a copy.
				x0, zero := make([][]float64, tc.K), make([]float64, tc.n)
				tol := make([]float64, tc.K)
				for k := range x0 {
					x0[k] = zero
					tol[k] = 1e-8
				}
				if name == "adagrad" && tc.cond > 100 {
					t.Skip("AdaGrad's step decays like 1/sqrt(t): no linear rate to test")
				}
				res, err := Minimize(q, x0, q.problems(), Settings{Options: Options{Method: name, MaxIter: tc.maxIter, Params: Params{NoDiag: tc.noDiag}}, GradTol: tol}, Hooks{})
				if err != nil {
					t.Fatal(err)
				}
				if slices.ContainsFunc(zero, func(v float64) bool { return v != 0 }) {
					t.Fatal("the method wrote into its x0")
				}
				for k := range res.X {
					if !res.Converged[k] {
						t.Fatalf("problem %d not converged after %d iterations: |g| = %g", k, res.Iters[k], res.GradNorm[k])
					}
					if d := floats.Distance(res.X[k], q.c[k], math.Inf(1)); d > 1e-5 {
						t.Errorf("problem %d: %g from the minimiser", k, d)
					}
				}
				t.Logf("iterations %v, evaluations %d", res.Iters, res.Evals)
			})
		}
	}
}

// TestOSGMOracleIsMonotone checks the comparison oracle's promise: the
// accepted iterates of the OSGM family never increase f (osgm-g: the
// gradient norm), and each
// iteration costs exactly one evaluation (two for osgm-g).
func TestOSGMOracleIsMonotone(t *testing.T) {
	for _, name := range []string{"osgm-h", "osgm-r", "hdm", "osgm-g"} {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(9, 9))
			q := newQuadratic(rng, 15, 1, 100, true)
			prev := math.Inf(1)
			rejected := 0
			var iters int
			trace := func(r Record) {
				v := r.F
				if name == "osgm-g" { // its oracle compares gradient norms
					v = r.GradNorm
				}
				if v > prev {
					t.Fatalf("iteration %d: rose from %v to %v", r.Iter, prev, v)
				}
				if !r.Accepted {
					rejected++
				}
				prev = v
				iters = r.Iter
			}
			x0 := [][]float64{make([]float64, 15)}
			res, err := Minimize(q, x0, q.problems(), Settings{Options: Options{Method: name, MaxIter: 300, Params: Params{NoDiag: true}}, GradTol: []float64{0}}, Hooks{Trace: trace})
			if err != nil {
				t.Fatal(err)
			}
			per := 1
			if name == "osgm-g" {
				per = 2
			}
			if res.Evals != 1+per*iters {
				t.Errorf("%d evaluations for %d iterations", res.Evals, iters)
			}
			t.Logf("%d of %d steps rejected, f = %g", rejected, iters, res.F[0])
		})
	}
}

// TestHypergradientIsTheSurrogateGradient checks the OSGM-H update
// direction against a finite difference of the surrogate
// h(P) = (f(x - P g) - f(x)) / ||g||^2 in each diagonal entry of P.
func TestHypergradientIsTheSurrogateGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	q := newQuadratic(rng, 8, 1, 10, true)
	n := 8
	x := make([]float64, n)
	for j := range x {
		x[j] = rng.NormFloat64()
	}
	eval := func(x []float64) (float64, []float64) {
		f := []float64{0}
		g := [][]float64{make([]float64, n)}
		q.Eval([][]float64{x}, f, g)
		return f[0], g[0]
	}
	f, g := eval(x)
	P := make([]float64, n)
	for j := range P {
		P[j] = 0.05 * rng.Float64()
	}
	h := func(P []float64) float64 {
		xh := make([]float64, n)
		for j := range xh {
			xh[j] = x[j] - P[j]*g[j]
		}
		fh, _ := eval(xh)
		return (fh - f) / floats.Dot(g, g)
	}
	m := newOSGM(q.problems()[0], Params{Eta: 1e-300}, hypergrad)
	m.Init(x, f, g)
	copy(m.P, P)
	req := m.Next()
	fh, gh := eval(req.X)
	m.Tell(Reply{F: fh, G: gh})
	for j := 0; j < n; j++ {
		Pp := append([]float64(nil), P...)
		Pm := append([]float64(nil), P...)
		Pp[j] += 1e-6
		Pm[j] -= 1e-6
		fd := (h(Pp) - h(Pm)) / 2e-6
		if math.Abs(fd-m.U[j]) > 1e-6*math.Max(1, math.Abs(fd)) {
			t.Errorf("dh/dP_%d: finite difference %v, update uses %v", j, fd, m.U[j])
		}
	}
}

func TestUnknownMethod(t *testing.T) {
	_, err := New("simplex", Problem{}, Params{})
	if err == nil || fmt.Sprint(err) == "" {
		t.Fatal("no error for an unknown method")
	}
}

// TestUsesStartDiag: callers compute the Hessian's diagonal at the start
// (a pass over the data) only when UsesStartDiag says the method reads
// it, so every method whose first request depends on Problem.Diag must
// say so, and no other; NoDiag turns it off for OSGM.
func TestUsesStartDiag(t *testing.T) {
	x, g := []float64{0, 0, 0}, []float64{1, -2, 3}
	first := func(name string, diag []float64, q Params) Request {
		m, err := New(name, Problem{Dim: 3, L: 10, Mu: 0.1, Diag: diag, EvalDiag: true}, q)
		if err != nil {
			t.Fatal(err)
		}
		m.Init(x, 1, g)
		r := m.Next()
		return Request{Op: r.Op, X: slices.Clone(r.X), V: slices.Clone(r.V)}
	}
	for _, name := range Methods() {
		if name == Auto {
			continue
		}
		for _, q := range []Params{{}, {NoDiag: true}} {
			a, b := first(name, nil, q), first(name, []float64{0.5, 4, 40}, q)
			reads := a.Op != b.Op || !slices.Equal(a.X, b.X) || !slices.Equal(a.V, b.V)
			if reads != UsesStartDiag(name, q) {
				t.Errorf("%s (NoDiag %v): first request depends on Diag: %v; UsesStartDiag says %v", name, q.NoDiag, reads, UsesStartDiag(name, q))
			}
		}
	}
}

// TestChoose: auto's choice from the data's shape, with a9a's, w8a's and
// news20's shapes (pairs counted from the files) and a dense one.
func TestChoose(t *testing.T) {
	for _, c := range []struct {
		name     string
		problems int
		shape    Shape
		want     string
	}{
		{"a9a", 1, Shape{Dim: 123, NNZ: 451592, Pairs: 3361127, Shards: 9}, "newton-full"},
		{"w8a", 1, Shape{Dim: 300, NNZ: 579586, Pairs: 6868039, Shards: 14}, "newton-full"},
		{"news20 as two classes", 1, Shape{Dim: 1355191, NNZ: 7242563, Pairs: 1 << 33, Shards: 16}, "newton"},
		{"dense rows of 1,000", 1, Shape{Dim: 1000, NNZ: 10_000_000, Pairs: 5_005_000_000, Shards: 64}, "newton"},
		{"no shape", 1, Shape{}, "newton"},
		{"one-vs-rest", 3, Shape{Dim: 123, NNZ: 451592, Pairs: 3361127, Shards: 9}, "newton"},
	} {
		if got := Choose(Auto, c.problems, c.shape); got != c.want {
			t.Errorf("%s: %s (a Hessian pass costs %.1f passes), want %s", c.name, got, c.shape.HessPasses(), c.want)
		}
	}
	if got := Choose("hdm", 1, Shape{}); got != "hdm" {
		t.Errorf("a named method became %s", got)
	}
	// The measured cost of a Hessian pass, in passes, is a9a's 10.8 and
	// ijcnn1's 9.7 (BenchmarkEvalHess against BenchmarkEval).
	a9a := Shape{Dim: 123, NNZ: 451592, Pairs: 3361127, Shards: 9}
	if hp := a9a.HessPasses(); hp < 9 || hp > 13 {
		t.Errorf("a9a: a Hessian pass costs %.1f passes, measured 10.8", hp)
	}
}

// TestNewtonStopsAtPrecision asks for a gradient of exactly zero, which
// rounding never gives: Newton must stop once a step changes f by less
// than double precision resolves, as TRON does, not run to MaxIter.
func TestNewtonStopsAtPrecision(t *testing.T) {
	for _, name := range []string{"newton", "newton-full"} {
		t.Run(name, func(t *testing.T) {
			q := newQuadratic(rand.New(rand.NewPCG(7, 11)), 30, 2, 1e6, true)
			x0 := [][]float64{make([]float64, 30), make([]float64, 30)}
			const maxIter = 5000
			res, err := Minimize(q, x0, q.problems(), Settings{Options: Options{Method: name, MaxIter: maxIter}, GradTol: []float64{0, 0}}, Hooks{})
			if err != nil {
				t.Fatal(err)
			}
			for k := range res.X {
				if res.Iters[k] >= maxIter/10 {
					t.Errorf("problem %d: %d iterations, |g| = %g: still going long after f stopped changing", k, res.Iters[k], res.GradNorm[k])
				}
				if d := floats.Distance(res.X[k], q.c[k], math.Inf(1)); d > 1e-6*floats.Norm(q.c[k], math.Inf(1)) {
					t.Errorf("problem %d: stopped %g from the minimiser", k, d)
				}
			}
			t.Logf("iterations %v, |g| %v, evaluations %d", res.Iters, res.GradNorm, res.Evals)
		})
	}
}

// TestStopSaysWhy: every problem of a Result says why it ended: its
// tolerance met, -max-iter reached, or no more progress possible (here a
// problem whose gradient is NaN from the start).
func TestStopSaysWhy(t *testing.T) {
	q := newQuadratic(rand.New(rand.NewPCG(3, 4)), 10, 3, 20, true)
	q.c[2][0] = math.NaN()
	x0 := [][]float64{make([]float64, 10), make([]float64, 10), make([]float64, 10)}
	res, err := Minimize(q, x0, q.problems(), Settings{Options: Options{Method: "lbfgs", MaxIter: 500}, GradTol: []float64{1e-6, 1e-6, 1e-6}}, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stop[0] != Converged || res.Stop[1] != Converged || res.Stop[2] != Stalled {
		t.Fatalf("stops %v, want converged, converged, stalled (iterations %v)", res.Stop, res.Iters)
	}
	res, err = Minimize(q, x0, q.problems(), Settings{Options: Options{Method: "lbfgs", MaxIter: 3}, GradTol: []float64{1e-6, 1e-6, 1e-6}}, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stop[0] != MaxIter || res.Stop[1] != MaxIter || res.Stop[2] != Stalled {
		t.Fatalf("stops %v at -max-iter 3, want max-iter, max-iter, stalled (iterations %v)", res.Stop, res.Iters)
	}
}

// TestNewtonStopsAtTRONsCap: like liblinear-train, Newton stops after
// tronMaxIter accepted iterations (rejected trials do not count), on an
// ill-conditioned quadratic it would otherwise go on with.
func TestNewtonStopsAtTRONsCap(t *testing.T) {
	q := newQuadratic(rand.New(rand.NewPCG(5, 6)), 40, 1, 1e8, true)
	m := newTRON(q.problems()[0], false)
	x := make([]float64, 40)
	f, g := []float64{0}, [][]float64{make([]float64, 40)}
	if err := q.Evaluate(&Pass{Op: OpEval, X: [][]float64{x}, F: f, G: g}); err != nil {
		t.Fatal(err)
	}
	m.Init(x, f[0], g[0])
	m.S.Accepts = 998 // liblinear-train's cap is 1000
	accepted := 0
	for trials := 0; trials < 100; trials++ {
		step := Step{}
		for !step.Iterated {
			req := m.Next()
			b := &Pass{Op: req.Op, X: [][]float64{req.X}, F: []float64{0}, G: [][]float64{make([]float64, 40)}}
			var hv []float64
			if req.Op == OpHessVec {
				hv = make([]float64, 40)
				b.V, b.HV = [][]float64{req.V}, [][]float64{hv}
			}
			if err := q.Evaluate(b); err != nil {
				t.Fatal(err)
			}
			step = m.Tell(Reply{F: b.F[0], G: b.G[0], HV: hv})
		}
		if step.Accepted {
			accepted++
		}
		if step.Stalled {
			_, _, gb := m.Best()
			t.Logf("stopped after %d trials, |g| %g", trials+1, floats.Norm(gb, 2))
			if accepted != 2 {
				t.Fatalf("stopped after %d accepted iterations from 998, want at 1000", accepted)
			}
			return
		}
	}
	t.Fatalf("no stop in 100 trials, %d accepted past 998", accepted)
}
