package objective

import (
	"compress/gzip"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/osgm-svm/osgm/internal/svmdata"
	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/shard"
)

// objectiveFor loads path into nShards shards and binds the objective.
func objectiveFor(t testing.TB, path string, nShards, parallel int, lambda, bias float64) *Objective {
	return objectiveOf(t, path, nShards, parallel, lambda, bias, false)
}

// objectiveOf is objectiveFor, with the shards compacted (Compact) when
// compact is set.
func objectiveOf(t testing.TB, path string, nShards, parallel int, lambda, bias float64, compact bool) *Objective {
	return objectiveWith(t, path, nShards, lambda, bias, shard.Options{Parallel: parallel, Compact: compact})
}

// objectiveWith is objectiveOf with the load's options.
func objectiveWith(t testing.TB, path string, nShards int, lambda, bias float64, opt shard.Options) *Objective {
	info, err := input.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	shards, err := shard.Load(path, input.Layout(info.Size, nShards), opt)
	if err != nil {
		t.Fatal(err)
	}
	b := NewLocal(shards, opt.Parallel)
	var sum shard.Summary
	for _, m := range b.Meta() {
		sum.Merge(m.Rows, m.NNZ, m.MaxIndex, m.NormSq, m.Labels, m.LabelCount)
	}
	b.SetClasses(shard.LabelOrder(sum.Labels))
	return New(b, int(sum.MaxIndex), lambda, bias)
}

// problems is the data's label order and the number of problems it
// makes (one for two classes, one per class otherwise).
func problems(obj *Objective) (order []float64, K int) {
	var sum shard.Summary
	for _, m := range obj.Backend.Meta() {
		sum.Merge(m.Rows, m.NNZ, m.MaxIndex, m.NormSq, m.Labels, m.LabelCount)
	}
	order = shard.LabelOrder(sum.Labels)
	if K = len(order); K == 2 {
		K = 1
	}
	return order, K
}

// reference computes d's f and gradient the straightforward dense way,
// with class weights (weights[2k] positive, weights[2k+1] negative; nil
// for none) and without the rows whose fold is hold (fold nil: none).
func reference(d svmdata.Dataset, order []float64, x [][]float64, features int, lambda, bias float64,
	weights []float64, fold []uint16, hold int, loss shard.Loss) ([]float64, [][]float64) {
	K := len(x)
	m := 0.0
	for i := range d.Rows {
		if fold == nil || int(fold[i]) != hold {
			m++
		}
	}
	f := make([]float64, K)
	g := make([][]float64, K)
	for k := range x {
		g[k] = make([]float64, len(x[k]))
		for i, row := range d.Rows {
			if fold != nil && int(fold[i]) == hold {
				continue
			}
			y, c := -1.0, 1.0
			if d.Labels[i] == order[k] {
				y = 1
			}
			if loss.Regression() {
				y = d.Labels[i]
			}
			if weights != nil {
				c = weights[2*k]
				if y < 0 {
					c = weights[2*k+1]
				}
			}
			a := make([]float64, len(x[k]))
			copy(a, row[:min(len(row), features)])
			if bias >= 0 {
				a[features] = bias
			}
			z := 0.0
			for j := range a {
				z += a[j] * x[k][j]
			}
			var l, dl float64 // the loss and its derivative in z, by the textbook
			switch loss {
			case shard.SquaredHinge:
				if dd := 1 - y*z; dd > 0 {
					l, dl = dd*dd, -2*y*dd
				}
			case shard.Logistic:
				l, dl = math.Log(1+math.Exp(-y*z)), -y/(1+math.Exp(y*z))
			case shard.SquaredEpsilon:
				if dd := math.Abs(z-y) - testEpsilon; dd > 0 {
					l, dl = dd*dd, 2*dd*math.Copysign(1, z-y)
				}
			default:
				panic(loss)
			}
			f[k] += c * l / m
			for j := range a {
				g[k][j] += c * dl * a[j] / m
			}
		}
		for j := range x[k] {
			f[k] += lambda / 2 * x[k][j] * x[k][j]
			g[k][j] += lambda * x[k][j]
		}
	}
	return f, g
}

// testEpsilon is SquaredEpsilon's width in the kernel tests.
const testEpsilon = 0.1

func TestKernelMatchesDenseReference(t *testing.T) {
	for _, loss := range []shard.Loss{shard.SquaredHinge, shard.Logistic, shard.SquaredEpsilon} {
		for i, st := range svmdata.Storages {
			// The losses share the kernels' storage paths: with -short
			// (the race detector's run) the others take ones, decimals,
			// compact float64 and 8-bit codes only.
			if testing.Short() && loss != shard.SquaredHinge && i != 0 && i != 2 && i != 6 && i != 10 {
				continue
			}
			testKernelMatchesDenseReference(t, loss, st)
		}
	}
}

func testKernelMatchesDenseReference(t *testing.T, loss shard.Loss, st svmdata.Storage) {
	for _, classes := range []int{2, 4} {
		for _, bias := range []float64{-1, 1.5} {
			for _, cv := range []bool{false, true} {
				name := fmt.Sprintf("%v/%s/classes=%d/bias=%v/weighted-cv=%v", loss, st.Name(), classes, bias, cv)
				t.Run(name, func(t *testing.T) {
					rng := rand.New(rand.NewPCG(1, uint64(classes)))
					d := svmdata.Random(rng, 300, 12, classes, st.Data)
					obj := objectiveOf(t, svmdata.WriteFile(t, d.Text), 5, 3, 0.01, bias, st.Compact)
					obj.Loss, obj.Epsilon = loss, testEpsilon
					for _, s := range obj.Backend.(*Local).Shards {
						if s.Rows() > 0 && (s.Values.String() != st.Values || (s.Code8 != nil) != st.Coded) {
							t.Fatalf("shard %d stores %v (8-bit codes: %v), want %v (%v)", s.ID, s.Values, s.Code8 != nil, st.Values, st.Coded)
						}
					}
					order, K := problems(obj)
					if loss.Regression() {
						K = 1 // the labels are targets
					}
					x := make([][]float64, K)
					for k := range x {
						x[k] = make([]float64, obj.Dim())
						for j := range x[k] {
							x[k][j] = rng.NormFloat64() * 0.3
						}
					}
					// Class weights and a held-out fold: rows of fold 2 of 3
					// leave the sums and m.
					var weights []float64
					var fold []uint16
					if cv {
						for k := 0; k < K; k++ {
							if !loss.Regression() {
								weights = append(weights, 0.5+float64(k), 2.5)
							}
						}
						var err error
						if fold, err = Folds(len(d.Rows), 3); err != nil {
							t.Fatal(err)
						}
						if err := obj.Backend.SetFolds(3); err != nil {
							t.Fatal(err)
						}
						obj.Weights, obj.Holdout = weights, 2
						for _, fo := range fold {
							if fo == 2 {
								obj.Rows--
							}
						}
					}
					f := make([]float64, K)
					g := make([][]float64, K)
					for k := range g {
						g[k] = make([]float64, obj.Dim())
					}
					if err := obj.Eval(x, f, g); err != nil {
						t.Fatal(err)
					}
					wf, wg := reference(d, order, x, obj.Features, 0.01, bias, weights, fold, 2, loss)
					for k := range f {
						if !near(f[k], wf[k], 1e-12) {
							t.Errorf("f[%d] = %v, want %v", k, f[k], wf[k])
						}
						for j := range g[k] {
							if !near(g[k][j], wg[k][j], 1e-11) {
								t.Errorf("g[%d][%d] = %v, want %v", k, j, g[k][j], wg[k][j])
							}
						}
					}
					checkFiniteDifferences(t, obj, x, g)
					checkSubsets(t, obj, x, f, g)
					checkHessVec(t, obj, x, rng)
					checkActivityCache(t, obj, x, rng)
					checkEvalDiag(t, obj, x)
					checkEvalHess(t, obj, x)
				})
			}
		}
	}
}

// checkEvalHess: EvalHessSome gives Eval's value and gradient to the bit,
// and a symmetric Hessian whose column j is H e_j from a Hessian-vector
// pass (another kernel), for each problem alone, at x and at 0.
func checkEvalHess(t *testing.T, obj *Objective, x [][]float64) {
	t.Helper()
	K, n := len(x), obj.Dim()
	wf, wg := make([]float64, K), make([][]float64, K)
	for k := range wg {
		wg[k] = make([]float64, n)
	}
	for _, at := range [][][]float64{x, make([][]float64, K)} {
		for k := range at {
			if at[k] == nil {
				at[k] = make([]float64, n)
			}
		}
		if err := obj.Eval(at, wf, wg); err != nil {
			t.Fatal(err)
		}
		cols := hessColumns(t, obj, at)
		for k := range at {
			var ks []int
			if K > 1 {
				ks = []int{k}
			}
			f, g, h := make([]float64, 1), [][]float64{make([]float64, n)}, [][]float64{make([]float64, n*n)}
			if err := obj.evalHessSome(ks, at[k:k+1], f, g, h); err != nil {
				t.Fatal(err)
			}
			if K == 1 && (math.Float64bits(f[0]) != math.Float64bits(wf[k]) || !slices.Equal(g[0], wg[k])) {
				t.Errorf("with the Hessian f = %v and g differ from Eval's (f = %v)", f[0], wf[k])
			}
			if K > 1 && !near(f[0], wf[k], 1e-13) {
				t.Errorf("problem %d alone with the Hessian: f = %v, Eval's %v", k, f[0], wf[k])
			}
			for j := range n {
				hv := cols[j]
				for i := range n {
					if hij := h[0][i*n+j]; !near(hij, hv[k][i], 1e-12) || hij != h[0][j*n+i] {
						t.Fatalf("problem %d: H[%d][%d] = %v (H[%d][%d] = %v), (H e_j)_i = %v", k, i, j, hij, j, i, h[0][j*n+i], hv[k][i])
					}
				}
			}
		}
	}
}

// hessColumns is H e_j for every coordinate j, from Hessian-vector passes
// at x: cols[j][k] is problem k's column j.
func hessColumns(t *testing.T, obj *Objective, x [][]float64) [][][]float64 {
	t.Helper()
	K, n := len(x), obj.Dim()
	e := make([][]float64, K)
	for k := range e {
		e[k] = make([]float64, n)
	}
	cols := make([][][]float64, n)
	for j := range cols {
		for k := range e {
			clear(e[k])
			e[k][j] = 1
		}
		cols[j] = make([][]float64, K)
		for k := range cols[j] {
			cols[j][k] = make([]float64, n)
		}
		if err := obj.hessVecSome(nil, nil, x, e, cols[j]); err != nil {
			t.Fatal(err)
		}
	}
	return cols
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Max(1, math.Abs(b)) }

// checkFiniteDifferences compares the gradient with central differences.
func checkFiniteDifferences(t *testing.T, obj *Objective, x, g [][]float64) {
	t.Helper()
	K := len(x)
	f := make([]float64, K)
	fp := make([]float64, K)
	scratch := make([][]float64, K)
	for k := range scratch {
		scratch[k] = make([]float64, obj.Dim())
	}
	const h = 1e-6
	for j := 0; j < obj.Dim(); j++ {
		for k := range x {
			x[k][j] += h
		}
		obj.Eval(x, fp, scratch)
		for k := range x {
			x[k][j] -= 2 * h
		}
		obj.Eval(x, f, scratch)
		for k := range x {
			x[k][j] += h
			fd := (fp[k] - f[k]) / (2 * h)
			if math.Abs(fd-g[k][j]) > 1e-6*math.Max(1, math.Abs(g[k][j])) {
				t.Errorf("d f_%d / d x_%d: finite difference %v, gradient %v", k, j, fd, g[k][j])
			}
		}
	}
}

// checkSubsets evaluates problems alone and in pairs: each must get what
// the full pass gave it (the kernels differ: one problem takes the binary
// path, so equal to rounding).
func checkSubsets(t *testing.T, obj *Objective, x [][]float64, f []float64, g [][]float64) {
	t.Helper()
	K := len(x)
	for _, ks := range [][]int{{K - 1}, {0}, {K - 1, 0}} {
		if K == 1 && len(ks) > 1 {
			continue
		}
		sx := make([][]float64, len(ks))
		sg := make([][]float64, len(ks))
		for i, k := range ks {
			sx[i], sg[i] = x[k], make([]float64, obj.Dim())
		}
		sf := make([]float64, len(ks))
		if err := obj.evalSome(ks, sx, sf, sg); err != nil {
			t.Fatal(err)
		}
		for i, k := range ks {
			if !near(sf[i], f[k], 1e-13) {
				t.Errorf("problems %v: f[%d] = %v alone, %v in the full pass", ks, k, sf[i], f[k])
			}
			for j := range sg[i] {
				if !near(sg[i][j], g[k][j], 1e-12) {
					t.Errorf("problems %v: g[%d][%d] = %v alone, %v in the full pass", ks, k, j, sg[i][j], g[k][j])
				}
			}
		}
	}
}

// checkActivityCache: Hessian-vector passes at one point reuse the rows'
// activity, found by the first of them or by an EvalDiag pass at the
// point; each must equal, to the bit, a pass that finds it afresh.
func checkActivityCache(t *testing.T, obj *Objective, x [][]float64, rng *rand.Rand) {
	t.Helper()
	K := len(x)
	newVecs := func(fill bool) [][]float64 {
		out := make([][]float64, K)
		for k := range out {
			out[k] = make([]float64, obj.Dim())
			for j := range out[k] {
				if fill {
					out[k][j] = rng.NormFloat64()
				}
			}
		}
		return out
	}
	// One point, named as a method names it (osgm.Request.At).
	at := make([]uint64, K)
	for k := range at {
		at[k] = 7
	}
	for step := 0; step < 3; step++ {
		v, cached, fresh := newVecs(true), newVecs(false), newVecs(false)
		if step == 0 {
			// Newton's order: the trial point's EvalDiag pass, then CG.
			if err := obj.evalDiagSome(nil, at, x, make([]float64, K), newVecs(false), newVecs(false)); err != nil {
				t.Fatal(err)
			}
		}
		before := obj.lastStamp
		if err := obj.hessVecSome(nil, at, x, v, cached); err != nil {
			t.Fatal(err)
		}
		if step == 0 && (before == 0 || obj.lastStamp != before) {
			t.Fatalf("EvalDiag's stamp %x, the Hessian-vector pass's %x", before, obj.lastStamp)
		}
		if step > 0 && obj.lastStamp == 0 {
			t.Fatal("no stamp")
		}
		stamp := obj.lastStamp
		obj.lastStamp = 0 // the next pass gets a new stamp: activity found afresh
		if err := obj.hessVecSome(nil, at, x, v, fresh); err != nil {
			t.Fatal(err)
		}
		if obj.lastStamp == stamp {
			t.Fatal("stamp reused after reset")
		}
		for k := range cached {
			for j := range cached[k] {
				if math.Float64bits(cached[k][j]) != math.Float64bits(fresh[k][j]) {
					t.Fatalf("step %d: Hv[%d][%d] = %v with the cache, %v without", step, k, j, cached[k][j], fresh[k][j])
				}
			}
		}
	}
	// Unnamed points are never taken for the same one: each pass finds
	// its activity afresh.
	if err := obj.hessVecSome(nil, nil, x, newVecs(true), newVecs(false)); err != nil {
		t.Fatal(err)
	}
	first := obj.lastStamp
	if err := obj.hessVecSome(nil, nil, x, newVecs(true), newVecs(false)); err != nil {
		t.Fatal(err)
	}
	if obj.lastStamp == first {
		t.Fatal("an unnamed point reused the last pass's stamp")
	}
}

// checkHessVec compares H v with the difference of gradients along v
// (exact for a piecewise quadratic when no row changes activity).
func checkHessVec(t *testing.T, obj *Objective, x [][]float64, rng *rand.Rand) {
	t.Helper()
	K := len(x)
	v := make([][]float64, K)
	hv := make([][]float64, K)
	g0 := make([][]float64, K)
	g1 := make([][]float64, K)
	x1 := make([][]float64, K)
	for k := range v {
		v[k] = make([]float64, obj.Dim())
		for j := range v[k] {
			v[k][j] = rng.NormFloat64()
		}
		hv[k] = make([]float64, obj.Dim())
		g0[k] = make([]float64, obj.Dim())
		g1[k] = make([]float64, obj.Dim())
		x1[k] = make([]float64, obj.Dim())
	}
	if err := obj.hessVecSome(nil, nil, x, v, hv); err != nil {
		t.Fatal(err)
	}
	const h = 1e-7
	f := make([]float64, K)
	obj.Eval(x, f, g0)
	for k := range x {
		for j := range x[k] {
			x1[k][j] = x[k][j] + h*v[k][j]
		}
	}
	obj.Eval(x1, f, g1)
	for k := range x {
		for j := range x[k] {
			fd := (g1[k][j] - g0[k][j]) / h
			if math.Abs(fd-hv[k][j]) > 1e-4*math.Max(1, math.Abs(hv[k][j])) {
				t.Errorf("Hv[%d][%d] = %v, gradient difference %v", k, j, hv[k][j], fd)
			}
		}
	}
}

// checkEvalDiag: EvalDiagSome gives Eval's value and gradient, and the
// Hessian's diagonal, compared with H e_j's entry j (one Hessian-vector
// product per coordinate, another kernel), at x and at 0, where every row
// is active (TestDiagAtZero checks that case against the data).
func checkEvalDiag(t *testing.T, obj *Objective, x [][]float64) {
	t.Helper()
	K, n := len(x), obj.Dim()
	alloc := func() [][]float64 {
		out := make([][]float64, K)
		for k := range out {
			out[k] = make([]float64, n)
		}
		return out
	}
	zero := alloc()
	for _, at := range [][][]float64{x, zero} {
		f, g, d := make([]float64, K), alloc(), alloc()
		wf, wg := make([]float64, K), alloc()
		if err := obj.evalDiagSome(nil, nil, at, f, g, d); err != nil {
			t.Fatal(err)
		}
		if err := obj.Eval(at, wf, wg); err != nil {
			t.Fatal(err)
		}
		cols := hessColumns(t, obj, at)
		for j := 0; j < n; j++ {
			hv := cols[j]
			for k := range d {
				if !near(d[k][j], hv[k][j], 1e-12) {
					t.Errorf("diag[%d][%d] = %v, (H e_j)_j = %v", k, j, d[k][j], hv[k][j])
				}
				if !near(g[k][j], wg[k][j], 1e-12) {
					t.Errorf("with the diagonal g[%d][%d] = %v, Eval's %v", k, j, g[k][j], wg[k][j])
				}
			}
		}
		for k := range f {
			if !near(f[k], wf[k], 1e-13) {
				t.Errorf("with the diagonal f[%d] = %v, Eval's %v", k, f[k], wf[k])
			}
		}
	}
}

// TestSameBitsWhateverTheSplit evaluates one data set with different
// numbers of goroutines and from plain and gzip files: the shard layout
// is fixed, so the bits must not change.
func TestSameBitsWhateverTheSplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	d := svmdata.Random(rng, 2000, 40, 3, "f64")
	plain := svmdata.WriteFile(t, d.Text)
	gz := filepath.Join(t.TempDir(), "data.gz")
	f, _ := os.Create(gz)
	zw := gzip.NewWriter(f)
	zw.Write([]byte(d.Text))
	zw.Close()
	f.Close()

	eval := func(path string, parallel int) ([]float64, [][]float64) {
		obj := objectiveFor(t, path, 16, parallel, 1e-3, 1)
		x := make([][]float64, 3)
		g := make([][]float64, 3)
		for k := range x {
			x[k] = make([]float64, obj.Dim())
			g[k] = make([]float64, obj.Dim())
			for j := range x[k] {
				x[k][j] = math.Sin(float64(j*3 + k))
			}
		}
		fv := make([]float64, 3)
		if err := obj.Eval(x, fv, g); err != nil {
			t.Fatal(err)
		}
		return fv, g
	}
	f1, g1 := eval(plain, 1)
	for _, c := range []struct {
		path     string
		parallel int
	}{{plain, 2}, {plain, 7}, {gz, 1}, {gz, 3}} {
		f2, g2 := eval(c.path, c.parallel)
		for k := range f1 {
			if math.Float64bits(f1[k]) != math.Float64bits(f2[k]) {
				t.Fatalf("%s parallel=%d: f differs", c.path, c.parallel)
			}
			for j := range g1[k] {
				if math.Float64bits(g1[k][j]) != math.Float64bits(g2[k][j]) {
					t.Fatalf("%s parallel=%d: g[%d][%d] differs", c.path, c.parallel, k, j)
				}
			}
		}
	}
}

// TestReductionTreeIsFixed adds the same shard partials in shuffled orders
// and with some groups summed "on a worker" first: the total must be the
// same to the bit every time.
func TestReductionTreeIsFixed(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	d := svmdata.Random(rng, 3000, 30, 3, "f64")
	obj := objectiveFor(t, svmdata.WriteFile(t, d.Text), 45, 2, 1e-3, -1) // 6 groups, a tree of height 3
	shards := obj.Backend.(*Local).Shards
	K := 3
	p := obj.Point(svmdata.NormalVectors(rng, K, obj.Dim()))
	parts := make([]*reduce.Partial, len(shards))
	cols := make([][]uint32, len(shards))
	for i, s := range shards {
		var sc shard.Scratch
		parts[i] = new(reduce.Partial)
		s.Eval(p, &sc, parts[i])
		cols[i] = s.Cols.Slice()
	}
	groups := reduce.Groups(cols)
	reduce := func(order []int, preSummed map[int]bool) *reduce.Total {
		sum := &reduce.Total{Loss: make([]float64, K), BiasGrad: make([]float64, K), Grad: make([][]float64, K)}
		for k := range sum.Grad {
			sum.Grad[k] = make([]float64, obj.Features)
		}
		r := reduce.NewReducer(listsOf(cols))
		r.Reset(sum)
		// A "worker" holding the groups in preSummed sends the sums of
		// the highest nodes it holds whole, as a worker does.
		held := map[int]*reduce.Group{}
		for g := range preSummed {
			held[g] = groups[g]
		}
		var sent []reduce.NodeID
		comb := reduce.NewCombiner(len(shards), reduce.BuildNodes(len(shards), held), func(id reduce.NodeID, p *reduce.Partial) error {
			sent = append(sent, id)
			q := *p
			q.Grad = slices.Clone(p.Grad)
			_, err := r.AddNode(id, &q)
			return err
		})
		for g := range preSummed {
			gs := reduce.NewGroupSum(groups[g], len(shards), K, 0, nil, nil)
			first, end := reduce.GroupShards(g, len(shards))
			for s := end - 1; s >= first; s-- { // out of order on purpose
				gs.Add(parts[s])
			}
			if !gs.Complete() {
				t.Fatal("group sum incomplete")
			}
			if _, err := comb.Add(reduce.NodeID{Level: 0, Index: g}, gs.Sum()); err != nil {
				t.Fatal(err)
			}
		}
		if len(preSummed) == len(groups) && (len(sent) != 1 || sent[0] != reduce.Root(len(shards))) {
			t.Fatalf("a worker holding every group sent %v, not the root", sent)
		}
		for _, s := range order {
			r.Add(parts[s])
		}
		if !r.Done() {
			t.Fatalf("reduction incomplete: missing %v", r.Missing())
		}
		return sum
	}
	inOrder := make([]int, len(shards))
	for i := range inOrder {
		inOrder[i] = i
	}
	want := reduce(inOrder, nil)
	for trial := 0; trial < 20; trial++ {
		order := append([]int(nil), inOrder...)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		// A contiguous block of groups, as workers are given (trial 0:
		// all of them).
		pre := map[int]bool{}
		a, b := rng.IntN(len(groups)), rng.IntN(len(groups))
		if trial == 0 {
			a, b = 0, len(groups)-1
		}
		for g := min(a, b); g <= max(a, b); g++ {
			pre[g] = true
		}
		got := reduce(order, pre)
		for k := range want.Grad {
			if math.Float64bits(got.Loss[k]) != math.Float64bits(want.Loss[k]) {
				t.Fatalf("trial %d: loss %d differs", trial, k)
			}
			for j := range want.Grad[k] {
				if math.Float64bits(got.Grad[k][j]) != math.Float64bits(want.Grad[k][j]) {
					t.Fatalf("trial %d: grad[%d][%d] differs", trial, k, j)
				}
			}
		}
	}
}

// TestRootChildrenMatchRootSum: the root's sum taken as its two children
// (Combiner.EmitChildren) has the bits of the root's own sum added into
// the vectors, as the reduction took it before: gradients, losses and,
// for one problem, the Hessian, on trees of 1 to 6 groups.
func TestRootChildrenMatchRootSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, c := range []struct{ shards, classes int }{{8, 2}, {16, 2}, {24, 2}, {24, 3}, {45, 4}} {
		t.Run(fmt.Sprintf("shards=%d/classes=%d", c.shards, c.classes), func(t *testing.T) {
			// Rows draw their columns from a band that moves down the
			// file, so groups hold different columns and the root's
			// children overlap in part.
			var text strings.Builder
			for i := range 3000 {
				lab := rng.IntN(c.classes)
				if c.classes == 2 {
					lab = 2*lab - 1
				}
				fmt.Fprintf(&text, "%d", lab)
				base := 1 + i*1200/3000
				for j := range 40 {
					if rng.Float64() < 0.15 {
						fmt.Fprintf(&text, " %d:%g", base+j, rng.NormFloat64())
					}
				}
				text.WriteString("\n")
			}
			obj := objectiveFor(t, svmdata.WriteFile(t, text.String()), c.shards, 2, 1e-3, 1)
			shards := obj.Backend.(*Local).Shards
			_, K := problems(obj)
			p := obj.Point(svmdata.NormalVectors(rng, K, obj.Dim()))
			n := len(shards)
			cols := make([][]uint32, n)
			parts := make([]*reduce.Partial, n)
			for i, s := range shards {
				cols[i], parts[i] = s.Cols.Slice(), new(reduce.Partial)
				if K == 1 {
					s.EvalHess(p, new(shard.Scratch), parts[i])
				} else {
					s.Eval(p, new(shard.Scratch), parts[i])
				}
			}
			newSum := func() *reduce.Total {
				sum := &reduce.Total{Loss: make([]float64, K), BiasGrad: make([]float64, K), Grad: make([][]float64, K), Hess: make([]float64, len(parts[0].Hess))}
				for k := range sum.Grad {
					sum.Grad[k] = make([]float64, obj.Features)
				}
				return sum
			}
			got := newSum()
			r := reduce.NewReducer(listsOf(cols))
			r.Reset(got)
			for _, q := range parts {
				if _, err := r.Add(q); err != nil {
					t.Fatal(err)
				}
			}
			if !r.Done() {
				t.Fatalf("reduction incomplete: missing %v", r.Missing())
			}

			// The root's own sum, over its columns, added into zeros.
			want := newSum()
			groups := map[int]*reduce.Group{}
			for g, gr := range reduce.Groups(cols) {
				groups[g] = gr
			}
			var root *reduce.Partial
			comb := reduce.NewCombiner(n, reduce.BuildNodes(n, groups), func(id reduce.NodeID, q *reduce.Partial) error {
				root = q
				return nil
			})
			for g := range groups {
				gs := reduce.NewGroupSum(groups[g], n, K, len(parts[0].Hess), nil, nil)
				first, end := reduce.GroupShards(g, n)
				for s := first; s < end; s++ {
					gs.Add(parts[s])
				}
				if _, err := comb.Add(reduce.NodeID{Level: 0, Index: g}, gs.Sum()); err != nil {
					t.Fatal(err)
				}
			}
			rootCols, _ := comb.Tree.Cols(reduce.Root(n))
			for k := range K {
				want.Loss[k] += root.Loss[k]
				want.BiasGrad[k] += root.BiasGrad[k]
				for l, j := range rootCols {
					want.Grad[k][j] += root.Grad[l*K+k]
				}
			}
			for i, v := range root.Hess {
				want.Hess[i] += v
			}

			same := func(what string, a, b []float64) {
				t.Helper()
				for i := range a {
					if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
						t.Fatalf("%s[%d]: %v from the root's children, %v from its sum", what, i, a[i], b[i])
					}
				}
			}
			same("loss", got.Loss, want.Loss)
			same("bias gradient", got.BiasGrad, want.BiasGrad)
			same("Hessian", got.Hess, want.Hess)
			for k := range K {
				same(fmt.Sprintf("grad %d", k), got.Grad[k], want.Grad[k])
			}
			if K == 1 && len(got.Hess) == 0 {
				t.Fatal("no Hessian to compare")
			}
		})
	}
}

// TestDiagAtZero: the diagonal of the Hessian at 0, which methods start
// from (train asks for it with the pass at 0), is the closed form
// lambda + (2/m) sum_i a_ij^2 over the parsed rows (every row is active at
// 0), for every value storage, with and without a bias feature.
func TestDiagAtZero(t *testing.T) {
	const lambda = 0.01
	for _, st := range svmdata.Storages {
		values := st.Name()
		for _, bias := range []float64{-1, 1.5} {
			rng := rand.New(rand.NewPCG(3, 4))
			d := svmdata.Random(rng, 200, 30, 2, st.Data)
			obj := objectiveOf(t, svmdata.WriteFile(t, d.Text), 5, 2, lambda, bias, st.Compact)
			n := obj.Dim()
			want := make([]float64, n)
			for _, r := range d.Rows {
				for j, v := range r {
					want[j] += v * v
				}
				if bias >= 0 {
					want[n-1] += bias * bias
				}
			}
			zero, g, diag := [][]float64{make([]float64, n)}, [][]float64{make([]float64, n)}, [][]float64{make([]float64, n)}
			if err := obj.evalDiagSome(nil, nil, zero, make([]float64, 1), g, diag); err != nil {
				t.Fatal(err)
			}
			m := float64(len(d.Rows))
			for j := range want {
				if w := lambda + 2*want[j]/m; !near(diag[0][j], w, 1e-13) {
					t.Errorf("%s, bias %v: diag[%d] = %v, want %v", values, bias, j, diag[0][j], w)
				}
			}
		}
	}
}

// TestPartialsOutliveCollections checks that a Local's released partials
// are kept through garbage collections (a sync.Pool would drop them, and
// on wide multi-class data each is megabytes to allocate and zero again)
// and that a reused partial, last filled by another shard of another
// size, gives the bits of a fresh one.
func TestPartialsOutliveCollections(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	path := svmdata.WriteFile(t, svmdata.Random(rng, 400, 60, 4, "f64").Text)
	reused := objectiveFor(t, path, 7, 2, 0.01, 1)
	_, K := problems(reused)
	n := reused.Dim()
	f := make([]float64, K)
	g := svmdata.NormalVectors(rng, K, n) // overwritten
	for range 3 {
		if err := reused.Eval(svmdata.NormalVectors(rng, K, n), f, g); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.GC()
	local := reused.Backend.(*Local)
	if len(local.pool.free) == 0 {
		t.Fatal("no released partial survived two collections")
	}
	x := svmdata.NormalVectors(rng, K, n)
	if err := reused.Eval(x, f, g); err != nil {
		t.Fatal(err)
	}
	fresh := objectiveFor(t, path, 7, 2, 0.01, 1)
	f2, g2 := make([]float64, K), svmdata.NormalVectors(rng, K, n)
	if err := fresh.Eval(x, f2, g2); err != nil {
		t.Fatal(err)
	}
	if !sameBits(f, f2) {
		t.Errorf("losses %v with reused partials, %v fresh", f, f2)
	}
	for k := range K {
		if !sameBits(g[k], g2[k]) {
			t.Errorf("problem %d: the gradient with reused partials is not the fresh one's", k)
		}
	}
}

// storageResults lists f, the gradient and H·v at x (H along v), and for
// one problem the value, gradient and diagonal of an EvalDiag pass.
func storageResults(t *testing.T, o *Objective, x, v [][]float64) []float64 {
	K := len(x)
	f := make([]float64, K)
	g, hv := make([][]float64, K), make([][]float64, K)
	for k := range g {
		g[k], hv[k] = make([]float64, o.Dim()), make([]float64, o.Dim())
	}
	if err := o.Eval(x, f, g); err != nil {
		t.Fatal(err)
	}
	if err := o.hessVecSome(nil, nil, x, v, hv); err != nil {
		t.Fatal(err)
	}
	out := slices.Clone(f)
	for k := range g {
		out = append(append(out, g[k]...), hv[k]...)
	}
	if K == 1 {
		diag := [][]float64{make([]float64, o.Dim())}
		if err := o.evalDiagSome(nil, nil, x, f, g, diag); err != nil {
			t.Fatal(err)
		}
		out = append(append(append(out, f...), g[0]...), diag[0]...)
		if o.Dim() > 100 {
			return out // wide data: newton-full does not take it
		}
		h := [][]float64{make([]float64, o.Dim()*o.Dim())}
		if err := o.evalHessSome(nil, x, f, g, h); err != nil {
			t.Fatal(err)
		}
		out = append(out, h[0]...)
	}
	return out
}

// TestSubSharesPartials: passes over some of the shards (a worker's
// resends, or its shards loaded so far) take their partials from the
// whole set's list and give them back to it, as a worker's sums release
// them: however many such passes, the list holds no more partials than
// were out at once. Locals of their own grew it by a pass's partials at
// every pass.
func TestSubSharesPartials(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	path := svmdata.WriteFile(t, svmdata.Random(rng, 200, 30, 2, "f64").Text)
	whole := objectiveFor(t, path, 4, 1, 0.01, 1).Backend.(*Local)
	p := shard.NewPoint([][]float64{make([]float64, 31)}, 1, 30)
	for range 10 {
		sub := whole.Sub(whole.Shards[:3])
		err := sub.Eval(osgm.OpEval, p, nil, func(part *reduce.Partial) error { whole.Release(part); return nil })
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := len(whole.pool.free); n != 1 {
		t.Fatalf("the whole set's list holds %d partials after passes with one out at a time, want 1", n)
	}
}
