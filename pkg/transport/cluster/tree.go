package cluster

import (
	"math/bits"
	"slices"
	"time"

	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// plan has the workers add this round's tree among themselves when they
// can: the point is a broadcast of an evaluation (a tally's counts are
// added here, in any order) and every shard has an owner. The point names
// each shard's owner; a node's adder is its first shard's. The bits are
// the same either way (reduce.Relay).
func (r *roundState) plan(pt *wire.Point) {
	c := r.c
	pt.Relays, pt.Owners = nil, nil
	if r.layout != nil || pt.Op == wire.OpCorrect || len(c.owner) == 0 || !c.treePays(pt.Dim()) {
		return
	}
	index := map[string]uint32{}
	owners := make([]uint32, len(c.owner))
	for s, id := range c.owner {
		if p := c.workers[id]; p == nil || p.dead {
			return
		}
		i, ok := index[id]
		if !ok {
			i = uint32(len(pt.Relays))
			index[id] = i
			pt.Relays = append(pt.Relays, id)
		}
		owners[s] = i
	}
	pt.Owners = owners
	r.tree = slices.Clone(c.owner)
}

// resendAfter is how long the round may bring nothing back before it
// goes out again. Along the workers' tree nothing comes before the root
// does, so such a round waits ResendAfter beyond twice the longest recent
// round (at most ten ResendAfters), and the job's first, with no history
// and workers warming up, three ResendAfters.
func (r *roundState) resendAfter() time.Duration {
	wait := r.c.cfg.ResendAfter
	if r.tree == nil {
		return wait
	}
	longest := slices.Max(r.c.took[:])
	if longest == 0 {
		return 3 * wait
	}
	return min(wait+2*longest, 10*wait)
}

// treePays reports whether rounds of dim coordinates go along the
// workers' tree for the current owners. With ReduceAuto it compares the
// coordinator's intake both ways: every worker's sums, over the columns
// its shards touch (text spread over many workers touches a part each),
// against the tree's longest chain of near-dense sums, counted twice for
// the adding each hop waits on. On the generated million-feature text
// set, 32 workers on one machine send 23.6 MB a round, 5 hops of 5.8 MB
// each, and a round took 204 ms without the tree, 510 ms along it
// (BENCHMARKS.md); data whose shards each touch most columns sends W
// near-dense sums, and the tree pays from a few workers on.
func (c *clusterCore) treePays(dim int) bool {
	if c.cfg.Reduce != ReduceAuto {
		return c.cfg.Reduce == ReduceTree
	}
	if !slices.Equal(c.treeOf, c.owner) || c.treeDim != dim {
		c.treeOf, c.treeDim = slices.Clone(c.owner), dim
		star, workers := c.starColumns()
		hops := bits.Len(uint(workers-1)) + 1
		c.treeWins = star > 2*hops*dim
	}
	return c.treeWins
}

// starColumns is the columns all workers' sums cover, each worker's
// counted once however many of its shards touch them, and the workers.
func (c *clusterCore) starColumns() (total, workers int) {
	width := 0
	for _, m := range c.metas {
		if m.Cols.Len() > 0 {
			width = max(width, int(m.Cols.Last())+1)
		}
	}
	seen := make([]int32, width) // the last worker counted at each column, +1
	byWorker := map[string][]int{}
	for s, id := range c.owner {
		byWorker[id] = append(byWorker[id], s)
	}
	w := int32(0)
	for _, shards := range byWorker {
		w++
		for _, s := range shards {
			for j := range c.metas[s].Cols.All() {
				if seen[j] != w {
					seen[j] = w
					total++
				}
			}
		}
	}
	return total, len(byWorker)
}
