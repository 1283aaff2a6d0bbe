package osgm

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// newtonStates runs newton on a 2-problem quadratic of n coordinates and
// returns problem 1's encoded state after every pass, with the snapshots'
// passes: what a checkpoint taken at any pass would hold.
func newtonStates(t *testing.T, n int) (states [][]byte, snaps []*Snapshot) {
	q, zero, s := resumable("newton", n)
	s.CheckpointEvery = 1
	h := Hooks{Checkpoint: func(snap *Snapshot) error {
		states = append(states, snap.States[1])
		snaps = append(snaps, snap)
		return nil
	}}
	if _, err := Minimize(q, zero(), q.problems(), s, h); err != nil {
		t.Fatal(err)
	}
	return states, snaps
}

// TestTornNewtonStateRefused builds on purpose the state a checkpoint
// once held (issue 71): its scalars after a CG step, R and D before it,
// and Step after it up to a coordinate and before it from there on. Two
// ways it could come about are refused: its bytes spliced from two
// encodings (the state's checksum), and the struct itself torn and
// encoded whole (Newton's invariant, RZ = R·M⁻¹R), both at resume and at
// write, with the problem and the field named.
func TestTornNewtonStateRefused(t *testing.T) {
	const n = 40
	states, snaps := newtonStates(t, n)
	// A pass within a CG solve: the state before and after one step.
	var before, after newtonState
	at := -1
	for i := 1; i < len(states) && at < 0; i++ {
		if err := decodeState(states[i-1], &before); err != nil {
			t.Fatal(err)
		}
		if err := decodeState(states[i], &after); err != nil {
			t.Fatal(err)
		}
		if before.InCG && after.InCG && after.CGSteps == before.CGSteps+1 && after.CGSteps > 2 {
			at = i
		}
	}
	if at < 0 {
		t.Fatal("no pass within a CG solve")
	}
	resume := func(state []byte) error {
		q, zero, s := resumable("newton", n)
		snap := *snaps[at]
		snap.States = [][]byte{snap.States[0], state}
		s.Resume = &snap
		_, err := Minimize(q, zero(), q.problems(), s, Hooks{})
		return err
	}
	if err := resume(states[at]); err != nil {
		t.Fatalf("the whole state after step %d: %v", after.CGSteps, err)
	}

	t.Run("spliced bytes", func(t *testing.T) {
		a, b := states[at-1], states[at]
		if len(a) != len(b) {
			t.Fatalf("states of %d and %d bytes", len(a), len(b))
		}
		for cut := 1; cut < len(a); cut += 7 {
			spliced := append(slices.Clone(b[:cut]), a[cut:]...)
			if bytes.Equal(spliced, b) || bytes.Equal(spliced, a) {
				continue
			}
			if err := resume(spliced); err == nil || !strings.Contains(err.Error(), "checksum") || !strings.Contains(err.Error(), "problem 1") {
				t.Fatalf("spliced at byte %d of %d: %v", cut, len(a), err)
			}
		}
	})

	torn := after
	torn.R, torn.D = slices.Clone(before.R), slices.Clone(before.D)
	torn.Step = append(slices.Clone(after.Step[:n/3]), before.Step[n/3:]...)
	t.Run("torn fields, at resume", func(t *testing.T) {
		b, err := encodeState(&torn)
		if err != nil {
			t.Fatal(err)
		}
		err = resume(b)
		if err == nil || !strings.Contains(err.Error(), "problem 1") || !strings.Contains(err.Error(), "RZ is") {
			t.Fatalf("got %v, want problem 1's RZ named", err)
		}
	})
	t.Run("torn fields, at write", func(t *testing.T) {
		m := newTRON(Problem{Dim: n}, false)
		m.S = torn
		if _, err := saveMethod(m, n); err == nil || !strings.Contains(err.Error(), "RZ is") || !strings.Contains(err.Error(), "not saved") {
			t.Fatalf("got %v, want the write refused, naming RZ", err)
		}
		m.S = after
		if _, err := saveMethod(m, n); err != nil {
			t.Fatalf("the whole state: %v", err)
		}
	})
}

// TestStatesFailingTheirChecks: each method's invariant, broken in a
// real state and encoded whole, is refused by name.
func TestStatesFailingTheirChecks(t *testing.T) {
	snaps := snapshotsOf(t, 12)
	resume := func(name string, snap *Snapshot) error {
		q, zero, s := resumable(name, 12)
		s.Resume = snap
		_, err := Minimize(q, zero(), q.problems(), s, Hooks{})
		return err
	}
	broken := func(name string, st any, change func()) *Snapshot {
		snap := *snaps[name]
		if err := decodeState(snap.States[0], st); err != nil {
			t.Fatal(err)
		}
		change()
		b, err := encodeState(st)
		if err != nil {
			t.Fatal(err)
		}
		snap.States = [][]byte{b, snap.States[1]}
		return &snap
	}
	var ls lbfgsState
	var ns newtonState
	var os osgmState
	for _, c := range []struct {
		name, method string
		snap         *Snapshot
		want         string
	}{
		{"an L-BFGS pair of two iterations", "lbfgs", broken("lbfgs", &ls, func() {
			if ls.Cnt == 0 {
				t.Fatal("lbfgs's snapshot keeps no pair")
			}
			j := (ls.Head - 1 + len(ls.Rho)) % len(ls.Rho)
			ls.Hy[j][0] *= 2
		}), "Rho["},
		{"L-BFGS's scale not the newest pair's", "lbfgs", broken("lbfgs", &ls, func() { ls.Gamma *= 1.5 }), "Gamma is"},
		{"a preconditioner entry of 0", "newton", broken("newton", &ns, func() { ns.M[3] = 0 }), "M[3] is 0"},
		{"more accepted trials than trials", "newton", broken("newton", &ns, func() { ns.Accepts = ns.Iter + 1 }), "accepted"},
		{"a step outside the trust region", "newton", broken("newton", &ns, func() {
			if !ns.InCG {
				t.Fatal("newton's snapshot is not within a solve")
			}
			ns.Delta = 0
		}), "outside the trust region"},
		{"a negative AdaGrad sum", "osgm-h", broken("osgm-h", &os, func() { os.Acc[5] = -1 }), "Acc[5] is -1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := resume(c.method, c.snap)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "problem 0") {
				t.Fatalf("got %v, want problem 0 and %q named", err, c.want)
			}
		})
	}
}

// TestSolveNamesItsProblem: a problem solved alone (a placed class) that
// cannot resume is named by its number in the whole run.
func TestSolveNamesItsProblem(t *testing.T) {
	snaps := snapshotsOf(t, 12)
	q := diagQuadratic{newQuadratic(rand.New(rand.NewPCG(4, 4)), 12, 2, 50, true)}
	snap := *snaps["newton"]
	snap.Iters, snap.Converged, snap.Stalled = snap.Iters[1:], snap.Converged[1:], snap.Stalled[1:]
	snap.States = [][]byte{snap.States[1][:len(snap.States[1])-1]}
	s := Settings{Options: Options{Method: "newton", MaxIter: 60}, GradTol: []float64{1e-10}, Resume: &snap}
	_, err := Solve(q, 1, make([]float64, 12), q.problems()[1], s, Hooks{})
	if err == nil || !strings.Contains(err.Error(), "problem 1:") || errors.Is(err, ErrInterrupted) {
		t.Fatalf("got %v, want problem 1 named", err)
	}
}

// damaging places problems as placing does, and cuts a byte off every
// state its placed problems save, as a fault on the way back would.
type damaging struct{ *placing }

func (d *damaging) Fork() Objective { return &damaging{d.placing.Fork().(*placing)} }

func (d *damaging) Place(k int, x0 []float64, prob Problem, s Settings, h Hooks) (*Result, bool, error) {
	save := h.Checkpoint
	h.Checkpoint = func(snap *Snapshot) error {
		cut := *snap
		cut.States = [][]byte{snap.States[0][:len(snap.States[0])-1]}
		return save(&cut)
	}
	return d.placing.Place(k, x0, prob, s, h)
}

// TestDamagedPlacedStateRefused: a state that comes back from a placed
// problem other than its method wrote it fails the run, naming the
// problem, before any checkpoint holds it. placing places the even
// problems; the first to save, whichever it is, fails the run.
func TestDamagedPlacedStateRefused(t *testing.T) {
	q, x0, s := batchRun("newton")
	s.Batch, s.CheckpointEvery, s.Parallel = 1, 5, 2
	var held atomic.Int32
	h := Hooks{Checkpoint: func(snap *Snapshot) error {
		for _, k := range snap.Running {
			if k%2 == 0 {
				held.Add(1)
			}
		}
		return nil
	}}
	_, err := Minimize(&damaging{&placing{forking: newForking(q), placed: new(atomic.Int32)}}, x0, q.problems(), s, h)
	if err == nil || !regexp.MustCompile(`problem [024]'s saved state: .*checksum`).MatchString(err.Error()) {
		t.Fatalf("got %v, want a placed problem's state refused", err)
	}
	if n := held.Load(); n != 0 {
		t.Fatalf("%d checkpoints held a placed problem's damaged state", n)
	}
}
