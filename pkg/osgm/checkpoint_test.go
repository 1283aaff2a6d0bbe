package osgm

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
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
			base := Settings{Options: Options{Method: name, MaxIter: 400, Params: Params{NoDiag: true}}, GradTol: []float64{1e-10, 1e-10}}
			probs := q.problems()
			for k := range probs {
				probs[k].HessPasses = r.hp
			}
			want, err := Minimize(q, zero(), probs, base, Hooks{})
			if err != nil {
				t.Fatal(err)
			}

			var saved []byte
			rounds := 0
			interrupted := base
			interrupted.CheckpointEvery = 7
			var h Hooks
			h.Checkpoint = func(s *Snapshot) error {
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
			h.Interrupt = func() bool { rounds++; return rounds == at }
			if _, err := Minimize(q, zero(), probs, interrupted, h); !errors.Is(err, ErrInterrupted) {
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
			got, err := Minimize(q, zero(), probs, resumed, Hooks{})
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

func (o *failingAt) Evaluate(b *Pass) error {
	if o.calls++; o.calls == o.at {
		return errStopped
	}
	return o.quadratic.Evaluate(b)
}

// TestStoppedPassEndsAsInterrupted: a pass that fails once Interrupt
// reports true ends the run with ErrInterrupted, and the last checkpoint
// resumes to the uninterrupted result; the same failure without the
// interruption is the pass's error alone.
func TestStoppedPassEndsAsInterrupted(t *testing.T) {
	q := newQuadratic(rand.New(rand.NewPCG(7, 7)), 12, 2, 50, true)
	zero := func() [][]float64 { return [][]float64{make([]float64, 12), make([]float64, 12)} }
	base := Settings{Options: Options{Method: "lbfgs", MaxIter: 400, Params: Params{NoDiag: true}}, GradTol: []float64{1e-10, 1e-10}}
	want, err := Minimize(q, zero(), q.problems(), base, Hooks{})
	if err != nil {
		t.Fatal(err)
	}

	obj := &failingAt{quadratic: q, at: 20}
	if _, err := Minimize(obj, zero(), q.problems(), base, Hooks{}); !errors.Is(err, errStopped) || errors.Is(err, ErrInterrupted) {
		t.Fatalf("a failed pass without an interruption: %v", err)
	}

	var last *Snapshot
	stopped := base
	stopped.CheckpointEvery = 5
	obj = &failingAt{quadratic: q, at: 20}
	_, err = Minimize(obj, zero(), q.problems(), stopped, Hooks{
		Checkpoint: func(s *Snapshot) error { last = s; return nil },
		Interrupt:  func() bool { return obj.calls >= obj.at },
	})
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, errStopped) {
		t.Fatalf("a pass failed while interrupted: %v", err)
	}
	if last == nil || last.Evals >= obj.at {
		t.Fatalf("the last checkpoint is not one from before the failed pass: %+v", last)
	}
	resumed := base
	resumed.Resume = last
	got, err := Minimize(q, zero(), q.problems(), resumed, Hooks{})
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

// snapshotsOf runs every checkpointable method on a 2-problem quadratic
// of n coordinates and returns, per method, the snapshot taken after 9
// passes: what a checkpoint would hold.
func snapshotsOf(t testing.TB, n int) map[string]*Snapshot {
	out := map[string]*Snapshot{}
	for _, name := range Methods() {
		if !Checkpointable(name) {
			continue
		}
		q, zero, s := resumable(name, n)
		s.CheckpointEvery = 9
		h := Hooks{Checkpoint: func(snap *Snapshot) error {
			if out[name] == nil {
				out[name] = snap
			}
			return nil
		}}
		if _, err := Minimize(q, zero(), q.problems(), s, h); err != nil {
			t.Fatal(err)
		}
		if out[name] == nil {
			t.Fatalf("%s: no snapshot", name)
		}
	}
	return out
}

// resumable is the objective, start and settings a method's snapshots
// are taken and resumed with: newton-full holds a Hessian by pass 9.
func resumable(name string, n int) (interface {
	Objective
	problems() []Problem
}, func() [][]float64, Settings) {
	q := diagQuadratic{newQuadratic(rand.New(rand.NewPCG(4, 4)), n, 2, 50, true)}
	probs := q.problems()
	for k := range probs {
		probs[k].HessPasses = 1
	}
	zero := func() [][]float64 { return [][]float64{make([]float64, n), make([]float64, n)} }
	return hessPassesOf{q, probs}, zero, Settings{Options: Options{Method: name, MaxIter: 60, Params: Params{NoDiag: true}}, GradTol: []float64{1e-10, 1e-10}}
}

// hessPassesOf is an objective whose problems are probs.
type hessPassesOf struct {
	diagQuadratic
	probs []Problem
}

func (h hessPassesOf) problems() []Problem { return h.probs }

// TestResumeRefusesStatesThatDoNotFit: a snapshot that is not of this run
// (another method, another number of problems, vectors of another length,
// a history index out of range) is refused with an error before any step;
// the snapshots themselves resume.
func TestResumeRefusesStatesThatDoNotFit(t *testing.T) {
	snaps := snapshotsOf(t, 12)
	resume := func(name string, n int, snap *Snapshot) error {
		q, zero, s := resumable(name, n)
		s.Resume = snap
		_, err := Minimize(q, zero(), q.problems(), s, Hooks{})
		return err
	}
	for name, snap := range snaps {
		if err := resume(name, 12, snap); err != nil {
			t.Errorf("%s: its own snapshot: %v", name, err)
		}
	}
	// mutated is snap with its second state decoded into st, changed by
	// change, and encoded again.
	mutated := func(snap *Snapshot, st any, change func()) *Snapshot {
		if err := decodeState(snap.States[1], st); err != nil {
			t.Fatal(err)
		}
		change()
		b, err := encodeState(st)
		if err != nil {
			t.Fatal(err)
		}
		out := *snap
		out.States = [][]byte{snap.States[0], b}
		return &out
	}
	var ls lbfgsState
	lbfgsHead := mutated(snaps["lbfgs"], &ls, func() { ls.Head = len(ls.Rho) })
	var ns newtonState
	shortHessian := mutated(snaps["newton-full"], &ns, func() {
		if len(ns.H) != 144 {
			t.Fatalf("newton-full's snapshot holds a Hessian of %d entries, want 144", len(ns.H))
		}
		ns.H = ns.H[:143]
	})
	oneState := *snaps["newton"]
	oneState.States = oneState.States[:1]
	for _, c := range []struct {
		name, method string
		n            int
		snap         *Snapshot
		want         string
	}{
		{"another method", "lbfgs", 12, snaps["hdm"], "the snapshot is of hdm"},
		{"one state for two problems", "newton", 12, &oneState, "for 2 problems"},
		{"a history index out of range", "lbfgs", 12, lbfgsHead, "history head 10"},
		{"lbfgs, shorter vectors", "lbfgs", 10, snaps["lbfgs"], "X has 12 entries, the problem 10"},
		{"newton, longer vectors", "newton", 14, snaps["newton"], "X has 12 entries, the problem 14"},
		{"newton-full, a Hessian short of an entry", "newton-full", 12, shortHessian, "a Hessian of 143 entries"},
		{"newton-full, fewer coordinates", "newton-full", 11, snaps["newton-full"], "X has 12 entries, the problem 11"},
		{"osgm-g, shorter vectors", "osgm-g", 11, snaps["osgm-g"], "X has 12 entries, the problem 11"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := resume(c.method, c.n, c.snap)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}

// FuzzResume: whatever bytes a snapshot's states hold, resuming from them
// returns (an error, or a result) and never panics. The seeds are real
// states of every checkpointable method.
func FuzzResume(f *testing.F) {
	snaps := snapshotsOf(f, 6)
	names := slices.Sorted(maps.Keys(snaps))
	for i, name := range names {
		f.Add(uint8(i), snaps[name].States[0], snaps[name].States[1])
	}
	f.Fuzz(func(t *testing.T, method uint8, a, b []byte) {
		name := names[int(method)%len(names)]
		q, zero, s := resumable(name, 6)
		s.Resume = &Snapshot{Method: name, Evals: 9, Iters: []int{3, 3}, Converged: []bool{false, false}, Stalled: []bool{false, false}, States: [][]byte{a, b}}
		rounds := 0
		// A state may never finish an iteration.
		Minimize(q, zero(), q.problems(), s, Hooks{Interrupt: func() bool { rounds++; return rounds > 200 }})
	})
}

// TestStateCodec: a state comes back field for field and bit for bit (a
// nil vector stays nil, an empty one empty, NaN and -0 keep their bits),
// and every cut of its bytes, and one byte too many, is refused.
func TestStateCodec(t *testing.T) {
	type state struct {
		A, Nil, Empty []float64
		H             [][]float64
		NoH           [][]float64
		F             float64
		N             int
		B             bool
	}
	nan := math.Float64frombits(0x7ff8000000000123)
	in := state{A: []float64{1.5, math.Copysign(0, -1), nan, math.Inf(-1)}, Empty: []float64{},
		H: [][]float64{{2}, nil, {3, 4}}, F: -7.25, N: 9, B: true}
	b, err := encodeState(&in)
	if err != nil {
		t.Fatal(err)
	}
	// The vectors' bits, little-endian on any machine, then the CRC-32C
	// of all before it end the encoding.
	le := binary.LittleEndian
	body := b[:len(b)-4]
	if tail := le.AppendUint64(le.AppendUint64(nil, math.Float64bits(3)), math.Float64bits(4)); !bytes.HasSuffix(body, tail) {
		t.Fatalf("the encoding ends % x, want % x", body[len(body)-16:], tail)
	}
	if got, want := le.Uint32(b[len(b)-4:]), crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)); got != want {
		t.Fatalf("the encoding's checksum is %08x, want %08x", got, want)
	}
	var out state
	out.N = 5 // overwritten, and a field saved as zero comes back zero
	if err := decodeState(b, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(bitsOf(out.A), bitsOf(in.A)) || out.Nil != nil || out.Empty == nil || len(out.Empty) != 0 ||
		len(out.H) != 3 || out.H[1] != nil || !slices.Equal(out.H[2], in.H[2]) || out.NoH != nil ||
		out.F != in.F || out.N != in.N || !out.B {
		t.Fatalf("got %+v, want %+v", out, in)
	}
	for cut := range len(b) {
		if err := decodeState(b[:cut], &out); err == nil {
			t.Fatalf("%d of %d bytes decoded", cut, len(b))
		}
	}
	if err := decodeState(append(slices.Clone(b), 0), &out); err == nil {
		t.Fatal("a byte too many decoded")
	}
	for i := range b {
		flipped := slices.Clone(b)
		flipped[i] ^= 1 << (i % 8)
		if err := decodeState(flipped, &out); err == nil {
			t.Fatalf("a bit flipped in byte %d of %d decoded", i, len(b))
		}
	}
}

func bitsOf(x []float64) []uint64 {
	out := make([]uint64, len(x))
	for i, v := range x {
		out[i] = math.Float64bits(v)
	}
	return out
}

// clocked is an objective whose passes take pass on the fake clock t.
type clocked struct {
	*quadratic
	t    *time.Time
	pass time.Duration
}

func (c clocked) Evaluate(b *Pass) error {
	*c.t = c.t.Add(c.pass)
	return c.quadratic.Evaluate(b)
}

// TestCheckpointShareSpacesSnapshots: on a clock where a pass takes 10 ms
// and a snapshot 100 ms, a 5% share lets one through in 2 s (200
// passes), where CheckpointEvery alone takes one every 7 passes.
func TestCheckpointShareSpacesSnapshots(t *testing.T) {
	count := func(share float64) (snaps, evals int) {
		clock := time.Unix(0, 0)
		q := clocked{newQuadratic(rand.New(rand.NewPCG(9, 9)), 40, 1, 1e4, true), &clock, 10 * time.Millisecond}
		s := Settings{Options: Options{Method: "lbfgs", MaxIter: 2000, Params: Params{NoDiag: true}, CheckpointEvery: 7, CheckpointShare: share}, GradTol: []float64{1e-12}}
		h := Hooks{Now: func() time.Time { return clock }, Checkpoint: func(*Snapshot) error { snaps++; clock = clock.Add(100 * time.Millisecond); return nil }}
		res, err := Minimize(q, [][]float64{make([]float64, 40)}, q.problems(), s, h)
		if err != nil {
			t.Fatal(err)
		}
		return snaps, res.Evals
	}
	all, evals := count(0)
	spaced, _ := count(0.05)
	if want := (evals - 1) / 7; all < want-1 || all > want+1 {
		t.Fatalf("without a share: %d snapshots in %d passes, want about %d", all, evals, want)
	}
	if want := 1 + (evals-8)/200; spaced < want-1 || spaced > want+1 {
		t.Fatalf("with a 5%% share: %d snapshots in %d passes, want about %d", spaced, evals, want)
	}
	t.Logf("%d passes: %d snapshots, %d with the share", evals, all, spaced)
}
