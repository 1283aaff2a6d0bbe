package cluster

import (
	"slices"
	"strings"
)

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
		if !inSorted(p.held, s) {
			return "loading"
		}
	}
	return "ready"
}
