package status

import (
	"slices"
	"time"
)

// Status is the board at one moment, as /api/status serves it
// (docs/PROTOCOL.md describes it for scripts).
type Status struct {
	Version uint64  `json:"version"` // grows with every change
	Phase   string  `json:"phase"`
	Started string  `json:"started"` // RFC 3339
	Elapsed float64 `json:"elapsed"` // seconds
	Passes  int     `json:"passes"`
	Job     Job     `json:"job"`
	// Curve is one problem's convergence (Problem; the one recorded
	// last unless asked), at most maxPoints points, with its stopping
	// threshold on the gradient norm.
	Problem   int     `json:"problem"`
	Tolerance float64 `json:"tolerance"`
	Curve     []Point `json:"curve"`
	// Classes lists every problem: one-vs-rest's classes, or the one.
	Classes []Class  `json:"classes"`
	Done    int      `json:"done"` // problems done
	Workers []Worker `json:"workers"`
	// Stores are the object store buckets the run keeps its shards and
	// checkpoints in, with their copies.
	Stores []Store `json:"stores"`
	// Events are the last ones, oldest first; EventsDropped counts the
	// older ones no longer kept.
	Events        []Event `json:"events"`
	EventsDropped int     `json:"events_dropped"`
	End           *End    `json:"end,omitempty"`
}

// Snapshot is the board now, with problem's curve (< 0: the problem
// recorded last).
func (b *Board) Snapshot(problem int) Status {
	var workers func() []Worker
	b.mu.Lock()
	now := b.now()
	if !b.ended.IsZero() {
		now = b.ended
	}
	s := Status{Version: b.version, Phase: b.phase, Started: b.start.Format(time.RFC3339),
		Elapsed: now.Sub(b.start).Seconds(), Passes: b.passes, Job: b.job, Problem: b.latest,
		Events: slices.Clone(b.events[max(len(b.events)-eventsShown, 0):]), EventsDropped: b.dropped + max(len(b.events)-eventsShown, 0)}
	if problem >= 0 && problem < len(b.classes) {
		s.Problem = problem
	}
	s.Classes = make([]Class, len(b.classes))
	for i, c := range b.classes {
		s.Classes[i] = *c
		s.Classes[i].curve = nil
		if c.State == "done" {
			s.Done++
		}
	}
	if s.Problem < len(b.classes) {
		c := b.classes[s.Problem]
		s.Curve, s.Tolerance = slices.Clone(c.curve), c.gradTol
	}
	if b.end != nil {
		e := *b.end
		s.End = &e
	}
	workers = b.workers
	s.Stores = append([]Store{}, b.stores...)
	b.mu.Unlock()
	// Outside the lock: the source has a lock of its own.
	if workers != nil {
		s.Workers = workers()
	}
	if s.Workers == nil {
		s.Workers = []Worker{}
	}
	if s.Curve == nil {
		s.Curve = []Point{}
	}
	if s.Events == nil {
		s.Events = []Event{}
	}
	return s
}
