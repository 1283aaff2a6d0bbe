package objective

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/osgm-svm/osgm/internal/svmdata"
	"github.com/osgm-svm/osgm/pkg/cols"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/shard"
)

// TestDenseSumMatchesCombiner: a worker summing the nodes it holds whole
// in dense vectors must send what the Combiner sends, node for node and
// bit for bit, whatever order the partials arrive in, for one problem and
// several, with and without Hessians, on trees with single-child nodes.
func TestDenseSumMatchesCombiner(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, data := range []struct{ name, text string }{
		{"dense", svmdata.Random(rng, 3000, 30, 3, "f64").Text},
		// Rows in bands of columns, so that a block of shards holds a
		// part of them: its vectors run over those alone.
		{"banded", svmdata.Banded(rng, 3000, 120, 12)},
	} {
		obj := objectiveFor(t, svmdata.WriteFile(t, data.text), 45, 2, 1e-3, -1) // 6 groups, a tree of height 3
		shards := obj.Backend.(*Local).Shards
		n := len(shards)
		ids := make([][]uint32, n)
		for i, s := range shards {
			ids[i] = s.Cols.Slice()
		}
		groups := reduce.Groups(ids)
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
				p := obj.Point(svmdata.NormalVectors(rng, c.K, obj.Dim()))
				parts := make([]*reduce.Partial, n)
				for i, s := range shards {
					var sc shard.Scratch
					parts[i] = new(reduce.Partial)
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
					held, lists := map[int][]uint32{}, map[int]cols.List{}
					for s := min(a, b); s <= max(a, b); s++ {
						held[s], lists[s] = ids[s], shards[s].Cols
					}
					want := combinerSums(t, n, groups, held, parts)
					got := map[reduce.NodeID]*reduce.Partial{}
					ds := reduce.NewDenseSum(n, lists)
					if ds == nil {
						if len(want) != 0 {
							t.Fatalf("trial %d: no dense sum, the Combiner sent %d nodes", trial, len(want))
						}
						continue
					}
					// What a worker keeps to send again: the emitted memory,
					// which must still hold the sums at the end of the pass.
					kept := map[reduce.NodeID]*reduce.Partial{}
					ds.Emit = func(id reduce.NodeID, p *reduce.Partial) error {
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
							held, ok, err := ds.Add(parts[s], c.K, len(parts[s].Hess))
							if held && (!ok || err != nil) {
								t.Fatalf("trial %d: Add(%d) = %v, %v", trial, s, ok, err)
							}
						}
						if held, ok, _ := ds.Add(parts[order[0]], c.K, len(parts[order[0]].Hess)); held && ok {
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

// combinerSums is what a worker holding the shards in held sends through
// GroupSum and Combiner.
func combinerSums(t *testing.T, n int, groups []*reduce.Group, held map[int][]uint32, parts []*reduce.Partial) map[reduce.NodeID]*reduce.Partial {
	t.Helper()
	whole := map[int]*reduce.Group{}
	for g, gr := range groups {
		first, end := reduce.GroupShards(g, n)
		whole[g] = gr
		for s := first; s < end; s++ {
			if held[s] == nil {
				delete(whole, g)
			}
		}
	}
	out := map[reduce.NodeID]*reduce.Partial{}
	comb := reduce.NewCombiner(n, reduce.BuildNodes(n, whole), func(id reduce.NodeID, p *reduce.Partial) error {
		out[id] = clonePartial(p)
		return nil
	})
	for g := range groups {
		if whole[g] == nil {
			continue
		}
		K, hess := len(parts[0].Loss), len(parts[0].Hess)
		gs := reduce.NewGroupSum(whole[g], n, K, hess, nil, nil)
		first, end := reduce.GroupShards(g, n)
		for s := first; s < end; s++ {
			if _, err := gs.Add(parts[s]); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := comb.Add(reduce.NodeID{Level: 0, Index: g}, gs.Sum()); err != nil {
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

func clonePartial(p *reduce.Partial) *reduce.Partial {
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

// TestSummedSameBits: a Local that sums its shards up the tree itself
// (Summed, as the coordinator's does) hands the Objective the root's sum
// instead of a partial per shard; every pass must come out to the bits
// the Objective's own reduction gives, for one problem and several, with
// the bias, over the live coordinates, whatever the goroutines, and on a
// fork. Where the dense vectors do not pay, Summed changes nothing.
func TestSummedSameBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for _, c := range []struct {
		name   string
		text   string
		dense  bool // the dense sums pay
		shards int
	}{
		{"binary", svmdata.Random(rng, 3000, 30, 2, "f64").Text, true, 45},
		{"classes", svmdata.Random(rng, 3000, 30, 3, "f64").Text, true, 13},
		{"banded", svmdata.Banded(rng, 3000, 400, 12), false, 45},
	} {
		path := svmdata.WriteFile(t, c.text)
		for _, parallel := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/parallel=%d", c.name, parallel), func(t *testing.T) {
				plain := objectiveFor(t, path, c.shards, parallel, 1e-3, 1)
				summed := objectiveFor(t, path, c.shards, parallel, 1e-3, 1)
				local := summed.Backend.(*Local).Summed()
				if (local.whole != nil) != c.dense {
					t.Fatalf("dense sums in use: %t, want %t", local.whole != nil, c.dense)
				}
				_, K := problems(plain)
				for _, o := range []*Objective{plain, summed} {
					o.LeaveOutDead()
				}
				x, v := svmdata.NormalVectors(rng, K, plain.Dim()), svmdata.NormalVectors(rng, K, plain.Dim())
				want := storageResults(t, plain, x, v)
				for i := range 2 { // the second pass reuses the sums' memory
					if got := storageResults(t, summed, x, v); !sameBits(got, want) {
						t.Fatalf("pass %d: summed results differ from the Objective's reduction", i)
					}
				}
				if got := storageResults(t, summed.Forked(), x, v); !sameBits(got, want) {
					t.Fatal("a fork's results differ from the Objective's reduction")
				}
			})
		}
	}
}

// listsOf is the column maps of increasing lists.
func listsOf(ids [][]uint32) []cols.List {
	out := make([]cols.List, len(ids))
	for i, c := range ids {
		out[i] = cols.NewList(c)
	}
	return out
}
