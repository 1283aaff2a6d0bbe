package osgm

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/osgm-svm/osgm/internal/vec"
)

// Minimize runs one method per problem from x0, evaluating all problems
// that need the same kind of evaluation in one call of obj, until every
// problem meets its gradient tolerance, stalls or hits MaxIter.
func Minimize(obj Objective, x0 [][]float64, probs []Problem, s Settings, h Hooks) (*Result, error) {
	K := len(x0)
	if len(probs) != K || len(s.GradTol) != K {
		return nil, errors.New("osgm: x0, problems and tolerances differ in number")
	}
	batched := s.Batch > 0 && s.Batch < K
	side := s.Batch == 1 && s.Parallel > 1 && K > 1
	if s.Resume != nil { // a run goes on as its snapshot was taken
		batched, side = s.Resume.Batch > 0, s.Resume.Side
	}
	if side {
		return minimizeSide(obj, x0, probs, s, h)
	}
	if batched {
		return minimizeBatches(obj, x0, probs, s, h)
	}
	if h.Now == nil {
		h.Now = time.Now
	}
	r, err := newRun(obj, x0, probs, s, h)
	if err != nil {
		return nil, err
	}
	for r.active > 0 {
		if err := r.checkpoint(); err != nil {
			return nil, err
		}
		if err := r.iterate(); err != nil {
			return nil, err
		}
	}
	return r.result(), nil
}

// run is the state of one Minimize: K methods stepped together, each pass
// over the data evaluating every problem that asked for the same kind of
// evaluation.
type run struct {
	s       Settings
	h       Hooks
	K       int
	ms      []Method
	res     *Result
	stalled []bool
	active  int // problems not done
	start   time.Time

	obj Objective
	ops Op // what obj computes

	// A round's requests, replies and the methods' steps, by problem.
	mu                []float64 // each problem's strong convexity (Problem.Mu)
	reqs              []Request
	steps             []Step
	f                 []float64
	outs, diags, hess [][]float64 // gradient or Hv; diagonal; Hessian
	// One pass's batch: the problems that asked, and their vectors.
	b Pass

	lastSnap int           // res.Evals at the last snapshot
	snapAt   time.Time     // when the last snapshot began
	snapCost time.Duration // and what it cost
}

// newRun resolves the method, checks that obj gives what it needs,
// evaluates x0 (unless given it, or resuming) and starts the methods.
func newRun(obj Objective, x0 [][]float64, probs []Problem, s Settings, h Hooks) (*run, error) {
	K := len(x0)
	r := &run{s: s, h: h, K: K, obj: obj, start: h.Now()}
	r.s.Method = Choose(s.Method, K, s.Shape)
	method := r.s.Method
	r.ops = obj.Ops()
	if err := r.fits(x0); err != nil {
		return nil, err
	}
	r.alloc(x0)
	switch {
	case s.Resume != nil:
		// The methods' states replace what Init sets up below.
		if err := s.Resume.fits(method, K); err != nil {
			return nil, err
		}
	case s.F0 != nil:
		copy(r.f, s.F0)
		for k := range r.outs {
			copy(r.outs[k], s.G0[k])
		}
		// The methods take the gradient from the replies: holding G0 for
		// the run would keep a vector of the dimension per problem.
		r.s.F0, r.s.G0 = nil, nil
	default:
		if err := obj.Evaluate(&Pass{Op: OpEval, X: x0, F: r.f, G: r.outs}); err != nil {
			return nil, err
		}
		r.res.Evals++
	}
	r.ms, r.mu = make([]Method, K), make([]float64, K)
	for k := range r.ms {
		prob := probs[k]
		r.mu[k] = prob.Mu
		prob.EvalDiag = r.ops&OpDiag != 0
		m, err := New(method, prob, s.Params)
		if err != nil {
			return nil, err
		}
		r.ms[k] = m
	}
	for k, m := range r.ms {
		m.Init(x0[k], r.f[k], r.outs[k])
		if s.Resume != nil {
			if err := loadMethod(m, len(x0[k]), s.Resume.States[k]); err != nil {
				return nil, fmt.Errorf("problem %d: %w", r.problem(k), err)
			}
			r.res.Iters[k], r.stalled[k] = s.Resume.Iters[k], s.Resume.Stalled[k]
		}
		_, fb, gb := m.Best()
		gn := vec.Norm(gb)
		r.res.Converged[k] = r.converged(k, fb, gn)
		r.stalled[k] = r.stalled[k] || math.IsNaN(gn) || math.IsInf(gn, 0)
		if !r.done(k) {
			r.active++
		}
	}
	if s.Resume != nil {
		r.res.Evals = s.Resume.Evals
	}
	r.lastSnap = r.res.Evals
	return r, nil
}

// fits says whether the objective computes what the method asks for,
// and whether the problem is one the method takes.
func (r *run) fits(x0 [][]float64) error {
	method, needs := r.s.Method, Needs(r.s.Method)
	switch {
	case needs&OpHessVec != 0 && r.ops&OpHessVec == 0:
		return fmt.Errorf("osgm: %s needs Hessian-vector products, which this objective lacks", method)
	case needs&OpHess != 0 && r.ops&OpHess == 0:
		return fmt.Errorf("osgm: %s needs the Hessian, which this objective lacks", method)
	case needs&OpHess != 0 && len(x0) > 0 && len(x0[0]) > MaxFullDim:
		return fmt.Errorf("osgm: %s takes at most %d coordinates (features and bias); this problem has %d: use newton", method, MaxFullDim, len(x0[0]))
	}
	return nil
}

// alloc makes the run's vectors: the replies' and the result's.
func (r *run) alloc(x0 [][]float64) {
	K := r.K
	r.f = make([]float64, K)
	r.outs, r.diags, r.hess = make([][]float64, K), make([][]float64, K), make([][]float64, K)
	for k := range r.outs {
		n := len(x0[k])
		r.outs[k] = make([]float64, n)
		if r.ops&OpDiag != 0 {
			r.diags[k] = make([]float64, n)
		}
		if Needs(r.s.Method)&OpHess != 0 {
			r.hess[k] = make([]float64, n*n)
		}
	}
	r.reqs, r.steps = make([]Request, K), make([]Step, K)
	r.res = &Result{X: make([][]float64, K), F: make([]float64, K), GradNorm: make([]float64, K),
		Iters: make([]int, K), Converged: make([]bool, K), Stop: make([]Stop, K)}
	r.stalled = make([]bool, K)
}

// converged is the stopping test of problem k at value f and gradient
// norm gn.
func (r *run) converged(k int, f, gn float64) bool {
	return gn <= r.s.GradTol[k] && (r.s.MaxGap <= 0 || float64(gn*gn) <= float64(2*r.mu[k]*f*r.s.MaxGap))
}

func (r *run) done(k int) bool {
	return r.res.Converged[k] || r.res.Iters[k] >= r.s.MaxIter || r.stalled[k]
}

// asked reports whether problem k, not done, asked for op this round.
func (r *run) asked(k int, op Op) bool { return !r.done(k) && r.reqs[k].Op == op }

// checkpoint takes a snapshot when one is due or Interrupt asks for it,
// and then returns ErrInterrupted if Interrupt did.
func (r *run) checkpoint() error {
	h := &r.h
	interrupted := h.interrupted()
	if h.Checkpoint != nil && (interrupted || r.due()) {
		r.snapAt = h.Now()
		if err := r.snapshot(); err != nil {
			return err
		}
		r.snapCost = h.Now().Sub(r.snapAt)
		r.lastSnap = r.res.Evals
	}
	if interrupted {
		return ErrInterrupted
	}
	return nil
}

// due reports whether CheckpointEvery passes have gone by since the last
// snapshot, and CheckpointShare allows one.
func (r *run) due() bool {
	s := &r.s
	if s.CheckpointEvery <= 0 || r.res.Evals-r.lastSnap < s.CheckpointEvery {
		return false
	}
	return s.CheckpointShare <= 0 || r.snapAt.IsZero() || float64(r.snapCost) <= float64(s.CheckpointShare*float64(r.h.Now().Sub(r.snapAt)))
}

func (r *run) snapshot() error {
	res := r.res
	snap := &Snapshot{Method: r.s.Method, Evals: res.Evals, Iters: append([]int(nil), res.Iters...),
		Converged: append([]bool(nil), res.Converged...), Stalled: append([]bool(nil), r.stalled...)}
	for k, m := range r.ms {
		b, err := saveMethod(m, len(r.outs[k]))
		if err != nil {
			return fmt.Errorf("problem %d: %w", r.problem(k), err)
		}
		snap.States = append(snap.States, b)
	}
	return r.h.Checkpoint(snap)
}

// iterate asks every method not done for its next evaluation and makes
// one pass for each kind asked for, in the order of the Ops.
func (r *run) iterate() error {
	each(r.K, func(k int) {
		if !r.done(k) {
			r.reqs[k] = r.ms[k].Next()
		}
	})
	for _, op := range passOrder {
		if !r.anyAsked(op) {
			continue
		}
		if err := r.pass(op); err != nil {
			if r.h.interrupted() {
				return fmt.Errorf("%w: %w", ErrInterrupted, err)
			}
			return err
		}
		r.res.Evals++
		r.tell(op)
	}
	return nil
}

func (r *run) anyAsked(op Op) bool {
	for k := range r.ms {
		if r.asked(k, op) {
			return true
		}
	}
	return false
}

// pass evaluates op for the problems that asked for it, and those alone
// (all of them, as nil, when there is one problem). A pass carries one
// problem's Hessian, so OpEvalHess makes a pass per problem that asked.
func (r *run) pass(op Op) error {
	first := true
	for k := range r.ms {
		if op != OpEvalHess || !r.asked(k, op) {
			continue
		}
		if !first {
			r.res.Evals++ // iterate counts the first
		}
		first = false
		if err := r.evaluate(op, k, k+1); err != nil {
			return err
		}
	}
	if op == OpEvalHess {
		return nil
	}
	return r.evaluate(op, 0, r.K)
}

// evaluate makes one pass of op over the problems in [lo, hi) that asked.
func (r *run) evaluate(op Op, lo, hi int) error {
	b := &r.b
	*b = Pass{Op: op, Ks: b.Ks[:0], X: b.X[:0], V: b.V[:0], F: b.F[:0], G: b.G[:0], D: b.D[:0], H: b.H[:0], HV: b.HV[:0], At: b.At[:0]}
	for k := lo; k < hi; k++ {
		if !r.asked(k, op) {
			continue
		}
		b.Ks, b.X, b.At = append(b.Ks, k), append(b.X, r.reqs[k].X), append(b.At, r.reqs[k].At)
		switch op {
		case OpHessVec:
			b.V, b.HV = append(b.V, r.reqs[k].V), append(b.HV, r.outs[k])
		default:
			b.F, b.G = append(b.F, 0), append(b.G, r.outs[k])
			if op&OpDiag != 0 {
				b.D = append(b.D, r.diags[k])
			}
			if op&OpHess != 0 {
				b.H = append(b.H, r.hess[k])
			}
		}
	}
	ks := b.Ks
	if r.K == 1 {
		b.Ks = nil // the objective's only problem
	}
	err := r.obj.Evaluate(b)
	for i, f := range b.F {
		r.f[ks[i]] = f
	}
	b.Ks = ks // keeps its memory for the next pass
	return err
}

// tell gives the problems that asked for op its results (their methods
// step in parallel: the problems are independent), then counts and
// traces the iterations that ended.
func (r *run) tell(op Op) {
	each(r.K, func(k int) {
		if !r.asked(k, op) {
			return
		}
		rep := Reply{F: r.f[k], G: r.outs[k]}
		switch op {
		case OpHessVec:
			rep = Reply{HV: r.outs[k]}
		case OpEvalDiag:
			rep.D = r.diags[k]
		case OpEvalHess:
			rep.H = r.hess[k]
		}
		r.steps[k] = r.ms[k].Tell(rep)
	})
	res, s := r.res, &r.s
	for k, m := range r.ms {
		if !r.asked(k, op) || !r.steps[k].Iterated {
			continue
		}
		st := r.steps[k]
		res.Iters[k]++
		_, fb, gb := m.Best()
		gn := vec.Norm(gb)
		res.Converged[k] = r.converged(k, fb, gn)
		r.stalled[k] = st.Stalled
		if r.done(k) {
			r.active--
		}
		if h := &r.h; h.Trace != nil {
			h.Trace(Record{Problem: k, Iter: res.Iters[k], Evals: res.Evals, F: fb, GradNorm: gn, GradTol: s.GradTol[k],
				Accepted: st.Accepted, Elapsed: h.Now().Sub(r.start), Converged: res.Converged[k]})
		}
	}
}

// result is every problem's best point.
func (r *run) result() *Result {
	for k, m := range r.ms {
		x, fb, gb := m.Best()
		r.res.X[k] = clone(x)
		r.res.F[k] = fb
		r.res.GradNorm[k] = vec.Norm(gb)
		r.res.Stop[k] = stopOf(r.res.Converged[k], r.stalled[k], r.res.Iters[k], r.s.MaxIter)
	}
	return r.res
}

// each runs fn for 0..n-1, spread over the available cores when there is
// more than one problem.
func each(n int, fn func(k int)) {
	if n == 1 {
		fn(0)
		return
	}
	var wg sync.WaitGroup
	var next atomic.Int64
	for w := 0; w < min(n, runtime.GOMAXPROCS(0)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := int(next.Add(1) - 1); k < n; k = int(next.Add(1) - 1) {
				fn(k)
			}
		}()
	}
	wg.Wait()
}

// problem is problem k's number in the whole run, for errors: a batch or
// a problem solved alone runs on a subset of the problems.
func (r *run) problem(k int) int {
	if sub, ok := r.obj.(*subset); ok && k < len(sub.ks) {
		return sub.ks[k]
	}
	return k
}
