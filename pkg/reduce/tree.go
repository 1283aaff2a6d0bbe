package reduce

import (
	"fmt"
	"math/bits"

	"github.com/osgm-svm/osgm/pkg/cols"
)

// Above the groups the reduction tree is binary: node (l, i) covers
// groups [i·2^l, (i+1)·2^l), level 0 being the groups themselves, and its
// sum is its left child's plus its right child's, in that order (a node
// with one child is that child). The tree depends on the number of shards
// only, so a worker that holds every group under a node can send that
// node's sum, one message, and the coordinator gets the same bits as if
// it had added the groups itself.

// NodeID names a node of the tree.
type NodeID struct{ Level, Index int }

// Parent is the node above.
func (id NodeID) Parent() NodeID { return NodeID{id.Level + 1, id.Index >> 1} }

// Groups is the range [first, end) of groups under id, of g groups.
func (id NodeID) Groups(g int) (first, end int) {
	return id.Index << id.Level, min((id.Index+1)<<id.Level, g)
}

// Shards is the range [first, end) of shards under id, of n shards.
func (id NodeID) Shards(n int) (first, end int) {
	fg, eg := id.Groups(NumGroups(n))
	return fg * GroupSize, min(eg*GroupSize, n)
}

// Wire packs a node into the 32-bit shard field of a message.
func (id NodeID) Wire() uint32 { return uint32(id.Level)<<24 | uint32(id.Index) }

// in says whether id is a node of the tree over n shards.
func (id NodeID) in(n int) bool {
	return id.Level >= 0 && id.Level <= TreeHeight(n) && id.Index >= 0 && id.Index<<id.Level < NumGroups(n)
}

// NodeFromWire unpacks Wire's form, checking it names a node of a tree
// over n shards.
func NodeFromWire(v uint32, n int) (NodeID, error) {
	id := NodeID{int(v >> 24), int(v & (1<<24 - 1))}
	if !id.in(n) {
		return id, fmt.Errorf("node %d/%d is not in the tree of %d shards", id.Level, id.Index, n)
	}
	return id, nil
}

// TreeHeight is the root's level for n shards.
func TreeHeight(n int) int {
	g := NumGroups(n)
	if g <= 1 {
		return 0
	}
	return bits.Len(uint(g - 1))
}

// Root is the node above every group.
func Root(n int) NodeID { return NodeID{Level: TreeHeight(n)} }

// Node is one node's columns: the union of its children's, and where each
// child's columns sit in it.
type Node struct {
	ID   NodeID
	Cols []uint32
	Pos  [2][]uint32 // Pos[1] is nil when the node has one child
}

// Tree is where a Combiner finds a tree's nodes.
type Tree interface {
	// Cols is node id's columns; !ok when the tree does not have it.
	Cols(id NodeID) (cols []uint32, ok bool)
	// Node is node id with its children's positions, nil when the tree
	// does not have it.
	Node(id NodeID) *Node
}

// Nodes is a Tree of nodes built beforehand (BuildNodes).
type Nodes map[NodeID]*Node

func (m Nodes) Cols(id NodeID) ([]uint32, bool) {
	if nd := m[id]; nd != nil {
		return nd.Cols, true
	}
	return nil, false
}

func (m Nodes) Node(id NodeID) *Node { return m[id] }

// BuildNodes builds every node whose groups are all in groups (keyed by
// group id), for a tree over n shards.
func BuildNodes(n int, groups map[int]*Group) Nodes {
	G := NumGroups(n)
	out := Nodes{}
	for g, gr := range groups {
		out[NodeID{0, g}] = &Node{ID: NodeID{0, g}, Cols: gr.Cols}
	}
	for l := 1; l <= TreeHeight(n); l++ {
		for i := 0; i<<l < G; i++ {
			left, ok := out[NodeID{l - 1, 2 * i}]
			if !ok {
				continue
			}
			id := NodeID{l, i}
			if (2*i+1)<<(l-1) >= G { // no right child
				out[id] = &Node{ID: id, Cols: left.Cols}
				continue
			}
			right, ok := out[NodeID{l - 1, 2*i + 1}]
			if !ok {
				continue
			}
			out[id] = merge(id, union(left.Cols, right.Cols), left.Cols, right.Cols)
		}
	}
	return out
}

// merge is node id over cols, the union of its children's a and b.
func merge(id NodeID, cols, a, b []uint32) *Node {
	return &Node{ID: id, Cols: cols, Pos: [2][]uint32{positions(cols, a), positions(cols, b)}}
}

// positions is where each of sub's columns sits in all (sub a subset,
// both increasing: one merge pass).
func positions(all, sub []uint32) []uint32 {
	pos := make([]uint32, len(sub))
	i := 0
	for l, j := range sub {
		for all[i] != j {
			i++
		}
		pos[l] = uint32(i)
	}
	return pos
}

// lazyTree is the whole tree over shards' column maps, built as sums need
// it: a node's columns when its sum arrives, its children's positions when
// their sums meet in it, a group's when its shards' partials come. A
// coordinator whose workers send the sums of their highest nodes builds
// the root and its children's columns only, instead of every group's and
// node's maps (on the 1 GB generated set, 64 shards, those were about 170
// MB of its 260 MB heap).
type lazyTree struct {
	n int
	// Each shard's columns, kept in their compact form and decoded only
	// for the nodes built: on wide data they are a coordinator's largest
	// holding beside the optimiser's vectors.
	shards []cols.List
	cols   map[NodeID][]uint32
	nodes  map[NodeID]*Node
	groups map[int]*Group
}

func newLazyTree(shards []cols.List) *lazyTree {
	return &lazyTree{n: len(shards), shards: shards, cols: map[NodeID][]uint32{}, nodes: map[NodeID]*Node{}, groups: map[int]*Group{}}
}

// decoded is shards [first, end)'s columns as slices.
func (t *lazyTree) decoded(first, end int) [][]uint32 {
	out := make([][]uint32, 0, end-first)
	for _, c := range t.shards[first:end] {
		out = append(out, c.Slice())
	}
	return out
}

func (t *lazyTree) Cols(id NodeID) ([]uint32, bool) {
	if !id.in(t.n) {
		return nil, false
	}
	if nd := t.nodes[id]; nd != nil {
		return nd.Cols, true
	}
	if id.Level == 0 && t.groups[id.Index] != nil {
		return t.groups[id.Index].Cols, true
	}
	c, ok := t.cols[id]
	if !ok {
		c = unionOf(t.decoded(id.Shards(t.n)))
		t.cols[id] = c
	}
	return c, true
}

func (t *lazyTree) Node(id NodeID) *Node {
	if !id.in(t.n) {
		return nil
	}
	if nd := t.nodes[id]; nd != nil {
		return nd
	}
	var nd *Node
	switch right := (NodeID{id.Level - 1, 2*id.Index + 1}); {
	case id.Level == 0:
		gr := t.group(id.Index)
		nd = &Node{ID: id, Cols: gr.Cols}
	case !right.in(t.n): // one child: its columns are the node's
		cols, _ := t.Cols(id)
		nd = &Node{ID: id, Cols: cols}
	default:
		cols, _ := t.Cols(id)
		a, _ := t.Cols(NodeID{id.Level - 1, 2 * id.Index})
		b, _ := t.Cols(right)
		nd = merge(id, cols, a, b)
	}
	delete(t.cols, id)
	t.nodes[id] = nd
	return nd
}

// group is group g with its shards' positions.
func (t *lazyTree) group(g int) *Group {
	gr := t.groups[g]
	if gr == nil {
		first, end := GroupShards(g, t.n)
		gr = NewGroup(g, t.decoded(first, end))
		t.groups[g] = gr
		delete(t.cols, NodeID{0, g})
	}
	return gr
}

// Combiner adds node sums up the tree as they complete, over the nodes
// its Tree has. A node whose parent the tree does not have (the root, or
// on a worker the highest nodes it holds whole) goes to Emit.
//
// The sums it and its Adder make are in buffers of its own, which serve
// again as soon as their sum has been added into its parent's: a pass
// holds one per level in use and per group open, whatever the number of
// nodes (dense sums, every one as wide as the data, need that bound). An
// emitted sum's memory is not written again before the next Reset, so a
// worker may keep it to send again. Sums handed in by Add are the
// caller's, and only read.
type Combiner struct {
	N    int // shards
	Tree Tree
	Emit func(NodeID, *Partial) error
	// EmitChildren, when set, takes the root's two children in place of
	// the root's sum, for a reduction that adds them into vectors of its
	// own: (0 + left) + right there has the bits of 0 + (left + right),
	// as no sum is -0, and the root's vector and its column map (the
	// widest of the tree) are never made (BenchmarkRootSums).
	EmitChildren func(left, right NodeID, l, r *Partial) error

	sums map[NodeID]nodeSum
	free []*Partial
}

// nodeSum is a complete node's sum; own when its buffer is the combiner's.
type nodeSum struct {
	p   *Partial
	own bool
}

// NewCombiner combines the nodes of tree, a tree over n shards.
func NewCombiner(n int, tree Tree, emit func(NodeID, *Partial) error) *Combiner {
	return &Combiner{N: n, Tree: tree, Emit: emit, sums: map[NodeID]nodeSum{}}
}

// Reset forgets the sums of the last pass, and takes their buffers back.
func (c *Combiner) Reset() {
	for _, h := range c.sums {
		c.recycle(h)
	}
	clear(c.sums)
}

// take is a buffer for a sum, of the combiner's.
func (c *Combiner) take() *Partial {
	n := len(c.free)
	if n == 0 {
		return new(Partial)
	}
	p := c.free[n-1]
	c.free = c.free[:n-1]
	return p
}

// recycle takes h's buffer back when it is the combiner's.
func (c *Combiner) recycle(h nodeSum) {
	if h.own {
		c.free = append(c.free, h.p)
	}
}

// Covered reports whether id, or a node above it, is complete.
func (c *Combiner) Covered(id NodeID) bool {
	for l := id.Level; l <= TreeHeight(c.N); l++ {
		if c.sums[id].p != nil {
			return true
		}
		id = id.Parent()
	}
	return false
}

// Add takes the complete sum of node id; it reports false when the node
// is already covered. The sums below it are dropped.
func (c *Combiner) Add(id NodeID, p *Partial) (bool, error) { return c.add(id, nodeSum{p: p}) }

func (c *Combiner) add(id NodeID, h nodeSum) (bool, error) {
	cols, ok := c.Tree.Cols(id)
	if !ok {
		return false, fmt.Errorf("node %d/%d is not in this tree", id.Level, id.Index)
	}
	if c.Covered(id) {
		return false, nil
	}
	K := len(h.p.Loss)
	if len(h.p.BiasGrad) != K || len(h.p.Grad) != len(cols)*K {
		return false, fmt.Errorf("node %d/%d: sum has the wrong size", id.Level, id.Index)
	}
	for below, b := range c.sums {
		if below.Level < id.Level && below.Index>>(id.Level-below.Level) == id.Index {
			c.recycle(b)
			delete(c.sums, below)
		}
	}
	for {
		c.sums[id] = h
		if c.EmitChildren != nil && id.Parent() == Root(c.N) {
			if l, r := (NodeID{id.Level, 0}), (NodeID{id.Level, 1}); r.in(c.N) {
				return true, c.emitChildren(l, r)
			}
		}
		var parent *Node
		if id.Level < TreeHeight(c.N) {
			parent = c.Tree.Node(id.Parent())
		}
		if parent == nil {
			return true, c.Emit(id, h.p)
		}
		if parent.Pos[1] == nil { // a single child: the parent's sum is its own
			delete(c.sums, id)
			id = parent.ID
			continue
		}
		l, r := NodeID{id.Level, id.Index &^ 1}, NodeID{id.Level, id.Index | 1}
		left, right := c.sums[l], c.sums[r]
		if left.p == nil || right.p == nil {
			return true, nil
		}
		delete(c.sums, l)
		delete(c.sums, r)
		h, id = c.sum(parent, left, right), parent.ID
	}
}

// emitChildren hands the root's children l and r on once both are in.
func (c *Combiner) emitChildren(l, r NodeID) error {
	left, right := c.sums[l], c.sums[r]
	if left.p == nil || right.p == nil {
		return nil
	}
	delete(c.sums, l)
	delete(c.sums, r)
	c.sums[Root(c.N)] = left // covered: it went out as its children
	err := c.EmitChildren(l, r, left.p, right.p)
	c.recycle(right)
	return err
}

// sum is node nd's sum, left + right in that order, over its columns.
// Where the left child has every column (its positions are 0, 1, ...)
// and its buffer is the combiner's, the right child is added into it: no
// new buffer, no copy, and the bits of copying it first. Otherwise the
// left child is copied, or added to zeros (which differs at most in the
// sign of a zero), and the right one added.
func (c *Combiner) sum(nd *Node, left, right nodeSum) nodeSum {
	K, width := len(left.p.Loss), len(nd.Cols)
	out := left
	if !left.own || len(nd.Pos[0]) != width {
		out = nodeSum{c.take(), true}
		out.p.Resize(K, width)
		if len(nd.Pos[0]) == width {
			copy(out.p.Grad, left.p.Grad)
		} else {
			clear(out.p.Grad)
			addAt(out.p.Grad, left.p.Grad, nd.Pos[0], width, K)
		}
		copy(out.p.Loss, left.p.Loss)
		copy(out.p.BiasGrad, left.p.BiasGrad)
		out.p.Hess = append(out.p.Hess[:0], left.p.Hess...)
		c.recycle(left)
	}
	p, r := out.p, right.p
	p.Shard, p.Group = nd.ID.Index, true
	p.Seconds = max(left.p.Seconds, r.Seconds)
	for k := range K {
		p.Loss[k] += r.Loss[k]
		p.BiasGrad[k] += r.BiasGrad[k]
	}
	addAt(p.Grad, r.Grad, nd.Pos[1], width, K)
	p.Hess = addHess(p.Hess, r.Hess)
	c.recycle(right)
	return out
}

// addAt adds src, K problems interleaved over a child's columns, into
// dst over its parent's width columns: child column l sits at pos[l].
func addAt(dst, src []float64, pos []uint32, width, K int) {
	switch {
	case len(pos) == width: // every column: positions 0, 1, ...
		for i, v := range src {
			dst[i] += v
		}
	case K == 1:
		for l, i := range pos {
			dst[i] += src[l]
		}
	default:
		for l, i := range pos {
			d, s := dst[int(i)*K:int(i)*K+K], src[l*K:l*K+K]
			for k := range d {
				d[k] += s[k]
			}
		}
	}
}
