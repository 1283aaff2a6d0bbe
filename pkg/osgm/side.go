package osgm

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// Side by side: with one problem at a time (Batch 1) a pass carries one
// problem, so nothing ties one problem's rounds to another's. On an
// objective whose data is in this process (one whose Fork is not nil), Parallel problems
// then run at once, each a Minimize of its own on its own fork, a fork
// taking the next problem when its problem ends: a one-vs-rest model's
// classes spread over the cores without a round between them, and each
// problem's bits are those of one at a time.
//
// A snapshot holds the problems that ended and, for each under way, the
// last state its own run saved (every CheckpointEvery of its passes, and
// when interrupted). The problems are independent, so these states,
// taken at different moments, together are one the run can go on from.

// side is the state of a side-by-side run.
type side struct {
	s     Settings
	h     Hooks
	x0    [][]float64
	probs []Problem
	res   *Result

	// mu guards res (a problem has ended once its Stop is set) and what
	// follows, and serialises Trace.
	mu      sync.Mutex
	base    int // passes of the problems ended, and of those before a snapshot resumed
	running map[int]*underway
	err     error

	stop atomic.Bool // a problem failed: the others stop too
}

// underway is a problem being minimised.
type underway struct {
	start int       // passes before its Minimize (BatchStart's), 0 if resumed
	evals int       // its Minimize's passes at its last record
	snap  *Snapshot // the last state it saved, nil before the first
}

func minimizeSide(obj Objective, x0 [][]float64, probs []Problem, s Settings, h Hooks) (*Result, error) {
	K := len(x0)
	s.Method = Choose(s.Method, K, s.Shape)
	sd := &side{s: s, h: h, x0: x0, probs: probs, res: newResult(K), running: map[int]*underway{}}
	queue, resumed, err := sd.resume()
	if err != nil {
		return nil, err
	}
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for _, o := range forks(obj, min(max(s.Parallel, 1), len(queue))) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(queue) && !sd.interrupted(); i = int(next.Add(1) - 1) {
				if err := sd.one(o, queue[i], resumed[queue[i]]); err != nil {
					sd.fail(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if sd.err == nil && slices.Contains(sd.res.Stop, Running) {
		sd.err = ErrInterrupted // between two problems
	}
	if errors.Is(sd.err, ErrInterrupted) && h.Checkpoint != nil {
		if err := sd.save(); err != nil {
			return nil, err
		}
	}
	if sd.err != nil {
		return nil, sd.err
	}
	sd.res.Evals = sd.base
	return sd.res, nil
}

// forks are w objectives to run problems on: forks of obj, or obj alone
// when it cannot fork.
func forks(obj Objective, w int) []Objective {
	var out []Objective
	if w > 1 {
		for range w {
			if o := obj.Fork(); o != nil {
				out = append(out, o)
			}
		}
	}
	if len(out) == 0 {
		out = []Objective{obj}
	}
	return out
}

func newResult(K int) *Result {
	return &Result{X: make([][]float64, K), F: make([]float64, K), GradNorm: make([]float64, K),
		Iters: make([]int, K), Converged: make([]bool, K), Stop: make([]Stop, K)}
}

func (sd *side) interrupted() bool {
	return sd.stop.Load() || sd.h.interrupted()
}

// fail records err, the first failure other than an interruption
// winning, and stops the other problems.
func (sd *side) fail(err error) {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	if sd.err == nil || errors.Is(sd.err, ErrInterrupted) && !errors.Is(err, ErrInterrupted) {
		sd.err = err
	}
	if !errors.Is(err, ErrInterrupted) {
		sd.stop.Store(true)
	}
}

// one minimises problem k alone on obj, from its saved state if resumed.
func (sd *side) one(obj Objective, k int, resumed *Snapshot) error {
	s, h := sd.s, sd.h
	bs := s
	bs.Batch, bs.Parallel, bs.F0, bs.G0 = 0, 0, nil, nil
	bs.GradTol, bs.Resume = s.GradTol[k:k+1], resumed
	probs := sd.probs[k : k+1]
	u := &underway{}
	switch {
	case resumed != nil:
	case h.BatchStart != nil:
		st, err := h.BatchStart(obj, []int{k})
		if err != nil {
			return err
		}
		u.start = 1
		bs.F0, bs.G0, bs.GradTol = st.F0, st.G0, st.GradTol
		if st.Diag != nil {
			probs = []Problem{probs[0]}
			probs[0].Diag = st.Diag[0]
		}
	case s.F0 != nil:
		bs.F0, bs.G0 = s.F0[k:k+1], s.G0[k:k+1]
	}
	sd.mu.Lock()
	sd.running[k] = u
	sd.mu.Unlock()
	bh := Hooks{Now: h.Now, Interrupt: sd.interrupted}
	if h.Trace != nil {
		bh.Trace = func(r Record) { sd.trace(k, u, r) }
	}
	if h.Checkpoint != nil {
		bh.Checkpoint = func(snap *Snapshot) error { return sd.deposit(k, u, snap) }
	}
	r, err := solveOn(obj, k, sd.x0[k], probs[0], bs, bh)
	if err != nil {
		return err
	}
	return sd.end(k, u, r)
}

// solveOn minimises problem k where obj places it, or else here.
func solveOn(obj Objective, k int, x0 []float64, p Problem, s Settings, h Hooks) (*Result, error) {
	if r, ok, err := obj.Place(k, x0, p, s, h); ok || err != nil {
		return r, err
	}
	return Solve(obj, k, x0, p, s, h)
}

// trace passes on problem k's record, numbered in the whole run.
func (sd *side) trace(k int, u *underway, r Record) {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	u.evals = r.Evals
	r.Problem, r.Evals = k, sd.passes()
	sd.h.Trace(r)
}

// passes is the passes made so far, sd.mu held.
func (sd *side) passes() int {
	n := sd.base
	for _, u := range sd.running {
		n += u.start + u.evals
	}
	return n
}

// end places problem k's result and shelves its point.
func (sd *side) end(k int, u *underway, r *Result) error {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	sd.res.place(k, r)
	if err := sd.res.shelve(sd.h.Shelf, k, k+1); err != nil {
		return err
	}
	delete(sd.running, k)
	sd.base += u.start + r.Evals
	return nil
}

// deposit keeps a problem's saved state and, unless the run is being
// interrupted (it saves once every problem has stopped), saves the run.
// A placed problem's state came from another process: one whose bytes
// are not those its method wrote is refused before it reaches a
// checkpoint.
func (sd *side) deposit(k int, u *underway, snap *Snapshot) error {
	if len(snap.States) != 1 || len(snap.Iters) != 1 || len(snap.Converged) != 1 || len(snap.Stalled) != 1 {
		return fmt.Errorf("osgm: problem %d saved a snapshot of %d states", k, len(snap.States))
	}
	if err := stateSum(snap.States[0]); err != nil {
		return fmt.Errorf("osgm: problem %d's saved state: %w", k, err)
	}
	sd.mu.Lock()
	u.snap, u.evals = snap, snap.Evals
	sd.mu.Unlock()
	if sd.interrupted() {
		return nil
	}
	return sd.save()
}

// save hands the run's snapshot to Hooks.Checkpoint.
func (sd *side) save() error {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	snap, err := sd.snapshot()
	if err != nil {
		return err
	}
	return sd.h.Checkpoint(snap)
}

// snapshot is the run's state, sd.mu held: the problems ended, with their
// points back from the shelf, and those under way that saved a state.
func (sd *side) snapshot() (*Snapshot, error) {
	ended := newResult(len(sd.x0))
	for k, st := range sd.res.Stop {
		if st == Running {
			continue
		}
		ended.place1(k, sd.res, k)
		if x := sd.res.X[k]; x == nil && sd.h.Shelf != nil {
			ended.X[k] = make([]float64, len(sd.x0[k]))
			if err := sd.h.Shelf.Get(k, ended.X[k]); err != nil {
				return nil, fmt.Errorf("osgm: unshelving problem %d: %w", k, err)
			}
		}
	}
	b, err := encodeState(ended)
	if err != nil {
		return nil, err
	}
	snap := &Snapshot{Method: sd.s.Method, Evals: sd.passes(), Batch: 1, Side: true, Ended: b}
	ks := make([]int, 0, len(sd.running))
	for k := range sd.running {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	for _, k := range ks {
		u := sd.running[k]
		if u.snap == nil {
			continue // starts afresh
		}
		us := u.snap
		snap.Running, snap.RunEvals = append(snap.Running, k), append(snap.RunEvals, us.Evals)
		snap.Iters, snap.Converged = append(snap.Iters, us.Iters[0]), append(snap.Converged, us.Converged[0])
		snap.Stalled, snap.States = append(snap.Stalled, us.Stalled[0]), append(snap.States, us.States[0])
	}
	return snap, nil
}

// place1 copies r's problem i into res's problem k.
func (res *Result) place1(k int, r *Result, i int) {
	res.X[k], res.F[k], res.GradNorm[k] = r.X[i], r.F[i], r.GradNorm[i]
	res.Iters[k], res.Converged[k], res.Stop[k] = r.Iters[i], r.Converged[i], r.Stop[i]
}

// resume restores a side-by-side snapshot's ended problems (shelving
// their points) and returns the problems to minimise, those under way
// first, with the states they resume from.
func (sd *side) resume() (queue []int, resumed map[int]*Snapshot, err error) {
	K, r := len(sd.x0), sd.s.Resume
	resumed = map[int]*Snapshot{}
	if r != nil {
		if err := sd.restore(r); err != nil {
			return nil, nil, err
		}
		for i, k := range r.Running {
			resumed[k] = &Snapshot{Method: r.Method, Evals: r.RunEvals[i], Iters: []int{r.Iters[i]},
				Converged: []bool{r.Converged[i]}, Stalled: []bool{r.Stalled[i]}, States: [][]byte{r.States[i]}}
			queue = append(queue, k)
		}
	}
	for k := range K {
		if sd.res.Stop[k] == Running && resumed[k] == nil {
			queue = append(queue, k)
		}
	}
	return queue, resumed, nil
}

// restore checks a side-by-side snapshot against the run and takes its
// ended problems and passes.
func (sd *side) restore(r *Snapshot) error {
	K := len(sd.x0)
	if r.Method != sd.s.Method {
		return fmt.Errorf("osgm: the snapshot is of %s, this run %s", r.Method, sd.s.Method)
	}
	n := len(r.Running)
	if len(r.RunEvals) != n || len(r.Iters) != n || len(r.Converged) != n || len(r.Stalled) != n || len(r.States) != n {
		return fmt.Errorf("osgm: the snapshot's %d problems under way have %d, %d, %d, %d and %d entries", n, len(r.RunEvals), len(r.Iters), len(r.Converged), len(r.Stalled), len(r.States))
	}
	var ended Result
	if err := decodeState(r.Ended, &ended); err != nil {
		return fmt.Errorf("osgm: the snapshot's ended problems: %w", err)
	}
	if len(ended.X) != K || len(ended.F) != K || len(ended.GradNorm) != K || len(ended.Iters) != K || len(ended.Converged) != K || len(ended.Stop) != K {
		return fmt.Errorf("osgm: the snapshot's ended problems do not number %d", K)
	}
	run := 0
	for i, k := range r.Running {
		if k < 0 || k >= K || ended.Stop[k] != Running || slices.Contains(r.Running[:i], k) {
			return fmt.Errorf("osgm: the snapshot has problem %d under way twice, ended, or out of range", k)
		}
		if r.RunEvals[i] < 0 || r.Iters[i] < 0 {
			return errors.New("osgm: the snapshot counts negative passes or iterations")
		}
		run += r.RunEvals[i]
	}
	if sd.base = r.Evals - run; sd.base < 0 {
		return errors.New("osgm: the snapshot counts fewer passes than its problems under way made")
	}
	for k, st := range ended.Stop {
		if st == Running {
			continue
		}
		if len(ended.X[k]) != len(sd.x0[k]) {
			return fmt.Errorf("osgm: the snapshot's problem %d has %d coordinates, this run %d", k, len(ended.X[k]), len(sd.x0[k]))
		}
		sd.res.place1(k, &ended, k)
		if err := sd.res.shelve(sd.h.Shelf, k, k+1); err != nil {
			return err
		}
	}
	return nil
}
