package reduce

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/osgm-svm/osgm/pkg/cols"
)

// TestReducerBuildsWhatSumsNeed: sums from the root's children, as two
// workers holding half the groups each send them, build their own columns
// only (the root's sum goes out as its children, Combiner.EmitChildren),
// and give the bits that shard partials give (which build every group).
func TestReducerBuildsWhatSumsNeed(t *testing.T) {
	const n, width = 32, 40 // 4 groups, height 2
	cols, parts := randomPartials(rand.New(rand.NewPCG(13, 14)), n, width, 1)
	newSum := func() *Total {
		return &Total{Loss: make([]float64, 1), BiasGrad: make([]float64, 1), Grad: [][]float64{make([]float64, width)}}
	}
	want := newSum()
	r := NewReducer(listsOf(cols))
	r.Reset(want)
	for _, q := range parts {
		r.Add(q)
	}
	if !r.Done() || len(r.tree.groups) != NumGroups(n) {
		t.Fatalf("shard partials: done %v, %d groups built", r.Done(), len(r.tree.groups))
	}

	got := newSum()
	r = NewReducer(listsOf(cols))
	r.Reset(got)
	groups := Groups(cols)
	for _, half := range [][]int{{0, 1}, {2, 3}} {
		held := map[int]*Group{}
		for _, g := range half {
			held[g] = groups[g]
		}
		comb := NewCombiner(n, BuildNodes(n, held), func(id NodeID, q *Partial) error {
			_, err := r.AddNode(id, q)
			return err
		})
		for _, g := range half {
			gs := NewGroupSum(groups[g], n, 1, 0, nil, nil)
			first, end := GroupShards(g, n)
			for s := first; s < end; s++ {
				gs.Add(parts[s])
			}
			if _, err := comb.Add(NodeID{0, g}, gs.Sum()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !r.Done() || len(r.tree.groups) != 0 || len(r.tree.nodes) != 0 || len(r.tree.cols) != 2 {
		t.Fatalf("node sums: done %v; built %d groups, nodes %v, columns of %d nodes", r.Done(), len(r.tree.groups), r.tree.nodes, len(r.tree.cols))
	}
	for j := range want.Grad[0] {
		if math.Float64bits(got.Grad[0][j]) != math.Float64bits(want.Grad[0][j]) {
			t.Fatalf("grad[%d] is %v from node sums, %v from shard partials", j, got.Grad[0][j], want.Grad[0][j])
		}
	}
	if math.Float64bits(got.Loss[0]) != math.Float64bits(want.Loss[0]) {
		t.Fatalf("loss %v from node sums, %v from shard partials", got.Loss[0], want.Loss[0])
	}
}

// randomPartials gives n shards random increasing column lists below
// width, and each a partial of K problems' random sums over its columns.
func randomPartials(rng *rand.Rand, n, width, K int) (cols [][]uint32, parts []*Partial) {
	cols, parts = make([][]uint32, n), make([]*Partial, n)
	for s := range n {
		density := rng.Float64()
		for j := range uint32(width) {
			if rng.Float64() < density {
				cols[s] = append(cols[s], j)
			}
		}
		p := &Partial{Shard: s, Loss: make([]float64, K), BiasGrad: make([]float64, K), Grad: make([]float64, len(cols[s])*K)}
		for _, v := range [][]float64{p.Loss, p.BiasGrad, p.Grad} {
			for i := range v {
				v[i] = rng.NormFloat64()
			}
		}
		parts[s] = p
	}
	return cols, parts
}

// TestHeldGroups: a worker sums the groups whose every shard it holds,
// the last, short group included, and no other.
func TestHeldGroups(t *testing.T) {
	const n = 2*GroupSize + 3 // two full groups and one of 3 shards
	for _, c := range []struct {
		name string
		held []int
		want []int
	}{
		{"none", nil, nil},
		{"all", rangeOf(0, n), []int{0, 1, 2}},
		{"a group but one shard", rangeOf(1, GroupSize), nil},
		{"the second and the short last", rangeOf(GroupSize, n), []int{1, 2}},
		{"straddling", rangeOf(GroupSize/2, GroupSize+GroupSize/2), nil},
	} {
		held := map[int]cols.List{}
		for _, s := range c.held {
			held[s] = cols.NewList([]uint32{uint32(s), uint32(s + 40)})
		}
		got := HeldGroups(n, held)
		if len(got) != len(c.want) {
			t.Fatalf("%s: groups %v, want %v", c.name, slices.Sorted(maps.Keys(got)), c.want)
		}
		for _, g := range c.want {
			first, end := GroupShards(g, n)
			if gr := got[g]; gr == nil || gr.ID != g || len(gr.Pos) != end-first {
				t.Fatalf("%s: group %d is %+v", c.name, g, gr)
			}
		}
	}
}

func rangeOf(first, end int) []int {
	var out []int
	for s := first; s < end; s++ {
		out = append(out, s)
	}
	return out
}

// listsOf is the column maps of increasing lists.
func listsOf(ids [][]uint32) []cols.List {
	out := make([]cols.List, len(ids))
	for i, c := range ids {
		out[i] = cols.NewList(c)
	}
	return out
}
