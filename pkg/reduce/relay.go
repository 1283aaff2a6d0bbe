package reduce

import (
	"fmt"
	"slices"
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
// one every reduction runs (SparseSum into a Combiner), over a tree whose
// nodes all hold every coordinate.
type Relay struct {
	n     int
	width int
	cols  []uint32 // 0, 1, ..., width-1
	mine  func(NodeID) bool
	nodes map[NodeID]*Node
	group map[int]*Group
	comb  *Combiner
	sums  *SparseSum
}

// NewRelay prepares a worker's part of the tree over n shards whose sums
// are width coordinates wide: mine says which nodes it adds (groups at
// level 0), and emit takes each complete sum whose parent it does not add,
// to send to that parent's adder, or, for the root, to the coordinator.
func NewRelay(n, width int, mine func(NodeID) bool, emit func(NodeID, *Partial) error) *Relay {
	r := &Relay{n: n, width: width, mine: mine, nodes: map[NodeID]*Node{}, group: map[int]*Group{}}
	r.cols = make([]uint32, width)
	for j := range r.cols {
		r.cols[j] = uint32(j)
	}
	r.comb = NewCombiner(n, r, emit)
	// A relay's sums go on as soon as they are complete, and are not
	// kept for resends: their buffers serve again the next round.
	r.sums = NewSparseSum(n, r.groupOf, r.comb, nil, true)
	return r
}

// Width is the coordinates a dense sum covers.
func (r *Relay) Width() int { return r.width }

// Cols is Tree's: every node of the tree holds every coordinate.
func (r *Relay) Cols(id NodeID) ([]uint32, bool) { return r.cols, id.in(r.n) }

// Node is Tree's: the nodes this worker adds, nil for the others (their
// children's sums go on to their adder).
func (r *Relay) Node(id NodeID) *Node {
	if !id.in(r.n) || !r.mine(id) {
		return nil
	}
	nd := r.nodes[id]
	if nd == nil {
		nd = &Node{ID: id, Cols: r.cols, Pos: [2][]uint32{r.cols, r.cols}}
		if right := (NodeID{id.Level - 1, 2*id.Index + 1}); id.Level > 0 && !right.in(r.n) {
			nd.Pos[1] = nil // one child
		}
		if id.Level == 0 {
			nd.Group = r.groupOf(id.Index)
		}
		r.nodes[id] = nd
	}
	return nd
}

// groupOf is group g as a dense sum takes its shards, when this worker
// adds it.
func (r *Relay) groupOf(g int) *Group {
	if !r.mine(NodeID{0, g}) {
		return nil
	}
	gr := r.group[g]
	if gr == nil {
		first, end := GroupShards(g, r.n)
		gr = &Group{ID: g, First: first, Cols: r.cols, Pos: slices.Repeat([][]uint32{r.cols}, end-first)}
		r.group[g] = gr
	}
	return gr
}

// Reset starts a round.
func (r *Relay) Reset() {
	r.comb.Reset()
	r.sums.Reset()
}

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
