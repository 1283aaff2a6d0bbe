package reduce

import (
	"fmt"
	"slices"

	"github.com/osgm-svm/osgm/pkg/cols"
)

// Relay adds, on one worker, the sums of the tree's nodes that worker is
// the adder of, when workers add the tree among themselves and the
// coordinator receives the root alone. A node's adder is the owner of its
// first shard, so it is also the adder of its left child, down to the
// group: each worker adds along the left edge of what it owns, waiting
// for right children from the others.
//
// Sums travel between workers dense, over every coordinate the round's
// point carries (Width), so that no worker needs another's column maps.
// That changes no bit: the tree's sums start from +0 and are never -0,
// so a column a child lacks adds a +0 that changes nothing, and the
// additions are the sparse tree's in the same order. The adding is the
// one every reduction runs (Adder), over a tree whose nodes all hold
// every coordinate.
type Relay struct {
	n    int
	tree *denseTree
	comb *Combiner
	sums *Adder
}

// NewRelay prepares a worker's part of the tree over n shards whose sums
// are width coordinates wide: mine says which nodes it adds (groups at
// level 0), and emit takes each complete sum whose parent it does not add,
// to send to that parent's adder, or, for the root, to the coordinator.
func NewRelay(n, width int, mine func(NodeID) bool, emit func(NodeID, *Partial) error) *Relay {
	r := &Relay{n: n}
	var all cols.List // a shard's dense partial holds every coordinate
	r.tree = newDenseTree(n, width, mine, func(int) cols.List { return all })
	all = cols.NewList(r.tree.cols)
	r.comb = NewCombiner(n, r.tree, emit)
	r.sums = NewAdder(n, r.tree.group, r.comb, nil)
	return r
}

// Width is the coordinates a dense sum covers.
func (r *Relay) Width() int { return len(r.tree.cols) }

// Reset starts a round.
func (r *Relay) Reset() { r.sums.Reset() }

// AddShard takes a shard's dense partial, for K problems with packed
// Hessians of hess entries; held is false when this worker does not add
// its group: the partial goes on to the group's adder.
func (r *Relay) AddShard(p *Partial, K, hess int) (held bool, err error) {
	if p.Shard < 0 || p.Shard >= r.n {
		return false, fmt.Errorf("shard %d out of range (%d shards)", p.Shard, r.n)
	}
	held, _, err = r.sums.Add(p, K, hess)
	return held, err
}

// AddNode takes a whole node's dense sum: it joins its sibling when this
// worker adds the parent, and goes to emit otherwise.
func (r *Relay) AddNode(id NodeID, p *Partial) error {
	_, err := r.comb.Add(id, p)
	return err
}

// Scatter lays a sum over cols (increasing coordinates below width, K
// problems interleaved) out dense, +0 elsewhere, its gradient in *grad's
// memory (grad nil: fresh; too small: *grad gets the new memory).
func Scatter(p *Partial, cols []uint32, width int, grad *[]float64) *Partial {
	K := len(p.Loss)
	out := &Partial{Shard: p.Shard, Group: p.Group, Level: p.Level, Seconds: p.Seconds,
		Loss: slices.Clone(p.Loss), BiasGrad: slices.Clone(p.BiasGrad), Hess: slices.Clone(p.Hess)}
	var g []float64
	if grad != nil {
		g = *grad
	}
	g = grow(g, width*K)
	clear(g)
	if grad != nil {
		*grad = g
	}
	out.Grad = g
	for l, j := range cols {
		copy(g[int(j)*K:int(j)*K+K], p.Grad[l*K:l*K+K])
	}
	return out
}
