package reduce

import "github.com/osgm-svm/osgm/pkg/cols"

// Adder is the one way partials are added up the tree: shard partials
// into their groups' sums, in shard order from zero (GroupSum), and every
// complete group's sum into the nodes above it (Combiner). The column
// space is its tree's: each group's and node's own columns (the
// coordinator's Reducer, a worker's sparse sums) or every column at once
// (DenseSum, Relay). Every reduction runs this one path, which is what
// keeps their bits equal.
type Adder struct {
	n       int
	group   func(g int) *Group // group g's columns; nil: not summed here
	comb    *Combiner
	release func(*Partial)
	open    map[int]*GroupSum
}

// NewAdder sums, of n shards, the groups that group gives columns for,
// into comb, whose buffers the group sums use. release, when set, gets
// each partial back once added.
func NewAdder(n int, group func(g int) *Group, comb *Combiner, release func(*Partial)) *Adder {
	return &Adder{n: n, group: group, comb: comb, release: release, open: map[int]*GroupSum{}}
}

// Reset starts a new pass: the sums under way and the combiner's are
// dropped, and their buffers serve again.
func (a *Adder) Reset() {
	a.Drop(0, NumGroups(a.n))
	a.comb.Reset()
}

// Add adds p, one of K problems with packed Hessians of hess entries (0:
// none), into its group's sum. held is false when p's group is not
// summed here: p is the caller's to pass on. took is false for a
// duplicate, or a shard whose group the combiner already has.
func (a *Adder) Add(p *Partial, K, hess int) (held, took bool, err error) {
	g := GroupOf(p.Shard)
	gr := a.group(g)
	if gr == nil {
		return false, false, nil
	}
	if a.comb.Covered(NodeID{0, g}) {
		return true, false, nil
	}
	gs := a.open[g]
	if gs == nil {
		gs = NewGroupSum(gr, a.n, K, hess, a.release, a.comb.take())
		a.open[g] = gs
	}
	if took, err = gs.Add(p); err != nil || !took {
		return true, took, err
	}
	if gs.Complete() {
		delete(a.open, g)
		sum := nodeSum{gs.Sum(), true}
		if took, err = a.comb.add(NodeID{0, g}, sum); !took {
			a.comb.recycle(sum)
		}
	}
	return true, took, err
}

// Drop forgets the open sums of groups first to end-1: a sum over them
// arrived whole.
func (a *Adder) Drop(first, end int) {
	for g, gs := range a.open {
		if g >= first && g < end {
			a.comb.recycle(nodeSum{gs.Sum(), true})
			delete(a.open, g)
		}
	}
}

// Missing lists group g's shards not yet added; open is false when the
// group has no sum under way.
func (a *Adder) Missing(g int) (shards []int, open bool) {
	gs := a.open[g]
	if gs == nil {
		return nil, false
	}
	return gs.Missing(), true
}

// HeldGroups builds, of n shards, the groups all of whose shards' column
// lists are in held: those a worker sums whole.
func HeldGroups(n int, held map[int]cols.List) map[int]*Group {
	out := map[int]*Group{}
	for g := range NumGroups(n) {
		first, end := GroupShards(g, n)
		lists := make([][]uint32, 0, end-first)
		for s := first; s < end; s++ {
			c, ok := held[s]
			if !ok {
				break
			}
			lists = append(lists, c.Slice())
		}
		if len(lists) == end-first {
			out[g] = NewGroup(g, lists)
		}
	}
	return out
}
