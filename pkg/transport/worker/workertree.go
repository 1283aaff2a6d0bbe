package worker

import (
	"fmt"

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
	n      int      // shards in the job
	owners []string // each shard's owner
	relay  *reduce.Relay
	// pass sends a sum on to worker to, or with to "" to the coordinator,
	// as this round's.
	pass func(to string, kind wire.Kind, id uint32, pieces ...[]byte)
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

// newTreeRound is the tree of a job of n shards with the given owners,
// over points of width coordinates, for worker self.
func newTreeRound(n int, owners []string, width int, self string) *treeRound {
	t := &treeRound{n: n, owners: owners}
	t.relay = reduce.NewRelay(n, width, func(id reduce.NodeID) bool { return t.adder(id) == self }, t.up)
	return t
}

// begin starts a round, whose sums go out through pass.
func (t *treeRound) begin(pass func(to string, kind wire.Kind, id uint32, pieces ...[]byte)) {
	t.relay.Reset()
	t.pass, t.K, t.hess, t.hops = pass, -1, -1, map[reduce.NodeID]int{}
	t.free, t.used = append(t.free, t.used...), t.used[:0]
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

// adder is the worker that adds node id: its first shard's owner.
func (t *treeRound) adder(id reduce.NodeID) string {
	first, _ := id.Shards(t.n)
	return t.owners[first]
}

// hopsUnder is the longest chain of messages behind the sums under id.
func (t *treeRound) hopsUnder(id reduce.NodeID) int {
	first, end := id.Shards(t.n)
	h := 0
	for below, hb := range t.hops {
		var f, e int
		if below.Level < 0 {
			f, e = below.Index, below.Index+1
		} else {
			f, e = below.Shards(t.n)
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

// addNode passes the sum of a node this worker holds whole, over cols
// (the point's coordinates of its columns), laid out dense, to the tree.
func (t *treeRound) addNode(id reduce.NodeID, sum *reduce.Partial, cols []uint32) error {
	d := reduce.Scatter(sum, cols, t.relay.Width(), t.vec())
	if err := t.fits(d); err != nil {
		return err
	}
	return t.relay.AddNode(id, d)
}

// addShard passes a shard's partial over cols, laid out dense, to the
// tree: into its group's sum here, or on to the group's adder.
func (t *treeRound) addShard(part *reduce.Partial, cols []uint32) error {
	d := reduce.Scatter(part, cols, t.relay.Width(), t.vec())
	if err := t.fits(d); err != nil {
		return err
	}
	held, err := t.relay.AddShard(d, t.K, t.hess)
	if err != nil || held {
		return err
	}
	to := t.adder(reduce.NodeID{Index: reduce.GroupOf(part.Shard)})
	t.pass(to, wire.KindRelayShard, uint32(part.Shard), wire.RelayPieces(1, d, nil, false)...)
	return nil
}

// up sends on a complete sum whose parent another worker adds, or the
// root to the coordinator.
func (t *treeRound) up(id reduce.NodeID, sum *reduce.Partial) error {
	pieces := wire.RelayPieces(t.hopsUnder(id)+1, sum, nil, false)
	if id == reduce.Root(t.n) {
		t.pass("", wire.KindRelayNode, id.Wire(), pieces...)
		return nil
	}
	t.pass(t.adder(id.Parent()), wire.KindRelayNode, id.Wire(), pieces...)
	return nil
}

// add takes a sum another worker relayed, of this round.
func (t *treeRound) add(m relayMsg) error {
	node, index := reduce.NodeID{Level: -1, Index: int(m.id)}, int(m.id)
	if m.kind == wire.KindRelayNode {
		var err error
		if node, err = reduce.NodeFromWire(m.id, t.n); err != nil {
			return err
		}
		index = node.Index
	} else if index >= t.n {
		return fmt.Errorf("relayed shard %d of %d", index, t.n)
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
