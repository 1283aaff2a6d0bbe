package reduce

import (
	"fmt"

	"github.com/osgm-svm/osgm/pkg/cols"
)

// Total is the data term of all shards: loss and gradient sums per problem
// over the global features, before the 1/m scaling and the regulariser.
type Total struct {
	Loss     []float64
	Grad     [][]float64 // Grad[k][j]
	BiasGrad []float64
	Hess     []float64 // osgm.OpEvalHess: the packed Hessian's data part (see shard.HessLen)
}

// GroupSize is how many consecutive shards are summed together before
// their sum joins the total. The reduction tree is fixed by the shard
// layout: a group's sum is its shards' partials added in order from zero,
// and the total is the group sums added in order. So a worker that holds
// a whole group can send one sum instead of GroupSize partials, and the
// bits are the same whoever adds what.
const GroupSize = 8

// NumGroups is the number of groups of n shards.
func NumGroups(n int) int { return (n + GroupSize - 1) / GroupSize }

// GroupOf is the group of a shard.
func GroupOf(shard int) int { return shard / GroupSize }

// GroupShards is the range [first, end) of the shards of group g.
func GroupShards(g, n int) (first, end int) { return g * GroupSize, min((g+1)*GroupSize, n) }

// Group is one group's columns: the union of its shards' columns, and
// where each shard's local columns sit in it.
type Group struct {
	ID    int
	First int         // its first shard
	Cols  []uint32    // union of the shards' global columns, increasing
	Pos   []cols.List // Pos[s-First]: where shard s's columns sit in Cols
}

// NewGroup builds group g from its shards' column maps, in shard order.
func NewGroup(g int, shardCols [][]uint32) *Group {
	gr := &Group{ID: g, First: g * GroupSize}
	var pos [][]uint32
	if width := colWidth(shardCols); width > cols.MaxSet {
		gr.Cols, pos = mergeColumns(shardCols)
	} else {
		gr.Cols, pos = setColumns(shardCols, width)
	}
	// Positions increase as the columns do, so they keep in the shards'
	// compact form: there is one for every column every shard holds,
	// millions on a worker with wide data.
	for _, p := range pos {
		gr.Pos = append(gr.Pos, cols.NewList(p))
	}
	return gr
}

// Groups builds the reduction tree of shards with the given column maps.
func Groups(cols [][]uint32) []*Group {
	out := make([]*Group, NumGroups(len(cols)))
	for g := range out {
		first, end := GroupShards(g, len(cols))
		out[g] = NewGroup(g, cols[first:end])
	}
	return out
}

// unionOf is the union of increasing column lists, increasing, as
// NewGroup finds it, without the positions.
func unionOf(lists [][]uint32) []uint32 {
	width := colWidth(lists)
	if width > cols.MaxSet {
		return unionAll(lists)
	}
	var set cols.Set
	return fill(&set, lists, width)
}

// colWidth is one more than the largest column of increasing lists.
func colWidth(lists [][]uint32) uint32 {
	width := uint32(0)
	for _, c := range lists {
		if len(c) > 0 {
			width = max(width, c[len(c)-1]+1)
		}
	}
	return width
}

// setColumns finds the union of increasing column lists below width, and
// each list's positions in it, through a cols.Set.
func setColumns(lists [][]uint32, width uint32) (all []uint32, pos [][]uint32) {
	var set cols.Set
	all = fill(&set, lists, width)
	for _, c := range lists {
		p := make([]uint32, len(c))
		for l, j := range c {
			p[l] = set.Pos(j)
		}
		pos = append(pos, p)
	}
	return all, pos
}

// fill puts every column of lists, all below width, in set, and returns
// its members.
func fill(set *cols.Set, lists [][]uint32, width uint32) []uint32 {
	set.Reset(width)
	for _, c := range lists {
		for _, j := range c {
			set.Add(j)
		}
	}
	return set.Members(nil)
}

// mergeColumns is setColumns by merging, for any width.
func mergeColumns(lists [][]uint32) (all []uint32, pos [][]uint32) {
	all = unionAll(lists)
	for _, c := range lists {
		pos = append(pos, positions(all, c))
	}
	return all, pos
}

// unionAll merges increasing lists, for any width.
func unionAll(lists [][]uint32) (all []uint32) {
	for _, c := range lists {
		all = union(all, c)
	}
	return all
}

// union merges two increasing lists into one without repeats, in linear
// time (column maps run to millions of entries).
func union(a, b []uint32) []uint32 {
	out := make([]uint32, 0, max(len(a), len(b)))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] < b[j]:
			out = append(out, a[i])
			i++
		case a[i] > b[j]:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i++
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// GroupSum adds a group's shard partials in shard order. Workers and the
// coordinator use it alike, which is what keeps their bits equal.
type GroupSum struct {
	group   *Group
	hess    int // each partial's Hessian length (0: none)
	end     int
	next    int
	pending map[int]*Partial
	sum     *Partial // Shard is the group id; Grad over group.Cols
	release func(*Partial)
}

// NewGroupSum starts the sum of group gr of n shards for K problems, and
// packed Hessians of length hess (0: none), reusing buf's memory when it
// is not nil.
func NewGroupSum(gr *Group, n, K, hess int, release func(*Partial), buf *Partial) *GroupSum {
	_, end := GroupShards(gr.ID, n)
	if buf == nil {
		buf = new(Partial)
	}
	buf.Shard, buf.Group = gr.ID, true
	buf.Zero(K, len(gr.Cols))
	return &GroupSum{group: gr, hess: hess, end: end, next: gr.First, pending: map[int]*Partial{}, release: release, sum: buf}
}

// Add takes a shard partial; it reports false for a duplicate.
func (gs *GroupSum) Add(p *Partial) (bool, error) {
	if p.Shard < gs.next || p.Shard >= gs.end || gs.pending[p.Shard] != nil {
		return false, nil
	}
	K := len(gs.sum.Loss)
	if len(p.Loss) != K || len(p.BiasGrad) != K || len(p.Grad) != gs.group.Pos[p.Shard-gs.group.First].Len()*K || len(p.Hess) != gs.hess {
		return false, fmt.Errorf("shard %d: partial has the wrong size", p.Shard)
	}
	gs.pending[p.Shard] = p
	for q := gs.pending[gs.next]; q != nil; q = gs.pending[gs.next] {
		delete(gs.pending, gs.next)
		gs.accumulate(q)
		gs.next++
		if gs.release != nil {
			gs.release(q)
		}
	}
	return true, nil
}

func (gs *GroupSum) accumulate(p *Partial) {
	K := len(gs.sum.Loss)
	for k := range K {
		gs.sum.Loss[k] += p.Loss[k]
		gs.sum.BiasGrad[k] += p.BiasGrad[k]
	}
	switch pos := gs.group.Pos[p.Shard-gs.group.First]; {
	case pos.Len() == len(gs.group.Cols): // every column: positions 0, 1, ...
		for i, v := range p.Grad {
			gs.sum.Grad[i] += v
		}
	case K == 1:
		pos.ScatterAdd(gs.sum.Grad, p.Grad)
	default:
		pos.ScatterAddK(gs.sum.Grad, p.Grad, K)
	}
	gs.sum.Hess = addHess(gs.sum.Hess, p.Hess)
}

// Complete reports whether every shard of the group has been added.
func (gs *GroupSum) Complete() bool { return gs.next == gs.end }

// Sum is the group's sum, valid once Complete.
func (gs *GroupSum) Sum() *Partial { return gs.sum }

// Missing lists the shards not yet added.
func (gs *GroupSum) Missing() []int {
	var out []int
	for s := gs.next; s < gs.end; s++ {
		if gs.pending[s] == nil {
			out = append(out, s)
		}
	}
	return out
}

// Reducer adds partials into a Sum along the fixed tree, whatever order
// they arrive in: shard partials go into their group's sum in shard order,
// complete groups and nodes go up the tree (see Combiner). Sums of whole
// nodes (from workers that hold every shard under one) are taken as they
// are.
type Reducer struct {
	// Release, when set, gets every shard partial back once it is added.
	Release func(*Partial)

	tree   *lazyTree
	n      int
	cols   []uint32 // 0, 1, ...: a dense sum's columns, made when one comes
	sum    *Total
	comb   *Combiner
	groups *Adder
	done   bool
}

// NewReducer prepares reductions of shards with the given column maps;
// the tree's maps are built as sums need them (see lazyTree).
func NewReducer(lists []cols.List) *Reducer {
	n := len(lists)
	r := &Reducer{tree: newLazyTree(lists), n: n}
	r.comb = NewCombiner(n, r.tree, func(id NodeID, p *Partial) error {
		root, _ := r.tree.Cols(id)
		r.apply(root, p)
		r.done = true
		return nil
	})
	r.comb.EmitChildren = func(left, right NodeID, lp, rp *Partial) error {
		lc, _ := r.tree.Cols(left)
		rc, _ := r.tree.Cols(right)
		r.apply(lc, lp)
		r.apply(rc, rp)
		r.done = true
		return nil
	}
	release := func(p *Partial) {
		if r.Release != nil {
			r.Release(p)
		}
	}
	r.groups = NewAdder(n, r.tree.group, r.comb, release)
	return r
}

// Reset starts a new reduction into sum, which it zeroes.
func (r *Reducer) Reset(sum *Total) {
	clear(sum.Loss)
	clear(sum.BiasGrad)
	for _, g := range sum.Grad {
		clear(g)
	}
	clear(sum.Hess)
	r.sum, r.done = sum, false
	r.groups.Reset()
}

// Add hands over a shard's partial; it reports false for a duplicate.
func (r *Reducer) Add(p *Partial) (bool, error) {
	if p.Shard < 0 || p.Shard >= r.n {
		return false, fmt.Errorf("shard %d out of range (%d shards)", p.Shard, r.n)
	}
	_, took, err := r.groups.Add(p, len(r.sum.Loss), len(r.sum.Hess))
	return took, err
}

// AddNode hands over a whole node's sum (a group's at level 0); it reports
// false for a duplicate.
func (r *Reducer) AddNode(id NodeID, p *Partial) (bool, error) {
	if !id.in(r.n) {
		return false, fmt.Errorf("node %d/%d out of range (%d groups)", id.Level, id.Index, NumGroups(r.n))
	}
	if len(p.Loss) != len(r.sum.Loss) {
		return false, fmt.Errorf("node %d/%d: sum of %d problems, want %d", id.Level, id.Index, len(p.Loss), len(r.sum.Loss))
	}
	if len(p.Hess) != len(r.sum.Hess) {
		return false, fmt.Errorf("node %d/%d: Hessian of %d entries, want %d", id.Level, id.Index, len(p.Hess), len(r.sum.Hess))
	}
	if p.Dense {
		return r.addRoot(id, p)
	}
	took, err := r.comb.Add(id, p)
	if took {
		r.groups.Drop(id.Groups(NumGroups(r.n))) // shard partials under it are no longer needed
	}
	return took, err
}

// addRoot takes the root's dense sum, which covers every shard: whatever
// came before it is not yet in the sum (the tree adds into it at the
// root only), and 0 + root has the bits of the root's children added in
// (see Combiner.EmitChildren).
func (r *Reducer) addRoot(id NodeID, p *Partial) (bool, error) {
	K, width := len(r.sum.Loss), 0
	if K > 0 {
		width = len(r.sum.Grad[0])
	}
	if id != Root(r.n) || len(p.Grad) != width*K || len(p.BiasGrad) != K {
		return false, fmt.Errorf("node %d/%d: a dense sum of %d values is not the root's over %d coordinates", id.Level, id.Index, len(p.Grad), width)
	}
	if r.done {
		return false, nil
	}
	for j := len(r.cols); j < width; j++ {
		r.cols = append(r.cols, uint32(j))
	}
	r.apply(r.cols[:width], p)
	r.done = true
	return true, nil
}

// Done reports whether every shard has been added.
func (r *Reducer) Done() bool { return r.done }

// Missing lists the shards not yet added.
func (r *Reducer) Missing() []int {
	var out []int
	for g := range NumGroups(r.n) {
		if r.comb.Covered(NodeID{0, g}) {
			continue
		}
		if missing, open := r.groups.Missing(g); open {
			out = append(out, missing...)
			continue
		}
		first, end := GroupShards(g, r.n)
		for s := first; s < end; s++ {
			out = append(out, s)
		}
	}
	return out
}

func (r *Reducer) apply(cols []uint32, p *Partial) {
	for i, v := range p.Hess {
		r.sum.Hess[i] += v
	}
	K := len(r.sum.Loss)
	for k := range K {
		r.sum.Loss[k] += p.Loss[k]
		r.sum.BiasGrad[k] += p.BiasGrad[k]
	}
	if K == 1 {
		g := r.sum.Grad[0]
		for l, j := range cols {
			g[j] += p.Grad[l]
		}
		return
	}
	if len(cols) == 0 {
		return // no feature columns (data with the bias alone)
	}
	// Problem by problem over blocks of columns: the block of the
	// interleaved sum stays in cache while each problem's vector takes
	// its part, where whole-length strided passes read every cache line
	// K times from memory (BenchmarkRootSums). Each entry is added once, so the order changes
	// no bit.
	const block = 256
	for lo := 0; lo < len(cols); lo += block {
		cs := cols[lo:min(lo+block, len(cols))]
		src := p.Grad[lo*K : (lo+len(cs))*K]
		for k := range K {
			g := r.sum.Grad[k]
			for l, j := range cs {
				g[j] += src[l*K+k]
			}
		}
	}
}
