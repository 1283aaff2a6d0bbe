package osgm

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"gonum.org/v1/gonum/floats"
)

// Settings control a run of Minimize.
type Settings struct {
	Method string
	Params Params
	// Shape describes the data, for resolving Auto (see Choose).
	Shape Shape
	// MaxIter bounds the iterations of each problem.
	MaxIter int
	// GradTol is each problem's stopping threshold on ||grad f||_2.
	GradTol []float64
	// Trace, when set, receives a record after every iteration.
	Trace func(Record)
	// Now is the clock (time.Now when nil); tests replace it.
	Now func() time.Time
	// F0 and G0, when set, are the value and gradient at x0, which saves
	// the first evaluation.
	F0 []float64
	G0 [][]float64

	// Resume continues a run from a snapshot instead of starting at x0
	// (which then only gives the dimensions).
	Resume *Snapshot
	// Checkpoint, when set, receives a snapshot every CheckpointEvery
	// passes and when Interrupt reports true. Interrupt is polled between
	// rounds; once it reports true Minimize returns ErrInterrupted. A
	// pass that fails while Interrupt reports true (the evaluation was
	// stopped too: a round waiting on workers that never came) also ends
	// with ErrInterrupted, the last snapshot taken before it holding the
	// state: a method between its request and the reply is not one to
	// save.
	Checkpoint      func(*Snapshot) error
	CheckpointEvery int
	// CheckpointShare, when positive, also spaces snapshots in time: the
	// next is not taken before the last one (its encoding and what
	// Checkpoint did with it) has cost at most this share of the time
	// since it began. A state is as large as the problems (news20.t's
	// L-BFGS: 150 MB), and written every 50 passes it doubled the run.
	CheckpointShare float64
	Interrupt       func() bool
	// Batch, when positive and below the number of problems, minimises
	// them this many at a time (see minimizeBatches): the same result,
	// with the methods' memory bounded by the batch.
	Batch int
	// BatchStart, when set, runs before each batch that begins at x0 (in
	// batches; not the batch a snapshot resumes), in place of F0 and G0.
	// It makes one pass over the batch's problems ks alone, counted among
	// the passes, and gives their value and gradient at x0 (nil: Minimize
	// evaluates x0 itself), their GradTol, and their Diag (nil: the
	// problems' own), so that what such a pass brings is held a batch at
	// a time too.
	BatchStart func(ks []int) (Start, error)
}

// Start is what BatchStart gives a batch.
type Start struct {
	F0      []float64
	G0      [][]float64
	GradTol []float64
	Diag    [][]float64
}

// ErrInterrupted is returned when Interrupt stopped a run; the last
// snapshot holds its state.
var ErrInterrupted = errors.New("osgm: interrupted")

// Record describes one iteration of one problem.
type Record struct {
	Problem   int
	Iter      int
	Evals     int // data passes so far, shared by all problems
	F         float64
	GradNorm  float64
	GradTol   float64 // the problem's stopping threshold on GradNorm
	Accepted  bool
	Elapsed   time.Duration
	Converged bool
}

// Result is the outcome of Minimize: the best point of every problem.
type Result struct {
	X         [][]float64
	F         []float64
	GradNorm  []float64
	Iters     []int
	Converged []bool
	Evals     int // data passes, including one at x0 unless F0 was given
}

// Minimize runs one method per problem from x0, evaluating all problems
// that need the same kind of evaluation in one call of obj, until every
// problem meets its gradient tolerance, stalls or hits MaxIter.
func Minimize(obj Objective, x0 [][]float64, probs []Problem, s Settings) (*Result, error) {
	K := len(x0)
	if len(probs) != K || len(s.GradTol) != K {
		return nil, errors.New("osgm: x0, problems and tolerances differ in number")
	}
	batched := s.Batch > 0 && s.Batch < K
	if s.Resume != nil {
		batched = s.Resume.Batch > 0 // a run goes on as its snapshot was taken
	}
	if batched {
		return minimizeBatches(obj, x0, probs, s)
	}
	now := s.Now
	if now == nil {
		now = time.Now
	}
	start := now()
	s.Method = Choose(s.Method, K, s.Shape)
	hv, _ := obj.(HessVecer)
	if NeedsHessVec(s.Method) && hv == nil {
		return nil, fmt.Errorf("osgm: %s needs Hessian-vector products, which this objective lacks", s.Method)
	}
	eh, _ := obj.(EvalHesser)
	if NeedsHess(s.Method) && eh == nil {
		return nil, fmt.Errorf("osgm: %s needs the Hessian, which this objective lacks", s.Method)
	}
	if NeedsHess(s.Method) && K > 0 && len(x0[0]) > MaxFullDim {
		return nil, fmt.Errorf("osgm: %s takes at most %d coordinates (features and bias); this problem has %d: use newton", s.Method, MaxFullDim, len(x0[0]))
	}

	ed, _ := obj.(EvalDiager)
	f := make([]float64, K)
	g := make([][]float64, K)
	for k := range g {
		g[k] = make([]float64, len(x0[k]))
	}
	res := &Result{X: make([][]float64, K), F: make([]float64, K), GradNorm: make([]float64, K),
		Iters: make([]int, K), Converged: make([]bool, K)}
	switch {
	case s.Resume != nil:
		// The methods' states replace what Init sets up below.
		if err := s.Resume.fits(s.Method, K); err != nil {
			return nil, err
		}
	case s.F0 != nil:
		copy(f, s.F0)
		for k := range g {
			copy(g[k], s.G0[k])
		}
	default:
		if err := obj.Eval(x0, f, g); err != nil {
			return nil, err
		}
		res.Evals++
	}
	ms := make([]Method, K)
	for k := range ms {
		prob := probs[k]
		prob.EvalDiag = ed != nil
		m, err := New(s.Method, prob, s.Params)
		if err != nil {
			return nil, err
		}
		ms[k] = m
	}
	stalled := make([]bool, K)
	done := func(k int) bool { return res.Converged[k] || res.Iters[k] >= s.MaxIter || stalled[k] }
	active := 0
	for k, m := range ms {
		m.Init(x0[k], f[k], g[k])
		if s.Resume != nil {
			if err := loadMethod(m, len(x0[k]), s.Resume.States[k]); err != nil {
				return nil, err
			}
			res.Iters[k], stalled[k] = s.Resume.Iters[k], s.Resume.Stalled[k]
		}
		_, _, gb := m.Best()
		gn := floats.Norm(gb, 2)
		res.Converged[k] = gn <= s.GradTol[k]
		stalled[k] = stalled[k] || math.IsNaN(gn) || math.IsInf(gn, 0)
		if !done(k) {
			active++
		}
	}
	if s.Resume != nil {
		res.Evals = s.Resume.Evals
	}
	snapshot := func() error {
		snap := &Snapshot{Method: s.Method, Evals: res.Evals, Iters: append([]int(nil), res.Iters...),
			Converged: append([]bool(nil), res.Converged...), Stalled: append([]bool(nil), stalled...)}
		for _, m := range ms {
			b, err := saveMethod(m)
			if err != nil {
				return err
			}
			snap.States = append(snap.States, b)
		}
		return s.Checkpoint(snap)
	}
	lastSnap := res.Evals
	var snapAt time.Time       // when the last snapshot began
	var snapCost time.Duration // and what it cost
	due := func() bool {
		if s.CheckpointEvery <= 0 || res.Evals-lastSnap < s.CheckpointEvery {
			return false
		}
		return s.CheckpointShare <= 0 || snapAt.IsZero() || float64(snapCost) <= s.CheckpointShare*float64(now().Sub(snapAt))
	}

	xs := make([][]float64, K)
	vs := make([][]float64, K)
	outs := make([][]float64, K)
	diags := make([][]float64, K) // OpEvalDiag's second output
	hess := make([][]float64, K)  // OpEvalHess's
	for k := range outs {
		outs[k] = make([]float64, len(x0[k]))
		if ed != nil {
			diags[k] = make([]float64, len(x0[k]))
		}
		if NeedsHess(s.Method) {
			hess[k] = make([]float64, len(x0[k])*len(x0[k]))
		}
	}
	reqs := make([]Request, K)
	steps := make([]Step, K)
	some, _ := obj.(Subsetter)
	var ks []int
	var sx, sv, sout, sd [][]float64
	var sf []float64
	// pass evaluates op for the problems that asked for it. An objective
	// that can, evaluates those only; otherwise the others ride along at
	// their best point and their results are ignored.
	pass := func(op Op) error {
		if op == OpEvalHess { // a pass carries one problem's Hessian
			first := true
			for k := range ms {
				if done(k) || reqs[k].Op != op {
					continue
				}
				if !first {
					res.Evals++ // the caller counts the first
				}
				first = false
				var only []int
				if K > 1 {
					only = []int{k}
				}
				if err := eh.EvalHessSome(only, [][]float64{reqs[k].X}, f[k:k+1], outs[k:k+1], hess[k:k+1]); err != nil {
					return err
				}
			}
			return nil
		}
		if some != nil && K > 1 {
			ks, sx, sv, sout, sd, sf = ks[:0], sx[:0], sv[:0], sout[:0], sd[:0], sf[:0]
			for k := range ms {
				if !done(k) && reqs[k].Op == op {
					ks = append(ks, k)
					sx, sv, sout, sf = append(sx, reqs[k].X), append(sv, reqs[k].V), append(sout, outs[k]), append(sf, 0)
					sd = append(sd, diags[k])
				}
			}
			var err error
			switch op {
			case OpEval:
				err = some.EvalSome(ks, sx, sf, sout)
			case OpHessVec:
				err = some.HessVecSome(ks, sx, sv, sout)
			case OpEvalDiag:
				err = ed.EvalDiagSome(ks, sx, sf, sout, sd)
			}
			for i, k := range ks {
				f[k] = sf[i]
			}
			return err
		}
		for k := range ms {
			if !done(k) && reqs[k].Op == op {
				xs[k], vs[k] = reqs[k].X, reqs[k].V
			} else {
				xs[k], _, _ = ms[k].Best()
				vs[k] = xs[k]
			}
		}
		switch op {
		case OpEval:
			return obj.Eval(xs, f, outs)
		case OpHessVec:
			return hv.HessVec(xs, vs, outs)
		default:
			return ed.EvalDiagSome(nil, xs, f, outs, diags)
		}
	}
	for active > 0 {
		interrupted := s.Interrupt != nil && s.Interrupt()
		if s.Checkpoint != nil && (interrupted || due()) {
			snapAt = now()
			if err := snapshot(); err != nil {
				return nil, err
			}
			snapCost = now().Sub(snapAt)
			lastSnap = res.Evals
		}
		if interrupted {
			return nil, ErrInterrupted
		}
		var need [numOps]bool
		each(K, func(k int) {
			if !done(k) {
				reqs[k] = ms[k].Next()
			}
		})
		for k := range ms {
			if !done(k) {
				need[reqs[k].Op] = true
			}
		}
		for op := range numOps {
			if !need[op] {
				continue
			}
			if err := pass(op); err != nil {
				if s.Interrupt != nil && s.Interrupt() {
					return nil, fmt.Errorf("%w: %w", ErrInterrupted, err)
				}
				return nil, err
			}
			res.Evals++
			// The problems are independent: their methods step in parallel.
			each(K, func(k int) {
				if done(k) || reqs[k].Op != op {
					return
				}
				switch op {
				case OpEval:
					steps[k] = ms[k].Tell(Reply{F: f[k], G: outs[k]})
				case OpHessVec:
					steps[k] = ms[k].Tell(Reply{HV: outs[k]})
				case OpEvalDiag:
					steps[k] = ms[k].Tell(Reply{F: f[k], G: outs[k], D: diags[k]})
				case OpEvalHess:
					steps[k] = ms[k].Tell(Reply{F: f[k], G: outs[k], H: hess[k]})
				}
			})
			for k, m := range ms {
				if done(k) || reqs[k].Op != op {
					continue
				}
				st := steps[k]
				if !st.Iterated {
					continue
				}
				res.Iters[k]++
				_, fb, gb := m.Best()
				gn := floats.Norm(gb, 2)
				res.Converged[k] = gn <= s.GradTol[k]
				stalled[k] = st.Stalled
				if done(k) {
					active--
				}
				if s.Trace != nil {
					s.Trace(Record{Problem: k, Iter: res.Iters[k], Evals: res.Evals, F: fb, GradNorm: gn, GradTol: s.GradTol[k],
						Accepted: st.Accepted, Elapsed: now().Sub(start), Converged: res.Converged[k]})
				}
			}
		}
	}
	for k, m := range ms {
		x, fb, gb := m.Best()
		res.X[k] = clone(x)
		res.F[k] = fb
		res.GradNorm[k] = floats.Norm(gb, 2)
	}
	return res, nil
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
