package shard

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/osgm-svm/osgm/pkg/cols"
	"github.com/osgm-svm/osgm/pkg/osgm"
)

// TestDenseSumMatchesCombiner: a worker summing the nodes it holds whole
// in dense vectors must send what the Combiner sends, node for node and
// bit for bit, whatever order the partials arrive in, for one problem and
// several, with and without Hessians, on trees with single-child nodes.
func TestDenseSumMatchesCombiner(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, data := range []struct{ name, text string }{
		{"dense", randomData(rng, 3000, 30, 3, "f64").text},
		// Rows in bands of columns, so that a block of shards holds a
		// part of them: its vectors run over those alone.
		{"banded", bandedText(rng, 3000, 120, 12)},
	} {
		obj := objectiveFor(t, writeFile(t, data.text), 45, 2, 1e-3, -1) // 6 groups, a tree of height 3
		shards := obj.Backend.(*Local).Shards
		n := len(shards)
		cols := make([][]uint32, n)
		for i, s := range shards {
			cols[i] = s.Cols.Slice()
		}
		groups := Groups(cols)
		cases := []struct {
			name string
			K    int
			op   osgm.Op
		}{
			{"one problem", 1, osgm.OpEval},
			{"three problems", 3, osgm.OpEval},
			{"Hessian", 1, osgm.OpEvalHess},
		}
		for _, c := range cases {
			t.Run(data.name+"/"+c.name, func(t *testing.T) {
				p := obj.Point(normalVectors(rng, c.K, obj.Dim()))
				parts := make([]*Partial, n)
				for i, s := range shards {
					var sc Scratch
					parts[i] = new(Partial)
					if c.op == osgm.OpEvalHess {
						s.EvalHess(p, &sc, parts[i])
					} else {
						s.Eval(p, &sc, parts[i])
					}
				}
				for trial := range 12 {
					// A contiguous block of shards, as workers are given
					// (trial 0: all of them), ragged at both ends.
					a, b := rng.IntN(n), rng.IntN(n)
					if trial == 0 {
						a, b = 0, n-1
					}
					held := map[int][]uint32{}
					for s := min(a, b); s <= max(a, b); s++ {
						held[s] = cols[s]
					}
					want := combinerSums(t, n, groups, held, parts)
					got := map[NodeID]*Partial{}
					ds := NewDenseSum(n, columnsOf(held))
					if ds == nil {
						if len(want) != 0 {
							t.Fatalf("trial %d: no dense sum, the Combiner sent %d nodes", trial, len(want))
						}
						continue
					}
					// What a worker keeps to send again: the emitted memory,
					// which must still hold the sums at the end of the pass.
					kept := map[NodeID]*Partial{}
					ds.Emit = func(id NodeID, p *Partial) error {
						if got[id] != nil {
							t.Fatalf("node %v sent twice", id)
						}
						got[id], kept[id] = clonePartial(p), p
						return nil
					}
					for pass := range 2 { // the second pass reuses the vectors
						clear(got)
						ds.Reset()
						order := heldInWindows(rng, held, 3)
						for _, s := range order {
							if !ds.Holds(s) {
								continue
							}
							if ok, err := ds.Add(parts[s]); !ok || err != nil {
								t.Fatalf("trial %d: Add(%d) = %v, %v", trial, s, ok, err)
							}
						}
						if ok, _ := ds.Add(parts[order[0]]); ok && ds.Holds(order[0]) {
							t.Fatalf("trial %d: a repeated partial was taken", trial)
						}
						for id, p := range kept {
							if !sameBits(p.Grad, got[id].Grad) || !sameBits(p.Loss, got[id].Loss) {
								t.Fatalf("trial %d: node %v's memory was written after it was sent", trial, id)
							}
						}
						if len(got) != len(want) {
							t.Fatalf("trial %d pass %d: sent %d nodes, the Combiner %d", trial, pass, len(got), len(want))
						}
						for id, w := range want {
							g := got[id]
							if g == nil {
								t.Fatalf("trial %d: node %v not sent", trial, id)
							}
							for _, f := range [][2][]float64{{g.Loss, w.Loss}, {g.BiasGrad, w.BiasGrad}, {g.Grad, w.Grad}, {g.Hess, w.Hess}} {
								if !sameBits(f[0], f[1]) {
									t.Fatalf("trial %d: node %v differs from the Combiner's", trial, id)
								}
							}
							if g.Shard != id.Index || !g.Group || g.Level != id.Level {
								t.Fatalf("trial %d: node %v labelled %d/%v/%d", trial, id, g.Shard, g.Group, g.Level)
							}
						}
					}
				}
			})
		}

	}
}

// bandedText writes rows over n features whose nonzeros lie in a band of
// width columns that moves with the row.
func bandedText(rng *rand.Rand, rows, n, width int) string {
	var b strings.Builder
	for i := range rows {
		fmt.Fprintf(&b, "%d", 1+rng.IntN(3))
		base := i * (n - width) / rows
		for j := base + 1; j <= base+width; j++ {
			if rng.Float64() < 0.4 {
				fmt.Fprintf(&b, " %d:%g", j, rng.NormFloat64())
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// combinerSums is what a worker holding the shards in held sends through
// GroupSum and Combiner.
func combinerSums(t *testing.T, n int, groups []*Group, held map[int][]uint32, parts []*Partial) map[NodeID]*Partial {
	t.Helper()
	whole := map[int]*Group{}
	for g, gr := range groups {
		first, end := GroupShards(g, n)
		whole[g] = gr
		for s := first; s < end; s++ {
			if held[s] == nil {
				delete(whole, g)
			}
		}
	}
	out := map[NodeID]*Partial{}
	comb := NewCombiner(n, BuildNodes(n, whole), func(id NodeID, p *Partial) error {
		out[id] = clonePartial(p)
		return nil
	})
	for g := range groups {
		if whole[g] == nil {
			continue
		}
		K, hess := len(parts[0].Loss), len(parts[0].Hess)
		gs := NewGroupSum(whole[g], n, K, hess, nil, nil)
		first, end := GroupShards(g, n)
		for s := first; s < end; s++ {
			if _, err := gs.Add(parts[s]); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := comb.Add(NodeID{0, g}, gs.Sum()); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// heldInWindows orders the held shards as parallel evaluation delivers
// them: increasing, but shuffled within windows of w.
func heldInWindows(rng *rand.Rand, held map[int][]uint32, w int) []int {
	var ids []int
	for s := range held {
		ids = append(ids, s)
	}
	slices.Sort(ids)
	for i := 0; i < len(ids); i += w {
		win := ids[i:min(i+w, len(ids))]
		rng.Shuffle(len(win), func(a, b int) { win[a], win[b] = win[b], win[a] })
	}
	return ids
}

func clonePartial(p *Partial) *Partial {
	q := *p
	q.Loss, q.BiasGrad, q.Grad, q.Hess = slices.Clone(p.Loss), slices.Clone(p.BiasGrad), slices.Clone(p.Grad), slices.Clone(p.Hess)
	return &q
}

func sameBits(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}

func TestDenseSumRefusesAWrongSize(t *testing.T) {
	cols := map[int][]uint32{0: {1, 4}, 1: {0, 4, 7}}
	ds := NewDenseSum(2, columnsOf(cols))
	ds.Emit = func(NodeID, *Partial) error { return nil }
	ds.Reset()
	bad := &Partial{Shard: 0, Loss: []float64{1}, BiasGrad: []float64{0}, Grad: []float64{1, 2, 3}}
	if _, err := ds.Add(bad); err == nil {
		t.Fatal("a partial longer than its shard's columns was taken")
	}
	if ds.Holds(2) || NewDenseSum(3, columnsOf(map[int][]uint32{0: {1}})) != nil {
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
			if _, err := ds.Add(p); err != nil {
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
					d.Add(p)
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
			r := NewReducer(cols)
			var nodes [2]*Partial
			for g := range nodes {
				c, _ := r.tree.Cols(NodeID{0, g})
				p := &Partial{Loss: make([]float64, K), BiasGrad: make([]float64, K), Grad: make([]float64, len(c)*K)}
				for j := range p.Grad {
					p.Grad[j] = rng.NormFloat64()
				}
				nodes[g] = p
			}
			sum := &Sum{Loss: make([]float64, K), BiasGrad: make([]float64, K), Grad: make([][]float64, K)}
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
