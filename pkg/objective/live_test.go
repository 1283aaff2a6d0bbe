package objective

import (
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"testing"

	"github.com/osgm-svm/osgm/internal/svmdata"
	"github.com/osgm-svm/osgm/pkg/cols"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/shard"
)

// TestLivePointsGiveTheSameBits: a point that carries the live
// coordinates only gives every shard the partial sums, to the bit, that
// the full point gives, for every kind of pass.
func TestLivePointsGiveTheSameBits(t *testing.T) {
	for _, classes := range []int{2, 3} {
		for _, bias := range []float64{-1, 1} {
			t.Run(fmt.Sprintf("%d classes, bias %v", classes, bias), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(5, uint64(classes)))
				obj := objectiveOf(t, svmdata.WriteFile(t, svmdata.Spread(rng, 200, classes)), 3, 1, 0.01, bias, false)
				order, K := problems(obj)
				local := obj.Backend.(*Local)
				if err := local.SetClasses(order); err != nil {
					t.Fatal(err)
				}
				dim := obj.Dim()
				bitsOf := LiveBits(local.Meta(), obj.Features, dim)
				if bitsOf == nil {
					t.Fatal("LiveBits left nothing out of data with two thirds dead")
				}
				m, err := cols.NewLiveMap(bitsOf, dim)
				if err != nil {
					t.Fatal(err)
				}
				live := m.Indices()
				if live[len(live)-1] != dim-1 && bias >= 0 {
					t.Fatalf("the bias coordinate %d is not live: %v", dim-1, live)
				}
				full := func() [][]float64 {
					x := make([][]float64, K)
					for k := range x {
						x[k] = make([]float64, dim)
						for _, j := range live {
							x[k][j] = rng.NormFloat64()
						}
					}
					return x
				}
				compact := func(x [][]float64) [][]float64 {
					out := make([][]float64, len(x))
					for k := range x {
						for _, j := range live {
							out[k] = append(out[k], x[k][j])
						}
					}
					return out
				}
				x, v := full(), full()
				px, pv := obj.Point(x), obj.Point(v)
				lx, lv := shard.NewPoint(compact(x), bias, m.Len()-1), shard.NewPoint(compact(v), bias, m.Len()-1)
				if bias < 0 {
					lx, lv = shard.NewPoint(compact(x), bias, m.Len()), shard.NewPoint(compact(v), bias, m.Len())
				}
				lx.Live, lv.Live = m, m
				if err := shard.CheckLive(local.Shards, m); err != nil {
					t.Fatal(err)
				}
				var sc shard.Scratch
				for _, s := range local.Shards {
					for _, op := range []osgm.Op{osgm.OpEval, osgm.OpEvalDiag, osgm.OpHessVec} {
						var want, got reduce.Partial
						switch op {
						case osgm.OpEval:
							s.Eval(px, &sc, &want)
							s.Eval(lx, &sc, &got)
						case osgm.OpEvalDiag:
							s.EvalDiag(px, &sc, &want)
							s.EvalDiag(lx, &sc, &got)
						case osgm.OpHessVec:
							s.HessVec(px, pv, &sc, &want)
							s.HessVec(lx, lv, &sc, &got)
						}
						if !slices.Equal(got.Loss, want.Loss) || !slices.Equal(got.BiasGrad, want.BiasGrad) || !slices.Equal(got.Grad, want.Grad) {
							t.Errorf("shard %d, op %d: partial at the live point differs from the full point's", s.ID, op)
						}
					}
				}
				want, err := local.Tally(px)
				if err != nil {
					t.Fatal(err)
				}
				got, err := local.Tally(lx)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.Correct, want.Correct) || !slices.Equal(got.Rows, want.Rows) {
					t.Errorf("tally at the live point %v, at the full point %v", got, want)
				}
			})
		}
	}
}

// TestObjectiveOverLiveCoordinates: every kind of pass of an objective
// that left the dead coordinates out gives, bit for bit, the live entries
// of the same pass over all coordinates with the dead ones at 0.
func TestObjectiveOverLiveCoordinates(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	path := svmdata.WriteFile(t, svmdata.Spread(rng, 300, 3))
	full := objectiveOf(t, path, 3, 2, 0.01, 1, false)
	order, K := problems(full)
	if err := full.Backend.SetClasses(order); err != nil {
		t.Fatal(err)
	}
	live := objectiveOf(t, path, 3, 2, 0.01, 1, false)
	if err := live.Backend.SetClasses(order); err != nil {
		t.Fatal(err)
	}
	idx := live.LeaveOutDead()
	dim, n := full.Dim(), live.Dim()
	if idx == nil || n != len(idx) || n != 31 {
		t.Fatalf("%d live coordinates (%d positions), want 30 features and the bias", n, len(idx))
	}
	vecs := func(length int) [][]float64 {
		out := make([][]float64, K)
		for k := range out {
			out[k] = make([]float64, length)
		}
		return out
	}
	x, v := vecs(n), vecs(n)
	fx, fv := vecs(dim), vecs(dim)
	for k := range x {
		for i, j := range idx {
			x[k][i], v[k][i] = rng.NormFloat64()/10, rng.NormFloat64()
			fx[k][j], fv[k][j] = x[k][i], v[k][i]
		}
	}
	ks := []int{2, 0}
	same := func(what string, got, want [][]float64) {
		t.Helper()
		for k := range got {
			for i, j := range idx {
				if math.Float64bits(got[k][i]) != math.Float64bits(want[k][j]) {
					t.Fatalf("%s of problem %d, coordinate %d: %v, the full pass's %v", what, ks[k], j, got[k][i], want[k][j])
				}
			}
		}
	}
	pick := func(xs [][]float64) [][]float64 { return [][]float64{xs[2], xs[0]} }
	f, wf := make([]float64, 2), make([]float64, 2)
	g, wg, d, wd := vecs(n)[:2], vecs(dim)[:2], vecs(n)[:2], vecs(dim)[:2]
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	check(live.evalSome(ks, pick(x), f, g))
	check(full.evalSome(ks, pick(fx), wf, wg))
	if !slices.Equal(f, wf) {
		t.Fatalf("values %v, the full pass's %v", f, wf)
	}
	same("gradient", g, wg)

	check(live.hessVecSome(ks, nil, pick(x), pick(v), g))
	check(full.hessVecSome(ks, nil, pick(fx), pick(fv), wg))
	same("Hessian-vector product", g, wg)

	check(live.evalDiagSome(ks, nil, pick(x), f, g, d))
	check(full.evalDiagSome(ks, nil, pick(fx), wf, wg, wd))
	same("gradient with the diagonal", g, wg)
	same("diagonal", d, wd)

	h, wh := [][]float64{make([]float64, n*n)}, [][]float64{make([]float64, dim*dim)}
	check(live.evalHessSome(ks[:1], pick(x)[:1], f, g[:1], h))
	check(full.evalHessSome(ks[:1], pick(fx)[:1], wf, wg[:1], wh))
	for a, ja := range idx {
		for c, jc := range idx {
			if math.Float64bits(h[0][a*n+c]) != math.Float64bits(wh[0][ja*dim+jc]) {
				t.Fatalf("Hessian entry (%d, %d) is %g, the full pass's %g", ja, jc, h[0][a*n+c], wh[0][ja*dim+jc])
			}
		}
	}
}

// TestOneProblemPassesAreTheBatchPasses: on one-vs-rest data, every kind
// of pass over one problem gives that problem's part of the pass over all
// of them, bit for bit, so a method's path does not depend on which
// problems share its passes (batches, or the last one still learning).
// The second Hessian-vector pass at a point reads the rows' activity from
// the first one's cache, and must agree too.
func TestOneProblemPassesAreTheBatchPasses(t *testing.T) {
	for _, c := range []struct {
		name    string
		compact bool
		ones    bool // every value 1: nothing stored
	}{{"decimals", false, false}, {"compact", true, false}, {"ones", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 6))
			text := svmdata.Spread(rng, 300, 3)
			if c.ones {
				text = regexp.MustCompile(`:[-0-9.]+`).ReplaceAllString(text, ":1")
			}
			obj := objectiveOf(t, svmdata.WriteFile(t, text), 3, 2, 0.01, 1, c.compact)
			if got := obj.Backend.(*Local).Shards[0].Values; c.ones != (got == shard.Ones) {
				t.Fatalf("values stored as %v", got)
			}
			order, K := problems(obj)
			if err := obj.Backend.SetClasses(order); err != nil {
				t.Fatal(err)
			}
			n := obj.Dim()
			vecs := func() [][]float64 {
				out := make([][]float64, K)
				for k := range out {
					out[k] = make([]float64, n)
				}
				return out
			}
			x, v1, v2 := vecs(), vecs(), vecs()
			for k := range x {
				for j := range n {
					x[k][j], v1[k][j], v2[k][j] = rng.NormFloat64()/4, rng.NormFloat64(), rng.NormFloat64()
				}
			}
			check := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			f, g, d, hv1, hv2 := make([]float64, K), vecs(), vecs(), vecs(), vecs()
			check(obj.evalSome(nil, x, f, g))
			fd, gd := make([]float64, K), vecs()
			check(obj.evalDiagSome(nil, nil, x, fd, gd, d))
			check(obj.hessVecSome(nil, nil, x, v1, hv1))
			check(obj.hessVecSome(nil, nil, x, v2, hv2))
			// Newton's trial points take the diagonal pass, its start the
			// plain one: both give the same value and gradient.
			for k := range K {
				if math.Float64bits(f[k]) != math.Float64bits(fd[k]) || !slices.Equal(g[k], gd[k]) {
					t.Fatalf("problem %d: the diagonal pass's value %v or gradient differ from the plain pass's %v", k, fd[k], f[k])
				}
			}
			for k := range K {
				one := []int{k}
				f1, g1, d1 := make([]float64, 1), vecs()[:1], vecs()[:1]
				same := func(what string, got []float64, want []float64) {
					t.Helper()
					for j := range want {
						if math.Float64bits(got[j]) != math.Float64bits(want[j]) {
							t.Fatalf("problem %d alone, %s at %d: %v, with all problems %v", k, what, j, got[j], want[j])
						}
					}
				}
				check(obj.evalSome(one, x[k:k+1], f1, g1))
				same("value", f1, f[k:k+1])
				same("gradient", g1[0], g[k])
				check(obj.evalDiagSome(one, nil, x[k:k+1], f1, g1, d1))
				same("value with the diagonal", f1, fd[k:k+1])
				same("gradient with the diagonal", g1[0], gd[k])
				same("diagonal", d1[0], d[k])
				// The same point as EvalDiag's: both products read the cache.
				check(obj.hessVecSome(one, nil, x[k:k+1], v1[k:k+1], g1))
				same("first Hessian-vector product", g1[0], hv1[k])
				check(obj.hessVecSome(one, nil, x[k:k+1], v2[k:k+1], g1))
				same("second Hessian-vector product", g1[0], hv2[k])
			}
		})
	}
}
