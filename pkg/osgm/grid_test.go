package osgm

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// TestResumeGrid interrupts every stateful method at every pass of a run
// (each a CG step, line-search trial or oracle evaluation), in each way
// the run can be laid out, resumes it from its snapshot after a trip
// through bytes, and expects the uninterrupted result bit for bit. The
// ways are: two problems together, one at a time (batches), and side by
// side on forks that place half the problems elsewhere, as placed
// one-vs-rest classes run. CI takes every fifth pass from a random
// offset, logged; OSGM_RESUME_GRID=full takes every pass
// (scripts/resumegrid.sh), and OSGM_RESUME_SEED gives an offset again.
func TestResumeGrid(t *testing.T) {
	stride, phase := 5, rand.IntN(5)
	if os.Getenv("OSGM_RESUME_GRID") == "full" {
		stride, phase = 1, 0
	}
	if v := os.Getenv("OSGM_RESUME_SEED"); v != "" {
		phase, _ = strconv.Atoi(v)
	}
	t.Logf("every %d passes from pass %d (OSGM_RESUME_SEED=%d)", stride, 1+phase%stride, phase)
	for _, method := range Methods() {
		if !Checkpointable(method) || method == Auto {
			continue
		}
		for _, layout := range []string{"together", "batches", "placed"} {
			t.Run(method+"/"+layout, func(t *testing.T) {
				g := newGridRun(method, layout)
				want, err := g.minimize(nil, Hooks{})
				if err != nil {
					t.Fatal(err)
				}
				for at := 1 + phase%stride; at < want.Evals; at += stride {
					g.interruptAt(t, at, want)
				}
			})
		}
	}
}

// gridRun is a run of the grid: its objective, start and settings.
type gridRun struct {
	layout string
	q      *quadratic
	x0     [][]float64
	s      Settings
}

func newGridRun(method, layout string) *gridRun {
	_, x0, s := batchRun(method)
	q := newQuadratic(rand.New(rand.NewPCG(5, 6)), 8, 3, 30, true)
	x0 = x0[:3]
	s.GradTol, s.MaxIter = s.GradTol[:3], 200
	switch layout {
	case "batches":
		s.Batch = 1
	case "placed":
		s.Batch, s.Parallel = 1, 2
	}
	return &gridRun{layout: layout, q: q, x0: x0, s: s}
}

// minimize runs from resume (nil: the start) with hooks h.
func (g *gridRun) minimize(resume *Snapshot, h Hooks) (*Result, error) {
	s := g.s
	s.Resume = resume
	var obj Objective = g.q
	if g.layout == "placed" {
		obj = &placing{forking: newForking(g.q), placed: new(atomic.Int32)}
	}
	return Minimize(obj, g.x0, g.q.problems(), s, h)
}

// interruptAt interrupts a run at round at (side by side, at the at-th
// poll of any problem), resumes it, and checks the result.
func (g *gridRun) interruptAt(t *testing.T, at int, want *Result) {
	var (
		mu    sync.Mutex
		saved []byte
		polls atomic.Int64
	)
	save := func(snap *Snapshot) error {
		var b bytes.Buffer
		if err := gob.NewEncoder(&b).Encode(snap); err != nil {
			return err
		}
		mu.Lock()
		saved = b.Bytes()
		mu.Unlock()
		return nil
	}
	// Interrupt is polled once a round, before the round's pass.
	r, err := g.minimize(nil, Hooks{Checkpoint: save, Interrupt: func() bool { return polls.Add(1) >= int64(at) }})
	what := fmt.Sprintf("interrupted at round %d of %d passes", at, want.Evals)
	if err == nil { // it ended before its problems polled again
		sameResult(t, what, r, want, nil)
		return
	}
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("%s: %v", what, err)
	}
	var snap *Snapshot
	if saved != nil {
		snap = new(Snapshot)
		if err := gob.NewDecoder(bytes.NewReader(saved)).Decode(snap); err != nil {
			t.Fatal(err)
		}
	}
	got, err := g.minimize(snap, Hooks{})
	if err != nil {
		t.Fatalf("%s, resumed: %v", what, err)
	}
	sameResult(t, what, got, want, nil)
}
