package reduce

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/osgm-svm/osgm/pkg/cols"
)

func TestDenseSumRefusesAWrongSize(t *testing.T) {
	cols := map[int][]uint32{0: {1, 4}, 1: {0, 4, 7}}
	ds := NewDenseSum(2, columnsOf(cols))
	ds.Emit = func(NodeID, *Partial) error { return nil }
	ds.Reset()
	bad := &Partial{Shard: 0, Loss: []float64{1}, BiasGrad: []float64{0}, Grad: []float64{1, 2, 3}}
	if _, _, err := ds.Add(bad, 1, 0); err == nil {
		t.Fatal("a partial longer than its shard's columns was taken")
	}
	// Of 10 shards, group 0 (0-7) is held whole, group 1 (8, 9) in part.
	part := map[int][]uint32{8: {2}}
	for s := range 8 {
		part[s] = []uint32{uint32(s)}
	}
	ds = NewDenseSum(10, columnsOf(part))
	ds.Reset()
	p8 := &Partial{Shard: 8, Loss: []float64{1}, BiasGrad: []float64{0}, Grad: []float64{1}}
	if held, _, _ := ds.Add(p8, 1, 0); held || NewDenseSum(3, columnsOf(map[int][]uint32{0: {1}})) != nil {
		t.Fatal("a shard of no whole group is held")
	}
}

// TestDenseSumPacksWideNodes: a node over more than 64 columns, with whole
// 64-column words in place, a gap, and whole words after the gap (which
// move), sends each column's sum at its position, for one problem and
// two.
func TestDenseSumPacksWideNodes(t *testing.T) {
	span := func(a, b uint32) []uint32 {
		var out []uint32
		for j := a; j < b; j++ {
			out = append(out, j)
		}
		return out
	}
	cols := map[int][]uint32{
		0: append(span(0, 64), 70, 100),
		1: append(append(span(50, 64), span(128, 256)...), 300),
	}
	for _, K := range []int{1, 2} {
		want := map[uint32][]float64{} // column -> sum, shard 0 then shard 1
		parts := make([]*Partial, 2)
		for s := range 2 {
			parts[s] = &Partial{Shard: s, Loss: make([]float64, K), BiasGrad: make([]float64, K), Grad: make([]float64, len(cols[s])*K)}
			for l, j := range cols[s] {
				if want[j] == nil {
					want[j] = make([]float64, K)
				}
				for k := range K {
					v := float64(s+1) + float64(j)/7 + float64(k)/3
					parts[s].Grad[l*K+k] = v
					want[j][k] += v
				}
			}
		}
		ds := NewDenseSum(2, columnsOf(cols))
		var got *Partial
		ds.Emit = func(_ NodeID, p *Partial) error { got = p; return nil }
		ds.Reset()
		for _, p := range parts {
			if _, _, err := ds.Add(p, K, 0); err != nil {
				t.Fatal(err)
			}
		}
		node := slices.Sorted(maps.Keys(want))
		if got == nil || len(got.Grad) != len(node)*K {
			t.Fatalf("K=%d: sent %v, want %d columns", K, got, len(node))
		}
		for at, j := range node {
			for k := range K {
				if g := got.Grad[at*K+k]; math.Float64bits(g) != math.Float64bits(want[j][k]) {
					t.Fatalf("K=%d: column %d (position %d), problem %d: %v, want %v", K, j, at, k, g, want[j][k])
				}
			}
		}
	}
}

// TestSumsHoldAVectorPerLevel: the buffers of a pass's sums serve again
// as soon as a sum is added up, so dense sums over 64 shards in order (8
// groups, a tree of height 3) hold one vector per level and the group
// open, not one per group or node, and a second pass makes none.
func TestSumsHoldAVectorPerLevel(t *testing.T) {
	const n, width = 64, 40
	rng := rand.New(rand.NewPCG(5, 6))
	ids, parts := randomPartials(rng, n, width, 1)
	lists := map[int]cols.List{}
	for s, c := range listsOf(ids) {
		lists[s] = c
	}
	d := NewDenseSum(n, lists)
	emitted := 0
	d.Emit = func(NodeID, *Partial) error { emitted++; return nil }
	made := 0
	for pass := range 2 {
		d.Reset()
		for _, p := range parts {
			if _, _, err := d.Add(p, 1, 0); err != nil {
				t.Fatal(err)
			}
		}
		d.Reset()
		if pass == 0 {
			made = len(d.comb.free)
		}
		if len(d.comb.free) != made {
			t.Fatalf("pass %d: %d buffers, the first pass made %d", pass, len(d.comb.free), made)
		}
	}
	if emitted != 2 || made > TreeHeight(n)+1 {
		t.Fatalf("%d sums sent in 2 passes, with %d buffers (want 2, at most %d)", emitted, made, TreeHeight(n)+1)
	}
}

// BenchmarkNodeSums is one round of a worker's reduction on gen1g's
// shape: 32 shards of 173,000 columns each out of 1 M, for K problems,
// summed in dense vectors or along the groups' and nodes' own columns.
func BenchmarkNodeSums(b *testing.B) {
	const n, width, per = 32, 1 << 20, 173_000
	rng := rand.New(rand.NewPCG(1, 2))
	cols := map[int][]uint32{}
	all := make([][]uint32, n)
	for s := range n {
		set := map[uint32]bool{}
		for len(set) < per {
			set[uint32(float64(width)*rng.Float64()*rng.Float64())] = true // text-like: low ids are frequent
		}
		c := make([]uint32, 0, per)
		for j := range set {
			c = append(c, j)
		}
		slices.Sort(c)
		cols[s], all[s] = c, c
	}
	for _, K := range []int{1, 2} {
		parts := make([]*Partial, n)
		for s := range parts {
			parts[s] = &Partial{Shard: s, Loss: make([]float64, K), BiasGrad: make([]float64, K), Grad: make([]float64, per*K)}
			for j := range parts[s].Grad {
				parts[s].Grad[j] = rng.NormFloat64()
			}
		}
		b.Run(fmt.Sprintf("dense/K=%d", K), func(b *testing.B) {
			d := NewDenseSum(n, columnsOf(cols))
			d.Emit = func(NodeID, *Partial) error { return nil }
			for b.Loop() {
				d.Reset()
				for _, p := range parts {
					d.Add(p, K, 0)
				}
			}
		})
		b.Run(fmt.Sprintf("sparse/K=%d", K), func(b *testing.B) {
			groups := map[int]*Group{}
			for g := range NumGroups(n) {
				groups[g] = NewGroup(g, all[g*GroupSize:(g+1)*GroupSize])
			}
			comb := NewCombiner(n, BuildNodes(n, groups), func(NodeID, *Partial) error { return nil })
			for b.Loop() {
				comb.Reset()
				for g := range NumGroups(n) {
					gs := NewGroupSum(groups[g], n, K, 0, nil, nil)
					for s := g * GroupSize; s < (g+1)*GroupSize; s++ {
						gs.Add(parts[s])
					}
					comb.Add(NodeID{0, g}, gs.Sum())
				}
			}
		})
	}
}

// columnsOf encodes column lists as shards hold them.
func columnsOf(lists map[int][]uint32) map[int]cols.List {
	out := make(map[int]cols.List, len(lists))
	for s, c := range lists {
		out[s] = cols.NewList(c)
	}
	return out
}

// BenchmarkRootSums is the coordinator's part of a round on news20.t's
// shape with 2 workers: each sends the sum of a group of 8 shards (about
// 28,000 of 62,061 columns, text-like), for K problems, and the
// coordinator adds the two into the per-problem gradient vectors.
func BenchmarkRootSums(b *testing.B) {
	const n, width, per = 16, 62_061, 6_000
	rng := rand.New(rand.NewPCG(1, 2))
	cols := make([][]uint32, n)
	for s := range n {
		set := map[uint32]bool{}
		for len(set) < per {
			set[uint32(float64(width)*rng.Float64()*rng.Float64())] = true
		}
		for j := range set {
			cols[s] = append(cols[s], j)
		}
		slices.Sort(cols[s])
	}
	for _, K := range []int{1, 20} {
		b.Run(fmt.Sprintf("K=%d", K), func(b *testing.B) {
			r := NewReducer(listsOf(cols))
			var nodes [2]*Partial
			for g := range nodes {
				c, _ := r.tree.Cols(NodeID{0, g})
				p := &Partial{Loss: make([]float64, K), BiasGrad: make([]float64, K), Grad: make([]float64, len(c)*K)}
				for j := range p.Grad {
					p.Grad[j] = rng.NormFloat64()
				}
				nodes[g] = p
			}
			sum := &Total{Loss: make([]float64, K), BiasGrad: make([]float64, K), Grad: make([][]float64, K)}
			for k := range sum.Grad {
				sum.Grad[k] = make([]float64, width)
			}
			for b.Loop() {
				r.Reset(sum)
				for g, p := range nodes {
					if _, err := r.AddNode(NodeID{0, g}, p); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
