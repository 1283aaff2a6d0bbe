package worker

import (
	"fmt"
	"slices"

	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// treeRound is a round whose reduction tree the workers add among
// themselves (wire.Point.Owners): who adds each node, and this worker's
// part, a reduce.Relay. Sums between workers are dense over the point's
// coordinates; the sums this worker would have sent the coordinator are
// still kept as they were, for a resend, which has every worker send its
// own (see roundState.again).
type treeRound struct {
	owners []string // each shard's owner
	relay  *reduce.Relay
	// The round's sums' problems and packed Hessian entries, set by the
	// first (an evaluation with the diagonal has twice the point's
	// problems): every sum must have them.
	K, hess int
	// hops is, for each sum taken from another worker, the longest chain
	// of messages behind it (shards at level -1): a sum sent on is one
	// hop more than the longest under it.
	hops map[reduce.NodeID]int
	// Dense vectors are a point's size (8 MB a problem at a million
	// features): those of a round serve again the next (sent sums went
	// out whole before it began).
	used, free [][]float64
}

// vec is a dense vector's memory for this round, of any length.
func (t *treeRound) vec() *[]float64 {
	var v []float64
	if n := len(t.free); n > 0 {
		v, t.free = t.free[n-1], t.free[:n-1]
	}
	t.used = append(t.used, v)
	return &t.used[len(t.used)-1]
}

// relayMsg is a sum another worker relayed to this one.
type relayMsg struct {
	kind    wire.Kind
	job     uint64
	round   uint64
	id      uint32 // a node (KindRelayNode) or a shard
	payload []byte
}

// maxEarly bounds the relayed sums kept for a round whose point has not
// come yet.
const maxEarly = 1024

// startTree sets the round's tree from point p: nil when p has each
// worker send its sums to the coordinator.
func (w *workerCore) startTree(p *wire.Point) {
	w.tree = nil
	if len(p.Owners) == 0 || len(p.Owners) != w.total {
		return
	}
	owners := make([]string, len(p.Owners))
	for s, o := range p.Owners {
		owners[s] = p.Relays[o]
	}
	width := len(p.X[0])
	if p.Bias >= 0 {
		width--
	}
	t := w.lastTree
	if t == nil || t.relay.Width() != width || !slices.Equal(t.owners, owners) {
		t = &treeRound{owners: owners}
		t.relay = reduce.NewRelay(w.total, width, func(id reduce.NodeID) bool { return t.adder(id, w.total) == w.id }, w.relayUp)
		w.lastTree = t
	}
	t.relay.Reset()
	t.K, t.hess, t.hops = -1, -1, map[reduce.NodeID]int{}
	t.free, t.used = append(t.free, t.used...), t.used[:0]
	w.tree = t
	early := w.early
	w.early = nil
	for _, m := range early {
		w.onRelay(m)
	}
}

// adder is the worker that adds node id of a tree over n shards: its
// first shard's owner.
func (t *treeRound) adder(id reduce.NodeID, n int) string {
	first, _ := id.Shards(n)
	return t.owners[first]
}

// hopsUnder is the longest chain of messages behind the sums under id.
func (t *treeRound) hopsUnder(id reduce.NodeID, n int) int {
	first, end := id.Shards(n)
	h := 0
	for below, hb := range t.hops {
		var f, e int
		if below.Level < 0 {
			f, e = below.Index, below.Index+1
		} else {
			f, e = below.Shards(n)
		}
		if f >= first && e <= end {
			h = max(h, hb)
		}
	}
	return h
}

// fits checks a sum against the round's first.
func (t *treeRound) fits(p *reduce.Partial) error {
	if t.K < 0 {
		t.K, t.hess = len(p.Loss), len(p.Hess)
	}
	if len(p.Loss) != t.K || len(p.BiasGrad) != t.K || len(p.Grad) != t.K*t.relay.Width() || len(p.Hess) != t.hess {
		return fmt.Errorf("a sum of %d problems over %d values and %d Hessian entries, want %d over %d and %d",
			len(p.Loss), len(p.Grad), len(p.Hess), t.K, t.K*t.relay.Width(), t.hess)
	}
	return nil
}

// relayNode passes a sum of a node this worker holds whole, laid out
// dense, to the tree.
func (w *workerCore) relayNode(id reduce.NodeID, sum *reduce.Partial) error {
	d := reduce.Scatter(sum, w.pointCols(id), w.tree.relay.Width(), w.tree.vec())
	if err := w.tree.fits(d); err != nil {
		return err
	}
	return w.tree.relay.AddNode(id, d)
}

// relayShard passes a shard's partial, laid out dense, to the tree: into
// its group's sum here, or on to the group's adder.
func (w *workerCore) relayShard(part *reduce.Partial) error {
	t := w.tree
	d := reduce.Scatter(part, w.pointCols(reduce.NodeID{Level: -1, Index: part.Shard}), t.relay.Width(), t.vec())
	if err := t.fits(d); err != nil {
		return err
	}
	held, err := t.relay.AddShard(d, t.K, t.hess)
	if err != nil || held {
		return err
	}
	to := t.adder(reduce.NodeID{Index: reduce.GroupOf(part.Shard)}, w.total)
	w.io.relay(to, wire.KindRelayShard, w.job, w.round, uint32(part.Shard), wire.RelayPieces(1, d, nil, false)...)
	return nil
}

// relayUp sends on a complete sum whose parent another worker adds, or
// the root to the coordinator.
func (w *workerCore) relayUp(id reduce.NodeID, sum *reduce.Partial) error {
	t := w.tree
	pieces := wire.RelayPieces(t.hopsUnder(id, w.total)+1, sum, nil, false)
	if id == reduce.Root(w.total) {
		w.publishUp(wire.KindRelayNode, w.round, id.Wire(), pieces...)
		return nil
	}
	w.io.relay(t.adder(id.Parent(), w.total), wire.KindRelayNode, w.job, w.round, id.Wire(), pieces...)
	return nil
}

// onRelay takes a sum another worker relayed here: kept when its round's
// point has not come yet, added when it is this round's.
func (w *workerCore) onRelay(m relayMsg) {
	switch {
	case m.job != w.job || m.round < w.round:
		return
	case m.round > w.round || w.point == nil:
		if len(w.early) < maxEarly {
			w.early = append(w.early, m)
		}
		return
	case w.tree == nil:
		return // the round went out again, sums to the coordinator
	}
	if err := w.addRelayed(m); err != nil {
		w.bad.Add(err, m.kind)
	}
}

func (w *workerCore) addRelayed(m relayMsg) error {
	t := w.tree
	node, index := reduce.NodeID{Level: -1, Index: int(m.id)}, int(m.id)
	if m.kind == wire.KindRelayNode {
		var err error
		if node, err = reduce.NodeFromWire(m.id, w.total); err != nil {
			return err
		}
		index = node.Index
	} else if index >= w.total {
		return fmt.Errorf("relayed shard %d of %d", index, w.total)
	}
	hops, p, err := wire.DecodeRelay(index, m.payload, nil, t.vec())
	if err != nil {
		return err
	}
	if err := t.fits(p); err != nil {
		return fmt.Errorf("relayed: %w", err)
	}
	t.hops[node] = max(t.hops[node], hops)
	if node.Level < 0 {
		held, err := t.relay.AddShard(p, t.K, t.hess)
		if err == nil && !held {
			err = fmt.Errorf("relayed shard %d, whose group this worker does not add", index)
		}
		return err
	}
	p.Group, p.Level = true, node.Level
	return t.relay.AddNode(node, p)
}

// pointCols are the point's coordinates of a node's (or, at level -1, a
// shard's) columns: its shards' columns, numbered as the point numbers
// them. They stay while the shards held and the point's layout do.
func (w *workerCore) pointCols(id reduce.NodeID) []uint32 {
	if c, ok := w.colsAt[id]; ok {
		return c
	}
	first, end := id.Index, id.Index+1
	if id.Level >= 0 {
		first, end = id.Shards(w.total)
	}
	var c []uint32
	for s := first; s < end; s++ {
		if sh := w.shards[s]; sh != nil {
			c = sh.Cols.Append(c)
		}
	}
	slices.Sort(c)
	c = slices.Compact(c)
	if w.live != nil {
		for l, j := range c {
			c[l], _ = w.live.Rank(j)
		}
	}
	if w.colsAt == nil {
		w.colsAt = map[reduce.NodeID][]uint32{}
	}
	w.colsAt[id] = c
	return c
}
