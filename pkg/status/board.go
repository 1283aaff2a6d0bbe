// Package status keeps what a run's status page shows (the job, the
// convergence of each problem, the workers, the events, the end) and
// serves it: one embedded page and its state as JSON at /api/status. The
// run writes to a Board as it goes; the page reads a Snapshot.
package status

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Phases of a run, in order; a run that fails ends in PhaseFailed.
const (
	PhaseLoading  = "loading"
	PhaseTraining = "training"
	PhaseWriting  = "writing"
	PhaseDone     = "done"
	PhaseFailed   = "failed"
)

// Limits that keep a snapshot small whatever the run's length: a curve
// keeps at most maxPoints points (halved by dropping every other one when
// full, so early and late passes stay), and the events the last
// maxEvents.
const (
	maxPoints = 512
	maxEvents = 500
	// eventsShown is how many of the last events a snapshot carries.
	eventsShown = 200
)

// Job is what the run trains.
type Job struct {
	File     string  `json:"file"`
	Rows     int     `json:"rows"`
	NNZ      int     `json:"nnz"`
	Features int     `json:"features"`
	Classes  int     `json:"classes"` // 0: regression
	Problems int     `json:"problems"`
	Method   string  `json:"method"`
	C        float64 `json:"c"`
	Eps      float64 `json:"e"`
}

// Record is one iteration of one problem, as the method reports it.
type Record struct {
	Problem   int
	Passes    int // data passes so far, shared by all problems
	F         float64
	GradNorm  float64
	GradTol   float64 // LIBLINEAR's stopping threshold on GradNorm
	Converged bool
}

// Point is a curve's point: [passes, seconds since the run began,
// objective, gradient norm], an array to keep the JSON small.
type Point [4]float64

// Class is one problem of a one-vs-rest run (or the only one).
type Class struct {
	Label   string  `json:"label"`
	State   string  `json:"state"` // waiting, training, done
	Iters   int     `json:"iters"`
	Passes  int     `json:"passes"` // passes while it trained
	F       float64 `json:"f"`
	Ratio   float64 `json:"ratio"` // gradient norm over its threshold: done at <= 1 (0: not yet)
	first   int     // passes at its first record
	curve   []Point
	gradTol float64
}

// Worker is one worker as the page lists it.
type Worker struct {
	Name     string    `json:"name"`
	Host     string    `json:"host"`
	State    string    `json:"state"` // loading, ready, lost, left
	Shards   []int     `json:"shards"`
	Incoming []int     `json:"incoming,omitempty"`
	Rows     int       `json:"rows"`
	Passes   uint64    `json:"passes"`
	BytesIn  int64     `json:"bytes_in"`
	BytesOut int64     `json:"bytes_out"`
	Memory   int64     `json:"memory"`
	LastSeen time.Time `json:"last_heartbeat"`
}

// Store is an object store bucket the run keeps shards or checkpoints
// in, and the copies it keeps of each: how many servers the run's data
// outlives, less one.
type Store struct {
	Bucket   string `json:"bucket"`
	Replicas int    `json:"replicas"`
}

// Event is a change in the run: a worker joined or lost, shards moved, a
// round sent again, a reconnection, a checkpoint written.
type Event struct {
	Time    time.Time `json:"time"`
	Seconds float64   `json:"seconds"` // since the run began
	Kind    string    `json:"kind"`
	Text    string    `json:"text"`
}

// End is how the run ended: where the model went, its accuracy on the -t
// file, and where the time went, in seconds.
type End struct {
	Model         string  `json:"model,omitempty"`
	Accuracy      string  `json:"accuracy,omitempty"`
	Error         string  `json:"error,omitempty"`
	Load          float64 `json:"load"`
	Compute       float64 `json:"compute"`
	Communication float64 `json:"communication"`
	Method        float64 `json:"method"`
}

// Board is the run's state as the page shows it. Its methods are safe
// for concurrent use: the run writes, the page's requests read.
type Board struct {
	mu      sync.Mutex
	now     func() time.Time
	start   time.Time
	phase   string
	job     Job
	passes  int
	classes []*Class
	latest  int // the problem recorded last: the page's default curve
	events  []Event
	dropped int // events older than the last maxEvents
	end     *End
	ended   time.Time // when Finish came: the elapsed time stops there
	workers func() []Worker
	stores  []Store
	version uint64
}

// NewBoard starts a board at the run's beginning, in PhaseLoading; now
// reads the clock (time.Now outside tests).
func NewBoard(now func() time.Time) *Board {
	return &Board{now: now, start: now(), phase: PhaseLoading}
}

// SetStore says bucket keeps replicas copies.
func (b *Board) SetStore(bucket string, replicas int) {
	b.update(func() {
		i := slices.IndexFunc(b.stores, func(s Store) bool { return s.Bucket == bucket })
		if i < 0 {
			b.stores = append(b.stores, Store{Bucket: bucket})
			i = len(b.stores) - 1
		}
		b.stores[i].Replicas = replicas
	})
}

// update runs f under the lock and counts the change.
func (b *Board) update(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f()
	b.version++
}

// SetPhase moves the run to phase.
func (b *Board) SetPhase(phase string) { b.update(func() { b.phase = phase }) }

// SetJob says what the run trains, and labels its problems (one-vs-rest:
// a label per class; otherwise one).
func (b *Board) SetJob(j Job, labels []string) {
	b.update(func() {
		b.job = j
		b.classes = b.classes[:0]
		for _, l := range labels {
			b.classes = append(b.classes, &Class{Label: l, State: "waiting"})
		}
	})
}

// SetMethod says which method trains (auto resolved) and how many
// problems there are, once training knows.
func (b *Board) SetMethod(method string, problems int) {
	b.update(func() { b.job.Method, b.job.Problems = method, problems })
}

// SetWorkers gives the source of the workers' list, read at each
// snapshot (nil: no workers, the shards are in this process).
func (b *Board) SetWorkers(f func() []Worker) { b.update(func() { b.workers = f }) }

// Record adds one iteration of one problem.
func (b *Board) Record(r Record) {
	b.update(func() {
		for len(b.classes) <= r.Problem {
			b.classes = append(b.classes, &Class{State: "waiting"})
		}
		c := b.classes[r.Problem]
		if c.State == "waiting" {
			c.first = r.Passes
		}
		c.State, c.Iters, c.F, c.gradTol = "training", c.Iters+1, finite(r.F), finite(r.GradTol)
		c.Passes, c.Ratio = r.Passes-c.first, finite(r.GradNorm/r.GradTol)
		if r.Converged {
			c.State = "done"
		}
		b.passes, b.latest = max(b.passes, r.Passes), r.Problem
		c.curve = appendThinned(c.curve, Point{float64(r.Passes), b.now().Sub(b.start).Seconds(), c.F, finite(r.GradNorm)})
	})
}

// finite is x, or 0 where x is not finite (a diverging method's
// objective): JSON has no NaN or infinity.
func finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}

// appendThinned appends p to a curve of at most maxPoints points, first
// dropping every other point (the first kept) when it is full.
func appendThinned(curve []Point, p Point) []Point {
	if len(curve) == maxPoints {
		n := 0
		for i := 0; i < len(curve); i += 2 {
			curve[n] = curve[i]
			n++
		}
		curve = curve[:n]
	}
	return append(curve, p)
}

// Event adds an event that happened at at.
func (b *Board) Event(kind string, at time.Time, text string) {
	b.update(func() {
		if len(b.events) == maxEvents {
			b.events = slices.Delete(b.events, 0, maxEvents/2)
			b.dropped += maxEvents / 2
		}
		b.events = append(b.events, Event{Time: at, Seconds: at.Sub(b.start).Seconds(), Kind: kind, Text: text})
	})
}

// Finish records the run's end; the phase becomes PhaseDone, or
// PhaseFailed when e.Error is set. Problems still training stopped
// where the method's limits stopped them.
func (b *Board) Finish(e End) {
	b.update(func() {
		b.end, b.phase, b.ended = &e, PhaseDone, b.now()
		if e.Error != "" {
			b.phase = PhaseFailed
		}
		for _, c := range b.classes {
			if c.State == "training" {
				c.State = "stopped"
			}
		}
	})
}
