package osgm

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestResumeIsBitIdentical interrupts every checkpointable method in the
// middle of a run, resumes it from the snapshot (after a trip through
// bytes), and expects exactly the result of an uninterrupted run.
func TestResumeIsBitIdentical(t *testing.T) {
	type run struct {
		name string
		diag bool    // the objective gives a varying Hessian (diagonal), which Newton uses
		at   int     // the round interrupted (default 23)
		hp   float64 // newton-full: a Hessian pass's cost
	}
	var runs []run
	for _, name := range Methods() {
		if Checkpointable(name) && name != "newton-full" {
			runs = append(runs, run{name, false, 0, 0})
		}
	}
	// newton-full starts as TRON and takes a Hessian that varies with x
	// after its first solve (of over 0 or 3 steps); it is interrupted
	// while it holds one.
	runs = append(runs, run{"newton", true, 0, 0}, run{"newton-full", true, 0, 0}, run{"newton-full", true, 15, 3})
	for _, r := range runs {
		name := r.name
		t.Run(fmt.Sprintf("%s/diag=%v/hp=%v", name, r.diag, r.hp), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(4, 4))
			var q interface {
				Objective
				problems() []Problem
			} = newQuadratic(rng, 12, 2, 50, true)
			if r.diag {
				q = diagQuadratic{q.(*quadratic)}
			}
			zero := func() [][]float64 { return [][]float64{make([]float64, 12), make([]float64, 12)} }
			base := Settings{Method: name, MaxIter: 400, GradTol: []float64{1e-10, 1e-10}, Params: Params{NoDiag: true}}
			probs := q.problems()
			for k := range probs {
				probs[k].HessPasses = r.hp
			}
			want, err := Minimize(q, zero(), probs, base)
			if err != nil {
				t.Fatal(err)
			}

			var saved []byte
			rounds := 0
			interrupted := base
			interrupted.CheckpointEvery = 7
			interrupted.Checkpoint = func(s *Snapshot) error {
				var b bytes.Buffer
				if err := gob.NewEncoder(&b).Encode(s); err != nil {
					return err
				}
				saved = b.Bytes()
				return nil
			}
			at := r.at
			if at == 0 {
				at = 23
			}
			interrupted.Interrupt = func() bool { rounds++; return rounds == at }
			if _, err := Minimize(q, zero(), probs, interrupted); !errors.Is(err, ErrInterrupted) {
				if err == nil {
					t.Skip("finished before the interruption")
				}
				t.Fatal(err)
			}
			var snap Snapshot
			if err := gob.NewDecoder(bytes.NewReader(saved)).Decode(&snap); err != nil {
				t.Fatal(err)
			}
			resumed := base
			resumed.Resume = &snap
			got, err := Minimize(q, zero(), probs, resumed)
			if err != nil {
				t.Fatal(err)
			}
			if got.Evals != want.Evals {
				t.Errorf("evaluations %d, uninterrupted %d", got.Evals, want.Evals)
			}
			for k := range want.X {
				if got.Iters[k] != want.Iters[k] || math.Float64bits(got.F[k]) != math.Float64bits(want.F[k]) {
					t.Fatalf("problem %d: %d iterations f=%v, uninterrupted %d f=%v", k, got.Iters[k], got.F[k], want.Iters[k], want.F[k])
				}
				for j := range want.X[k] {
					if math.Float64bits(got.X[k][j]) != math.Float64bits(want.X[k][j]) {
						t.Fatalf("problem %d: x[%d] differs", k, j)
					}
				}
			}
		})
	}
}

// failingAt is an objective whose evaluation number at fails (a round
// stopped while it waited on workers).
type failingAt struct {
	*quadratic
	at, calls int
}

var errStopped = errors.New("stopped")

func (o *failingAt) Eval(x [][]float64, f []float64, g [][]float64) error {
	if o.calls++; o.calls == o.at {
		return errStopped
	}
	return o.quadratic.Eval(x, f, g)
}

// TestStoppedPassEndsAsInterrupted: a pass that fails once Interrupt
// reports true ends the run with ErrInterrupted, and the last checkpoint
// resumes to the uninterrupted result; the same failure without the
// interruption is the pass's error alone.
func TestStoppedPassEndsAsInterrupted(t *testing.T) {
	q := newQuadratic(rand.New(rand.NewPCG(7, 7)), 12, 2, 50, true)
	zero := func() [][]float64 { return [][]float64{make([]float64, 12), make([]float64, 12)} }
	base := Settings{Method: "lbfgs", MaxIter: 400, GradTol: []float64{1e-10, 1e-10}, Params: Params{NoDiag: true}}
	want, err := Minimize(q, zero(), q.problems(), base)
	if err != nil {
		t.Fatal(err)
	}

	obj := &failingAt{quadratic: q, at: 20}
	if _, err := Minimize(obj, zero(), q.problems(), base); !errors.Is(err, errStopped) || errors.Is(err, ErrInterrupted) {
		t.Fatalf("a failed pass without an interruption: %v", err)
	}

	var last *Snapshot
	stopped := base
	stopped.CheckpointEvery = 5
	stopped.Checkpoint = func(s *Snapshot) error { last = s; return nil }
	obj = &failingAt{quadratic: q, at: 20}
	stopped.Interrupt = func() bool { return obj.calls >= obj.at }
	_, err = Minimize(obj, zero(), q.problems(), stopped)
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, errStopped) {
		t.Fatalf("a pass failed while interrupted: %v", err)
	}
	if last == nil || last.Evals >= obj.at {
		t.Fatalf("the last checkpoint is not one from before the failed pass: %+v", last)
	}
	resumed := base
	resumed.Resume = last
	got, err := Minimize(q, zero(), q.problems(), resumed)
	if err != nil {
		t.Fatal(err)
	}
	for k := range want.X {
		for j := range want.X[k] {
			if math.Float64bits(got.X[k][j]) != math.Float64bits(want.X[k][j]) {
				t.Fatalf("resumed from the last checkpoint: problem %d, x[%d] differs", k, j)
			}
		}
	}
}
