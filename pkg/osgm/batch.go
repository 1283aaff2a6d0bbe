package osgm

import (
	"fmt"
)

// One-vs-rest problems share passes over the data but nothing else: each
// has its own method, and a pass computes each problem's value and
// gradient on its own. So they can be minimised Settings.Batch at a time,
// which bounds the methods' memory (L-BFGS holds some 30 vectors a
// problem) by the batch instead of by every class, and gives the same
// bits as all at once: a batch is Minimize over those problems alone, on
// an objective that evaluates just them.

func minimizeBatches(obj Objective, x0 [][]float64, probs []Problem, s Settings, h Hooks) (*Result, error) {
	K, B := len(x0), s.Batch
	// The method is the whole run's choice, not a batch's.
	s.Method = Choose(s.Method, K, s.Shape)
	res := &Result{X: make([][]float64, K), F: make([]float64, K), GradNorm: make([]float64, K),
		Iters: make([]int, K), Converged: make([]bool, K), Stop: make([]Stop, K)}
	first, before := 0, 0 // the batch to start at, and the passes made before it
	if r := s.Resume; r != nil {
		// The batch size depends on the memory of the host that started
		// the run; results do not, so the snapshot's goes on.
		B, first = r.Batch, r.First
		done, err := r.done(x0, s.MaxIter)
		if err != nil {
			return nil, err
		}
		res.place(0, done)
		if err := res.shelve(h.Shelf, 0, first); err != nil {
			return nil, err
		}
		before = done.Evals
	}
	for lo := first; lo < K; lo += B {
		hi := min(lo+B, K)
		ks := make([]int, hi-lo)
		for i := range ks {
			ks[i] = lo + i
		}
		bs, bh := s, h
		bs.Batch, bs.GradTol, bh.BatchStart = 0, s.GradTol[lo:hi], nil
		if s.F0 != nil {
			bs.F0, bs.G0 = s.F0[lo:hi], s.G0[lo:hi]
		}
		bprobs := probs[lo:hi]
		bs.Resume = nil
		if r := s.Resume; r != nil && lo == first {
			bs.Resume = &Snapshot{Method: r.Method, Evals: r.Evals, Iters: r.Iters, Converged: r.Converged, Stalled: r.Stalled, States: r.States}
		} else if h.BatchStart != nil {
			st, err := h.BatchStart(obj, ks)
			if err != nil {
				return nil, err
			}
			before++ // its pass
			bs.F0, bs.G0, bs.GradTol = st.F0, st.G0, st.GradTol
			if st.Diag != nil {
				bprobs = append([]Problem(nil), bprobs...)
				for i := range bprobs {
					bprobs[i].Diag = st.Diag[i]
				}
			}
		}
		if h.Trace != nil {
			bh.Trace = func(r Record) {
				r.Problem += lo
				r.Evals += before
				h.Trace(r)
			}
		}
		if h.Checkpoint != nil {
			bh.Checkpoint = batchCheckpoint(res, h, x0, B, lo, before)
		}
		r, err := Minimize(&subset{obj: obj, ks: ks}, x0[lo:hi], bprobs, bs, bh)
		if err != nil {
			return nil, err
		}
		res.place(lo, r)
		if err := res.shelve(h.Shelf, lo, hi); err != nil {
			return nil, err
		}
		before += r.Evals
	}
	res.Evals = before
	return res, nil
}

// batchCheckpoint saves the snapshot of the batch from problem lo with
// the problems before it, done, and their passes, before.
func batchCheckpoint(res *Result, h Hooks, x0 [][]float64, B, lo, before int) func(*Snapshot) error {
	return func(snap *Snapshot) error {
		xs, err := res.unshelved(h.Shelf, x0[:lo])
		if err != nil {
			return err
		}
		done, err := encodeState(&Result{X: xs, F: res.F[:lo], GradNorm: res.GradNorm[:lo],
			Iters: res.Iters[:lo], Converged: res.Converged[:lo], Stop: res.Stop[:lo], Evals: before})
		if err != nil {
			return err
		}
		snap.Batch, snap.First, snap.Done = B, lo, done
		return h.Checkpoint(snap)
	}
}

// done is what the batches before a batched snapshot's left: the
// finished problems, their passes in Evals.
func (r *Snapshot) done(x0 [][]float64, maxIter int) (*Result, error) {
	K := len(x0)
	if r.Batch < 1 || r.First < 0 || r.First >= K || r.First%r.Batch != 0 {
		return nil, fmt.Errorf("osgm: the snapshot's batch (%d problems from problem %d) does not fit %d problems", r.Batch, r.First, K)
	}
	first := r.First
	var done Result
	if err := decodeState(r.Done, &done); err != nil {
		return nil, fmt.Errorf("osgm: the snapshot's finished problems: %w", err)
	}
	if len(done.X) != first || len(done.F) != first || len(done.GradNorm) != first || len(done.Iters) != first || len(done.Converged) != first || done.Evals < 0 {
		return nil, fmt.Errorf("osgm: the snapshot's finished problems do not number %d", first)
	}
	for k, x := range done.X {
		if len(x) != len(x0[k]) {
			return nil, fmt.Errorf("osgm: the snapshot's problem %d has %d coordinates, this run %d", k, len(x), len(x0[k]))
		}
	}
	if done.Stop == nil {
		// Snapshots before Result.Stop: what the finished problems'
		// state says, as a stalled method leaves it.
		done.Stop = make([]Stop, first)
		for k := range done.Stop {
			done.Stop[k] = stopOf(done.Converged[k], true, done.Iters[k], maxIter)
		}
	}
	if len(done.Stop) != first {
		return nil, fmt.Errorf("osgm: the snapshot's finished problems do not number %d", first)
	}
	return &done, nil
}

// place copies r's problems into res's from problem lo on.
func (res *Result) place(lo int, r *Result) {
	copy(res.X[lo:], r.X)
	copy(res.F[lo:], r.F)
	copy(res.GradNorm[lo:], r.GradNorm)
	copy(res.Iters[lo:], r.Iters)
	copy(res.Converged[lo:], r.Converged)
	copy(res.Stop[lo:], r.Stop)
}

// shelve puts problems lo to hi on the shelf, if there is one, and
// lets go of their points.
func (res *Result) shelve(shelf Shelf, lo, hi int) error {
	if shelf == nil {
		return nil
	}
	for k := lo; k < hi; k++ {
		if err := shelf.Put(k, res.X[k]); err != nil {
			return fmt.Errorf("osgm: shelving problem %d: %w", k, err)
		}
		res.X[k] = nil
	}
	return nil
}

// unshelved is the points of the first len(x0) problems, read back from
// the shelf if there is one: a checkpoint holds them all for the time it
// is written.
func (res *Result) unshelved(shelf Shelf, x0 [][]float64) ([][]float64, error) {
	if shelf == nil {
		return res.X[:len(x0)], nil
	}
	xs := make([][]float64, len(x0))
	for k := range xs {
		xs[k] = make([]float64, len(x0[k]))
		if err := shelf.Get(k, xs[k]); err != nil {
			return nil, fmt.Errorf("osgm: unshelving problem %d: %w", k, err)
		}
	}
	return xs, nil
}

// subset is problems ks of an objective, as problems 0, 1, ... of their
// own: a batch's, or one problem's side by side.
type subset struct {
	Here // a view of some problems: its own minimisation's, not forked
	obj  Objective
	ks   []int
	buf  []int
}

func (b *subset) Ops() Op { return b.obj.Ops() }

// Evaluate maps the subset's problems to obj's (nil: all of them).
func (b *subset) Evaluate(e *Pass) error {
	inner := e.Ks
	if inner == nil {
		e.Ks = b.ks
	} else {
		b.buf = b.buf[:0]
		for _, k := range inner {
			b.buf = append(b.buf, b.ks[k])
		}
		e.Ks = b.buf
	}
	err := b.obj.Evaluate(e)
	e.Ks = inner
	return err
}
