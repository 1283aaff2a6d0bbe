package osgm

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func batchRun(method string) (*quadratic, [][]float64, Settings) {
	q := newQuadratic(rand.New(rand.NewPCG(5, 6)), 8, 5, 30, true)
	x0 := make([][]float64, 5)
	for k := range x0 {
		x0[k] = make([]float64, 8)
	}
	return q, x0, Settings{Options: Options{Method: method, MaxIter: 500}, GradTol: slices.Repeat([]float64{1e-9}, 5)}
}

// TestBatchesAreIndependent: problems minimised 1, 2 or 4 at a time end
// where all at once do, bit for bit, in as many passes as their batches
// took; the trace names every problem by its own index.
func TestBatchesAreIndependent(t *testing.T) {
	for _, method := range []string{"lbfgs", "hdm", "osgm-h", "newton"} {
		q, x0, s := batchRun(method)
		want, err := Minimize(q, x0, q.problems(), s, Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		for _, batch := range []int{1, 2, 4} {
			s.Batch = batch
			seen := map[int]bool{}
			h := Hooks{Trace: func(r Record) { seen[r.Problem] = true }}
			got, err := Minimize(q, x0, q.problems(), s, h)
			if err != nil {
				t.Fatal(err)
			}
			for k := range want.X {
				if !slices.Equal(got.X[k], want.X[k]) || got.F[k] != want.F[k] || got.Iters[k] != want.Iters[k] || got.Converged[k] != want.Converged[k] {
					t.Fatalf("%s, batches of %d: problem %d differs from all at once", method, batch, k)
				}
			}
			if len(seen) != 5 || got.Evals < want.Evals {
				t.Fatalf("%s, batches of %d: traced %v, %d passes against %d", method, batch, seen, got.Evals, want.Evals)
			}
		}
	}
}

// FuzzResumeBatches resumes a run in batches from a snapshot whose batch
// fields (the batch size, its first problem, the finished problems'
// bytes) are anything: it is refused or resumed, never a panic.
func FuzzResumeBatches(f *testing.F) {
	q, x0, s := batchRun("lbfgs")
	s.Batch, s.CheckpointEvery = 2, 5
	var snaps []*Snapshot
	h := Hooks{Checkpoint: func(snap *Snapshot) error { snaps = append(snaps, snap); return nil }}
	if _, err := Minimize(q, x0, q.problems(), s, h); err != nil {
		f.Fatal(err)
	}
	for _, snap := range snaps {
		if snap.First > 0 {
			f.Add(snap.Batch, snap.First, snap.Done, snap.States[0])
			break
		}
	}
	f.Add(2, 0, []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, batch, first int, done, state []byte) {
		for _, snap := range snaps {
			if snap.First != first || len(snap.States) == 0 {
				continue
			}
			q, x0, s := batchRun("lbfgs")
			states := slices.Clone(snap.States)
			states[0] = state
			s.Resume = &Snapshot{Method: "lbfgs", Evals: snap.Evals, Iters: snap.Iters, Converged: snap.Converged, Stalled: snap.Stalled,
				States: states, Batch: batch, First: first, Done: done}
			rounds := 0
			Minimize(q, x0, q.problems(), s, Hooks{Interrupt: func() bool { rounds++; return rounds > 300 }})
			return
		}
	})
}

// memShelf is a Shelf in memory.
type memShelf map[int][]float64

func (m memShelf) Put(k int, x []float64) error { m[k] = slices.Clone(x); return nil }
func (m memShelf) Get(k int, x []float64) error { copy(x, m[k]); return nil }

// TestShelvedBatches: with a shelf, each batch's points go there and the
// result holds none; the shelf holds the unshelved run's bits, the
// checkpoints are the same bytes, and a run resumed from one with a new
// shelf ends with every problem on it, the same bits again.
func TestShelvedBatches(t *testing.T) {
	for _, batch := range []int{1, 2} {
		q, x0, s := batchRun("lbfgs")
		s.Batch, s.CheckpointEvery = batch, 5
		var plain, shelved []*Snapshot
		want, err := Minimize(q, x0, q.problems(), s, Hooks{Checkpoint: func(snap *Snapshot) error { plain = append(plain, snap); return nil }})
		if err != nil {
			t.Fatal(err)
		}
		shelf := memShelf{}
		got, err := Minimize(q, x0, q.problems(), s, Hooks{Shelf: shelf, Checkpoint: func(snap *Snapshot) error { shelved = append(shelved, snap); return nil }})
		if err != nil {
			t.Fatal(err)
		}
		for k := range want.X {
			if got.X[k] != nil || !slices.Equal(shelf[k], want.X[k]) || got.F[k] != want.F[k] {
				t.Fatalf("batches of %d: problem %d: result %v, shelf %v, want %v", batch, k, got.X[k], shelf[k], want.X[k])
			}
		}
		if len(shelved) != len(plain) {
			t.Fatalf("batches of %d: %d checkpoints with a shelf, %d without", batch, len(shelved), len(plain))
		}
		var mid *Snapshot
		for i, snap := range shelved {
			if !slices.Equal(snap.Done, plain[i].Done) {
				t.Fatalf("batches of %d: checkpoint %d's finished problems differ with a shelf", batch, i)
			}
			if mid == nil && snap.First > 0 {
				mid = snap
			}
		}
		if mid == nil {
			t.Fatalf("batches of %d: no checkpoint after the first batch", batch)
		}
		shelf = memShelf{}
		s.Resume = mid
		if _, err := Minimize(q, x0, q.problems(), s, Hooks{Shelf: shelf}); err != nil {
			t.Fatal(err)
		}
		for k := range want.X {
			if !slices.Equal(shelf[k], want.X[k]) {
				t.Fatalf("batches of %d, resumed at problem %d: problem %d's shelved point differs", batch, mid.First, k)
			}
		}
	}
}
