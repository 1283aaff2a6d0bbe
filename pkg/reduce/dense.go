package reduce

import (
	"fmt"
	"math/bits"

	"github.com/osgm-svm/osgm/pkg/cols"
)

// DenseSum is a worker's other way of adding up the nodes of the tree it
// holds whole (see Combiner): in vectors over every column rather than
// over each group's and node's own columns. The sparse way keeps, for
// every group and node, its column list, where each child's columns sit in
// it, and a sum buffer; on wide data where a worker's shards touch most
// columns, those cost more than a few dense vectors. A node's sum here is
// its left child's plus its right child's, the same additions in the same
// order as Node.add (a column missing from one child adds a zero, which
// changes no value: sums started from +0 are never -0), so the bits sent
// are the Combiner's.
//
// Shards are added in increasing order (partials that arrive early wait),
// which bounds the vectors in use to one per level of the highest node.
type DenseSum struct {
	// Emit gets each whole node's sum, over the node's columns as the
	// Combiner lays it out. Its memory is not written again before the
	// next Reset, so a worker may keep it to send again.
	Emit func(NodeID, *Partial) error
	// Release gets every shard partial back once it is added.
	Release func(*Partial)

	n     int
	cols  map[int]cols.List // the summed shards' columns, global or ranked (see ranked)
	width int               // every column is below width
	tops  []denseTop        // the highest nodes held whole, in shard order
	buf   []uint32          // a shard's columns, decoded

	// One pass's state.
	K, hess int // problems and Hessian length, from the pass's first partial
	top     int // index into tops
	next    int // the shard to add next
	pending map[int]*Partial
	stack   []*Partial // sums in progress, Grad over width·K; ids in ids
	ids     []NodeID
	sent    []*Partial // emitted sums: their memory stays as it is until Reset
	free    []*Partial
}

type denseTop struct {
	id         NodeID
	first, end int      // its shards
	words      []uint64 // its columns, a bitmap below width
	held       int      // its shards' columns, counted with repeats
}

// NewDenseSum prepares the sums of the nodes whose shards are all in cols
// (shard id -> the shard's increasing global columns), for a tree over n
// shards. It returns nil when no group is held whole.
func NewDenseSum(n int, lists map[int]cols.List) *DenseSum {
	whole := map[int]bool{}
	for g := range NumGroups(n) {
		first, end := GroupShards(g, n)
		whole[g] = true
		for s := first; s < end; s++ {
			if _, ok := lists[s]; !ok {
				whole[g] = false
				break
			}
		}
	}
	d := &DenseSum{n: n, cols: lists}
	for s, c := range lists {
		if c.Len() > 0 && whole[GroupOf(s)] {
			d.width = max(d.width, int(c.Last())+1)
		}
	}
	d.ranked(whole)
	for _, id := range wholeNodes(n, whole) {
		t := denseTop{id: id, words: make([]uint64, (d.width+63)/64)}
		t.first, t.end = id.Shards(n)
		for s := t.first; s < t.end; s++ {
			d.buf = d.cols[s].Append(d.buf[:0])
			for _, j := range d.buf {
				t.words[j>>6] |= 1 << (j & 63)
			}
			t.held += d.cols[s].Len()
		}
		d.tops = append(d.tops, t)
	}
	if len(d.tops) == 0 {
		return nil
	}
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

// Pays reports whether the dense vectors take less memory than the
// Combiner's column maps and sums would: one vector per level of the
// highest node against at least one position and one value (8 bytes
// each, per problem) per column of every shard held.
func (d *DenseSum) Pays() bool {
	levels, held := 0, 0
	for _, t := range d.tops {
		levels = max(levels, t.id.Level+1)
		held += t.held
	}
	return levels*d.width <= held
}

// Holds reports whether shard s is under one of the nodes summed here.
func (d *DenseSum) Holds(s int) bool {
	for _, t := range d.tops {
		if s >= t.first && s < t.end {
			return true
		}
	}
	return false
}

// Reset starts a pass, forgetting any partials of the last one.
func (d *DenseSum) Reset() {
	d.K, d.hess, d.top, d.next = -1, 0, 0, d.tops[0].first
	clear(d.pending)
	for range d.stack {
		d.pop()
	}
	d.free, d.sent = append(d.free, d.sent...), d.sent[:0]
}

// Add takes shard partial p; it reports false for a shard not summed
// here or already added this pass.
func (d *DenseSum) Add(p *Partial) (bool, error) {
	if !d.Holds(p.Shard) || p.Shard < d.next || d.pending[p.Shard] != nil {
		return false, nil
	}
	if d.K < 0 {
		d.K, d.hess = len(p.Loss), len(p.Hess)
	}
	if len(p.Loss) != d.K || len(p.BiasGrad) != d.K || len(p.Grad) != d.cols[p.Shard].Len()*d.K || len(p.Hess) != d.hess {
		return false, fmt.Errorf("shard %d: partial has the wrong size", p.Shard)
	}
	if d.pending == nil {
		d.pending = map[int]*Partial{}
	}
	d.pending[p.Shard] = p
	for q := d.pending[d.next]; q != nil; q = d.pending[d.next] {
		delete(d.pending, d.next)
		if err := d.add(q); err != nil {
			return true, err
		}
		if d.Release != nil {
			d.Release(q)
		}
		if d.next++; d.next == d.tops[d.top].end && d.top+1 < len(d.tops) {
			d.top++
			d.next = d.tops[d.top].first
		}
	}
	return true, nil
}

// add sums shard p into its group's vector, and climbs the tree when the
// group is complete.
func (d *DenseSum) add(p *Partial) error {
	g := GroupOf(p.Shard)
	first, end := GroupShards(g, d.n)
	if p.Shard == first {
		d.push(NodeID{0, g})
	}
	sum, K := d.stack[len(d.stack)-1], d.K
	for k := range K {
		sum.Loss[k] += p.Loss[k]
		sum.BiasGrad[k] += p.BiasGrad[k]
	}
	grad := sum.Grad
	if K == 1 {
		d.cols[p.Shard].ScatterAdd(grad, p.Grad)
	} else {
		cols := d.cols[p.Shard].Append(d.buf[:0])
		d.buf = cols
		for l, j := range cols {
			dst, src := grad[int(j)*K:int(j)*K+K], p.Grad[l*K:l*K+K]
			for k := range dst {
				dst[k] += src[k]
			}
		}
	}
	sum.Hess = addHess(sum.Hess, p.Hess)
	if p.Shard+1 < end {
		return nil
	}
	return d.climb()
}

// climb adds the completed top of the stack into the nodes above it, as
// far as their right children are complete, and emits the highest node.
func (d *DenseSum) climb() error {
	G := NumGroups(d.n)
	for {
		id := d.ids[len(d.ids)-1]
		if t := d.tops[d.top]; id == t.id {
			return d.emit(t)
		}
		if id.Index&1 == 0 {
			if (id.Index+1)<<id.Level < G {
				return nil // the right sibling is still to come
			}
			d.ids[len(d.ids)-1] = id.Parent() // a single child: its parent's sum
			continue
		}
		left, right := d.stack[len(d.stack)-2], d.stack[len(d.stack)-1]
		for k := range d.K {
			left.Loss[k] += right.Loss[k]
			left.BiasGrad[k] += right.BiasGrad[k]
		}
		for j, v := range right.Grad {
			left.Grad[j] += v
		}
		left.Hess = addHess(left.Hess, right.Hess)
		d.pop()
		d.ids[len(d.ids)-1] = id.Parent()
	}
}

// emit packs the node's vector onto its columns, in place (a column's
// position in the node is never past the column itself), and sends it.
// Where the node holds every column so far nothing moves: on data whose
// shards touch most columns the packing is then a scan of the bitmap
// (BenchmarkNodeSums, K=1: a worker's reduction 15% faster than with a
// call to copy per column).
func (d *DenseSum) emit(t denseTop) error {
	sum, K := d.stack[len(d.stack)-1], d.K
	g := sum.Grad
	at := 0
	for i, w := range t.words {
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
	out.Shard, out.Group, out.Level, out.Grad = t.id.Index, true, t.id.Level, sum.Grad[:at*K]
	err := d.Emit(t.id, &out)
	d.sent = append(d.sent, sum)
	d.stack, d.ids = d.stack[:len(d.stack)-1], d.ids[:len(d.ids)-1]
	return err
}

func (d *DenseSum) push(id NodeID) {
	var p *Partial
	if n := len(d.free); n > 0 {
		p, d.free = d.free[n-1], d.free[:n-1]
	} else {
		p = new(Partial)
	}
	p.Zero(d.K, d.width)
	d.stack, d.ids = append(d.stack, p), append(d.ids, id)
}

func (d *DenseSum) pop() {
	n := len(d.stack) - 1
	d.free = append(d.free, d.stack[n])
	d.stack, d.ids = d.stack[:n], d.ids[:n]
}
