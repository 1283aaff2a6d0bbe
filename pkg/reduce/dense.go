package reduce

import (
	"math/bits"

	"github.com/osgm-svm/osgm/pkg/cols"
)

// denseTree is the column space of dense sums: every node of the tree is
// over the same columns, 0 to width-1, and a group's shards sit in them
// at their own columns. A column a child lacks then adds a +0, which
// changes no value (sums start from +0 and are never -0), so the sums
// have the bits of the sparse tree's.
type denseTree struct {
	n      int
	cols   []uint32              // 0, 1, ..., width-1
	has    func(NodeID) bool     // the nodes summed here
	shard  func(s int) cols.List // where shard s's partial sits
	nodes  map[NodeID]*Node
	groups map[int]*Group
}

func newDenseTree(n, width int, has func(NodeID) bool, shard func(int) cols.List) *denseTree {
	t := &denseTree{n: n, cols: make([]uint32, width), has: has, shard: shard, nodes: map[NodeID]*Node{}, groups: map[int]*Group{}}
	for j := range t.cols {
		t.cols[j] = uint32(j)
	}
	return t
}

// Cols is Tree's: every node of the tree holds every column.
func (t *denseTree) Cols(id NodeID) ([]uint32, bool) { return t.cols, id.in(t.n) }

// Node is Tree's: the nodes summed here, nil for the others (their
// children's sums are emitted).
func (t *denseTree) Node(id NodeID) *Node {
	if !id.in(t.n) || !t.has(id) {
		return nil
	}
	nd := t.nodes[id]
	if nd == nil {
		nd = &Node{ID: id, Cols: t.cols, Pos: [2][]uint32{t.cols, t.cols}}
		if right := (NodeID{id.Level - 1, 2*id.Index + 1}); id.Level > 0 && !right.in(t.n) {
			nd.Pos[1] = nil // one child
		}
		t.nodes[id] = nd
	}
	return nd
}

// group is group g, when it is summed here.
func (t *denseTree) group(g int) *Group {
	if !t.has(NodeID{0, g}) {
		return nil
	}
	gr := t.groups[g]
	if gr == nil {
		first, end := GroupShards(g, t.n)
		gr = &Group{ID: g, First: first, Cols: t.cols}
		for s := first; s < end; s++ {
			gr.Pos = append(gr.Pos, t.shard(s))
		}
		t.groups[g] = gr
	}
	return gr
}

// DenseSum is an Adder of the nodes of the tree a worker holds whole in
// the other column space: vectors over every column rather than each
// group's and node's own columns. The sparse way keeps, for every group
// and node, its column list and where each child's columns sit in it; on
// wide data where a worker's shards touch most columns, those cost more
// than a few dense vectors. It adds as every reduction does, so the bits
// sent are the sparse sums', and packs each highest node's sum onto that
// node's columns before it goes.
//
// The Combiner's buffers serve again as soon as a sum is added up: the
// vectors in use are one per level of the highest node and one per group
// open (partials arrive nearly in shard order, as the worker's goroutines
// take the shards in turn).
type DenseSum struct {
	*Adder // Add's held is false for a shard under no node held whole
	// Emit gets each whole node's sum, over the node's columns as the
	// Combiner lays it out. Its memory is not written again before the
	// next Reset, so a worker may keep it to send again.
	Emit func(NodeID, *Partial) error
	// Release gets every shard partial back once it is added.
	Release func(*Partial)

	n     int
	cols  map[int]cols.List // the summed shards' columns, global or ranked (see ranked)
	width int               // every column is below width
	whole map[int]bool      // the groups held whole
	tops  map[NodeID]denseTop
}

// denseTop is one of the highest nodes held whole.
type denseTop struct {
	words []uint64 // its columns, a bitmap below width
	held  int      // its shards' columns, counted with repeats
}

// NewDenseSum prepares the sums of the nodes whose shards are all in cols
// (shard id -> the shard's increasing global columns), for a tree over n
// shards. It returns nil when no group is held whole.
func NewDenseSum(n int, lists map[int]cols.List) *DenseSum {
	d := &DenseSum{n: n, cols: lists, whole: map[int]bool{}, tops: map[NodeID]denseTop{}}
	for g := range NumGroups(n) {
		first, end := GroupShards(g, n)
		d.whole[g] = true
		for s := first; s < end; s++ {
			if _, ok := lists[s]; !ok {
				d.whole[g] = false
				break
			}
		}
	}
	for s, c := range lists {
		if c.Len() > 0 && d.whole[GroupOf(s)] {
			d.width = max(d.width, int(c.Last())+1)
		}
	}
	d.ranked(d.whole)
	var ids []uint32
	for _, id := range wholeNodes(n, d.whole) {
		t := denseTop{words: make([]uint64, (d.width+63)/64)}
		first, end := id.Shards(n)
		for s := first; s < end; s++ {
			ids = d.cols[s].Append(ids[:0])
			for _, j := range ids {
				t.words[j>>6] |= 1 << (j & 63)
			}
			t.held += d.cols[s].Len()
		}
		d.tops[id] = t
	}
	if len(d.tops) == 0 {
		return nil
	}
	tree := newDenseTree(n, d.width, d.has, func(s int) cols.List { return d.cols[s] })
	d.Adder = NewAdder(n, tree.group, NewCombiner(n, tree, d.emit), d.release)
	return d
}

// ranked lays the vectors over the columns the summed shards hold,
// numbered in order, rather than over every column below the highest,
// when that leaves out a quarter or more: every pass clears and adds
// vectors of the width, and on text a worker's shards touch a part of
// the ids (on news20.t less than half of them). A column keeps its order, so the sums
// are packed onto the nodes' columns as before and carry the same bits.
func (d *DenseSum) ranked(whole map[int]bool) {
	words := make([]uint64, (d.width+63)/64)
	var ids []uint32
	for s, c := range d.cols {
		if !whole[GroupOf(s)] {
			continue
		}
		ids = c.Append(ids[:0])
		for _, j := range ids {
			words[j>>6] |= 1 << (j & 63)
		}
	}
	held, err := cols.NewLiveMap(words, d.width)
	if err != nil || 4*held.Len() > 3*d.width {
		return
	}
	ranked := make(map[int]cols.List, len(d.cols))
	for s, c := range d.cols {
		if !whole[GroupOf(s)] {
			continue
		}
		ids = c.Append(ids[:0])
		for l, j := range ids {
			ids[l], _ = held.Rank(j)
		}
		ranked[s] = cols.NewList(ids)
	}
	d.cols, d.width = ranked, held.Len()
}

// wholeNodes lists the highest nodes all of whose groups are whole, in
// group order.
func wholeNodes(n int, whole map[int]bool) []NodeID {
	G := NumGroups(n)
	var out []NodeID
	for g := 0; g < G; {
		if !whole[g] {
			g++
			continue
		}
		id := NodeID{0, g}
		for id.Level < TreeHeight(n) {
			up := id.Parent()
			first, end := up.Groups(G)
			all := true
			for h := first; h < end && all; h++ {
				all = whole[h]
			}
			if !all {
				break
			}
			id = up
		}
		out = append(out, id)
		_, g = id.Groups(G)
	}
	return out
}

// has reports whether every group under id is held whole.
func (d *DenseSum) has(id NodeID) bool {
	first, end := id.Groups(NumGroups(d.n))
	for g := first; g < end; g++ {
		if !d.whole[g] {
			return false
		}
	}
	return first < end
}

// Pays reports whether the dense vectors take less memory than the
// Combiner's column maps and sums would: one vector per level of the
// highest node against at least one position and one value (8 bytes
// each, per problem) per column of every shard held.
func (d *DenseSum) Pays() bool {
	levels, held := 0, 0
	for id, t := range d.tops {
		levels = max(levels, id.Level+1)
		held += t.held
	}
	return levels*d.width <= held
}

func (d *DenseSum) release(p *Partial) {
	if d.Release != nil {
		d.Release(p)
	}
}

// emit packs a highest node's sum onto its columns, in place (a column's
// position in the node is never past the column itself), and sends it.
// Where the node holds every column so far nothing moves: on data whose
// shards touch most columns the packing is then a scan of the bitmap
// (BenchmarkNodeSums, K=1: a worker's reduction 15% faster than with a
// call to copy per column).
func (d *DenseSum) emit(id NodeID, sum *Partial) error {
	K, g, at := len(sum.Loss), sum.Grad, 0
	for i, w := range d.tops[id].words {
		if w == ^uint64(0) && at == i<<6 {
			at += 64
			continue
		}
		for w != 0 {
			// A run of consecutive columns moves in one copy: on text,
			// low ids come in long runs, where a call per column
			// cost more than the additions.
			b := bits.TrailingZeros64(w)
			run := bits.TrailingZeros64(^(w >> b))
			w &^= (1<<run - 1) << b
			if j := i<<6 | b; j != at {
				copy(g[at*K:(at+run)*K], g[j*K:(j+run)*K])
			}
			at += run
		}
	}
	out := *sum
	out.Shard, out.Group, out.Level, out.Grad = id.Index, true, id.Level, sum.Grad[:at*K]
	return d.Emit(id, &out)
}
