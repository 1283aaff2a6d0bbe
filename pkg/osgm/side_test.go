package osgm

import (
	"bytes"
	"encoding/gob"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// forking is a quadratic that forks, each fork counting its own passes.
type forking struct {
	*quadratic
	forks *atomic.Int32
}

func newForking(q *quadratic) *forking { return &forking{quadratic: q, forks: new(atomic.Int32)} }

func (f *forking) Fork() Objective {
	f.forks.Add(1)
	c := *f.quadratic
	return &forking{quadratic: &c, forks: f.forks}
}

// sameResult fails unless got is want, bit for bit, problem by problem.
func sameResult(t *testing.T, what string, got, want *Result, shelf memShelf) {
	t.Helper()
	for k := range want.X {
		x := got.X[k]
		if shelf != nil {
			x = shelf[k]
		}
		if !slices.Equal(x, want.X[k]) || got.F[k] != want.F[k] || got.Iters[k] != want.Iters[k] ||
			got.Converged[k] != want.Converged[k] || got.Stop[k] != want.Stop[k] {
			t.Fatalf("%s: problem %d differs from one at a time", what, k)
		}
	}
	if got.Evals != want.Evals {
		t.Fatalf("%s: %d passes, one at a time %d", what, got.Evals, want.Evals)
	}
}

// TestSideBySide: problems minimised side by side on forks end where one
// at a time do, bit for bit and in as many passes; they ran at once on
// their own forks, and the trace names each problem by its own index.
func TestSideBySide(t *testing.T) {
	for _, method := range []string{"lbfgs", "newton", "osgm-h"} {
		q, x0, s := batchRun(method)
		s.Batch = 1
		want, err := Minimize(q, x0, q.problems(), s, Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		f := newForking(q)
		s.Parallel = 3
		var mu sync.Mutex
		seen, last, monotone := map[int]bool{}, 0, true
		trace := func(r Record) {
			if !mu.TryLock() {
				t.Error("Trace called while another call runs")
				return
			}
			defer mu.Unlock()
			seen[r.Problem] = true
			monotone = monotone && r.Evals >= last
			last = r.Evals
		}
		got, err := Minimize(f, x0, q.problems(), s, Hooks{Trace: trace})
		if err != nil {
			t.Fatal(err)
		}
		sameResult(t, method, got, want, nil)
		if f.forks.Load() != 3 || len(seen) != 5 || !monotone || last > got.Evals {
			t.Fatalf("%s: %d forks, traced %v, passes traced in order %v, last %d of %d", method, f.forks.Load(), seen, monotone, last, got.Evals)
		}
	}
}

// TestSideBySideResumes: every snapshot of a side-by-side run, and the
// one an interruption leaves, resume to the uninterrupted run's bits and
// passes, with a shelf and with a new one, on forks or on an objective
// that cannot fork.
func TestSideBySideResumes(t *testing.T) {
	q, x0, s := batchRun("lbfgs")
	s.Batch, s.Parallel, s.CheckpointEvery = 1, 2, 7
	want, err := Minimize(q, x0, q.problems(), s, Hooks{}) // one at a time
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var snaps []*Snapshot
	h := Hooks{Shelf: memShelf{}, Checkpoint: func(snap *Snapshot) error {
		mu.Lock()
		defer mu.Unlock()
		snaps = append(snaps, snap)
		return nil
	}}
	got, err := Minimize(newForking(q), x0, q.problems(), s, h)
	if err != nil {
		t.Fatal(err)
	}
	sameResult(t, "with checkpoints", got, want, h.Shelf.(memShelf))
	if len(snaps) < 4 {
		t.Fatalf("%d snapshots", len(snaps))
	}
	rounds := atomic.Int32{}
	h.Interrupt = func() bool { return rounds.Add(1) > 40 }
	_, err = Minimize(newForking(q), x0, q.problems(), s, h)
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("interrupted: %v", err)
	}
	for i, snap := range snaps {
		if !snap.Side {
			t.Fatalf("snapshot %d is not side by side", i)
		}
		rs, shelf := s, memShelf{}
		rs.Resume = snap
		var obj Objective = newForking(q)
		if i%2 == 1 {
			obj = q // no forks: one at a time
		}
		got, err := Minimize(obj, x0, q.problems(), rs, Hooks{Shelf: shelf})
		if err != nil {
			t.Fatalf("snapshot %d: %v", i, err)
		}
		sameResult(t, "resumed", got, want, shelf)
	}
}

// FuzzResumeSide resumes a side-by-side run from a snapshot whose fields
// are anything: it is refused or resumed, never a panic.
func FuzzResumeSide(f *testing.F) {
	q, x0, s := batchRun("lbfgs")
	s.Batch, s.Parallel, s.CheckpointEvery = 1, 2, 5
	var mu sync.Mutex
	var snaps []*Snapshot
	h := Hooks{Checkpoint: func(snap *Snapshot) error { mu.Lock(); snaps = append(snaps, snap); mu.Unlock(); return nil }}
	if _, err := Minimize(newForking(q), x0, q.problems(), s, h); err != nil {
		f.Fatal(err)
	}
	for _, snap := range snaps {
		if len(snap.Running) > 0 {
			f.Add(snap.Ended, snap.States[0], snap.Running[0], snap.RunEvals[0], snap.Evals)
		}
	}
	f.Fuzz(func(t *testing.T, ended, state []byte, running, runEvals, evals int) {
		q, x0, s := batchRun("lbfgs")
		s.Batch, s.Parallel = 1, 2
		s.Resume = &Snapshot{Method: "lbfgs", Evals: evals, Iters: []int{0}, Converged: []bool{false}, Stalled: []bool{false},
			States: [][]byte{state}, Batch: 1, Side: true, Ended: ended, Running: []int{running}, RunEvals: []int{runEvals}}
		rounds := atomic.Int32{}
		Minimize(newForking(q), x0, q.problems(), s, Hooks{Interrupt: func() bool { return rounds.Add(1) > 300 }})
	})
}

// placing is a fork that places problems elsewhere, as a worker would:
// the settings cross as gob, the hooks stay here, and the problem
// runs on a copy of the data in a goroutine of its own. Odd problems it
// declines, and they are minimised here.
type placing struct {
	*forking
	placed *atomic.Int32
}

func (p *placing) Fork() Objective {
	return &placing{forking: p.forking.Fork().(*forking), placed: p.placed}
}

func (p *placing) Place(k int, x0 []float64, prob Problem, s Settings, h Hooks) (*Result, bool, error) {
	if k%2 == 1 {
		return nil, false, nil
	}
	p.placed.Add(1)
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(struct {
		S Settings
		P Problem
	}{s, prob}); err != nil {
		return nil, true, err
	}
	var far struct {
		S Settings
		P Problem
	}
	if err := gob.NewDecoder(&buf).Decode(&far); err != nil {
		return nil, true, err
	}
	data := *p.quadratic
	type out struct {
		r   *Result
		err error
	}
	done := make(chan out)
	go func() {
		r, err := Solve(&data, k, x0, far.P, far.S, h)
		done <- out{r, err}
	}()
	o := <-done
	return o.r, true, o.err
}

// TestPlacedProblems: problems that forks place elsewhere, and those
// they decline, end where one at a time do, and so do runs resumed from
// the snapshots the placed problems' states went into.
func TestPlacedProblems(t *testing.T) {
	q, x0, s := batchRun("newton")
	s.Batch, s.CheckpointEvery = 1, 5
	want, err := Minimize(q, x0, q.problems(), s, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var snaps []*Snapshot
	h := Hooks{Checkpoint: func(snap *Snapshot) error { mu.Lock(); snaps = append(snaps, snap); mu.Unlock(); return nil }}
	s.Parallel = 2
	pl := &placing{forking: newForking(q), placed: new(atomic.Int32)}
	got, err := Minimize(pl, x0, q.problems(), s, h)
	if err != nil {
		t.Fatal(err)
	}
	sameResult(t, "placed", got, want, nil)
	if n := pl.placed.Load(); n != 3 || len(snaps) < 3 {
		t.Fatalf("%d problems placed, %d snapshots", n, len(snaps))
	}
	for i, snap := range snaps {
		rs := s
		rs.Resume = snap
		got, err := Minimize(&placing{forking: newForking(q), placed: new(atomic.Int32)}, x0, q.problems(), rs, Hooks{})
		if err != nil {
			t.Fatalf("snapshot %d: %v", i, err)
		}
		sameResult(t, "resumed", got, want, nil)
	}
}
