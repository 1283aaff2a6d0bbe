package reduce

import "github.com/osgm-svm/osgm/pkg/cols"

// SparseSum adds shard partials into the sums of the groups summed here,
// each over its group's own columns (DenseSum is the dense way), in
// shard order from zero, and hands every complete group's sum to a
// Combiner. The coordinator's Reducer and each worker run this one
// path, which is what keeps their bits equal.
type SparseSum struct {
	n       int
	group   func(g int) *Group // group g's columns; nil: not summed here
	comb    *Combiner
	release func(*Partial)
	open    map[int]*GroupSum
	// spare is each group's sum buffer, reused pass after pass; nil when
	// the sums must outlive the pass (a worker keeps what it sent for
	// resends until the next round).
	spare map[int]*Partial
}

// NewSparseSum sums, of n shards, the groups that group gives columns
// for, into comb. release, when set, gets each partial back once added;
// reuse keeps the groups' sum buffers from one pass to the next.
func NewSparseSum(n int, group func(g int) *Group, comb *Combiner, release func(*Partial), reuse bool) *SparseSum {
	s := &SparseSum{n: n, group: group, comb: comb, release: release, open: map[int]*GroupSum{}}
	if reuse {
		s.spare = map[int]*Partial{}
	}
	return s
}

// Reset starts a new pass; the combiner is its owner's to reset.
func (s *SparseSum) Reset() { clear(s.open) }

// Add adds p, one of K problems with packed Hessians of hess entries (0:
// none), into its group's sum. held is false when p's group is not
// summed here: p is the caller's to pass on. took is false for a
// duplicate, or a shard whose group the combiner already has.
func (s *SparseSum) Add(p *Partial, K, hess int) (held, took bool, err error) {
	g := GroupOf(p.Shard)
	gr := s.group(g)
	if gr == nil {
		return false, false, nil
	}
	if s.comb.Covered(NodeID{0, g}) {
		return true, false, nil
	}
	gs := s.open[g]
	if gs == nil {
		gs = NewGroupSum(gr, s.n, K, hess, s.release, s.spare[g])
		if s.spare != nil {
			s.spare[g] = gs.Sum()
		}
		s.open[g] = gs
	}
	if took, err = gs.Add(p); err != nil || !took {
		return true, took, err
	}
	if gs.Complete() {
		delete(s.open, g)
		took, err = s.comb.Add(NodeID{0, g}, gs.Sum())
	}
	return true, took, err
}

// Drop forgets the open sums of groups first to end-1: a sum over them
// arrived whole.
func (s *SparseSum) Drop(first, end int) {
	for g := first; g < end; g++ {
		delete(s.open, g)
	}
}

// Missing lists group g's shards not yet added; open is false when the
// group has no sum under way.
func (s *SparseSum) Missing(g int) (shards []int, open bool) {
	gs := s.open[g]
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
