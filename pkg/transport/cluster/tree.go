package cluster

import (
	"math/bits"
	"slices"
)

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
