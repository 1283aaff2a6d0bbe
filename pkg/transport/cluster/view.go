package cluster

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// WorkerView is what the coordinator knows of one worker, for a status
// page: the heartbeat's counters as the worker last sent them, and the
// shards as the coordinator gave them out.
type WorkerView struct {
	ID, Host string
	// State is "loading" (it has shards assigned that it does not hold
	// yet), "ready", "lost" (silent, gone from NATS, or stuck) or "left"
	// (it said goodbye).
	State    string
	Shards   []int // the shards it answers for
	Incoming []int // shards moving to it, which it is loading
	Rows     int   // rows of the shards it answers for, as described
	Rounds   uint64
	BytesIn  int64
	BytesOut int64
	RSS      int64 // its process's resident memory (0: not said)
	LastSeen time.Time
}

// viewBox holds the workers' views as the core last published them: the
// core steps on the loop's goroutine, and a status page reads from its
// own.
type viewBox struct {
	mu sync.Mutex
	v  []WorkerView
}

// get is every worker the job has heard from, by ID, as last published.
func (b *viewBox) get() []WorkerView {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.v)
}

// publishView brings Workers up to date with the core's state.
func (c *clusterCore) publishView() {
	v := make([]WorkerView, 0, len(c.workers))
	for id, p := range c.workers {
		w := WorkerView{ID: id, Host: p.host, Rounds: p.rounds, BytesIn: p.bytesIn,
			BytesOut: p.bytesOut, RSS: p.rss, LastSeen: p.lastSeen, State: p.state(c.assigned(id))}
		for s, owner := range c.owner {
			if owner == id {
				w.Shards = append(w.Shards, s)
				if c.haveMet[s] {
					w.Rows += c.metas[s].Rows
				}
			}
			if c.incoming[s] == id {
				w.Incoming = append(w.Incoming, s)
			}
		}
		v = append(v, w)
	}
	slices.SortFunc(v, func(a, b WorkerView) int { return strings.Compare(a.ID, b.ID) })
	c.view.mu.Lock()
	c.view.v = v
	c.view.mu.Unlock()
}

// state is a worker's state for its view, given the shards assigned to it.
func (p *peer) state(assigned []int) string {
	switch {
	case p.left:
		return "left"
	case p.dead:
		return "lost"
	case len(p.loading) > 0:
		return "loading"
	}
	for _, s := range assigned {
		if !has(p.held, s) {
			return "loading"
		}
	}
	return "ready"
}
