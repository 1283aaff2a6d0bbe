package shard

import (
	"compress/gzip"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/osgm-svm/osgm/internal/gcwait"
	"github.com/osgm-svm/osgm/internal/svmdata"
	"github.com/osgm-svm/osgm/pkg/memory"
	"github.com/osgm-svm/osgm/pkg/reduce"
)

// storages are the data kinds of randomData, with and without Compact,
// that reach every value storage, and the storage each gives: coded
// (8-bit codes) or not. Compact leaves values with many distinct numbers
// alone.
type storage struct {
	data    string
	compact bool
	values  Values
	coded   bool
}

var storages = []storage{
	{"ones", false, Ones, false},
	{"f32", false, Float32, false}, {"dec", false, Decimal, false}, {"f64", false, Float64, false},
	{"f32", true, Float32, false}, {"dec", true, Decimal, false}, {"f64", true, Float64, false},
	{"f32-few", false, Float32, false}, {"dec-few", false, Decimal, false},
	{"f32-few", true, Float32, true}, {"dec-few", true, Decimal, true}, {"f64-few", true, Float64, true},
}

// name says which storage st is, for test names.
func (st storage) name() string {
	if st.compact {
		return st.data + "+compact"
	}
	return st.data
}

// objectiveFor loads path into nShards shards and binds the objective.
func objectiveFor(t testing.TB, path string, nShards, parallel int, lambda, bias float64) *Objective {
	return objectiveOf(t, path, nShards, parallel, lambda, bias, false)
}

// objectiveOf is objectiveFor, with the shards compacted (Compact) when
// compact is set.
func objectiveOf(t testing.TB, path string, nShards, parallel int, lambda, bias float64, compact bool) *Objective {
	return objectiveWith(t, path, nShards, lambda, bias, Options{Parallel: parallel, Compact: compact})
}

// objectiveWith is objectiveOf with the load's options.
func objectiveWith(t testing.TB, path string, nShards int, lambda, bias float64, opt Options) *Objective {
	info, err := Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	shards, err := Load(path, Layout(info.Size, nShards), opt)
	if err != nil {
		t.Fatal(err)
	}
	b := NewLocal(shards, opt.Parallel)
	var sum Summary
	for _, m := range b.Meta() {
		sum.Merge(m.Rows, m.NNZ, m.MaxIndex, m.NormSq, m.Labels, m.LabelCount)
	}
	b.SetClasses(LabelOrder(sum.Labels))
	return NewObjective(b, int(sum.MaxIndex), lambda, bias)
}

// problems is the data's label order and the number of problems it
// makes (one for two classes, one per class otherwise).
func problems(obj *Objective) (order []float64, K int) {
	var sum Summary
	for _, m := range obj.Backend.Meta() {
		sum.Merge(m.Rows, m.NNZ, m.MaxIndex, m.NormSq, m.Labels, m.LabelCount)
	}
	order = LabelOrder(sum.Labels)
	if K = len(order); K == 2 {
		K = 1
	}
	return order, K
}

// reference computes d's f and gradient the straightforward dense way,
// with class weights (weights[2k] positive, weights[2k+1] negative; nil
// for none) and without the rows whose fold is hold (fold nil: none).
func reference(d svmdata.Dataset, order []float64, x [][]float64, features int, lambda, bias float64,
	weights []float64, fold []uint16, hold int, loss Loss) ([]float64, [][]float64) {
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
			case SquaredHinge:
				if dd := 1 - y*z; dd > 0 {
					l, dl = dd*dd, -2*y*dd
				}
			case Logistic:
				l, dl = math.Log(1+math.Exp(-y*z)), -y/(1+math.Exp(y*z))
			case SquaredEpsilon:
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
	for _, loss := range []Loss{SquaredHinge, Logistic, SquaredEpsilon} {
		for i, st := range storages {
			// The losses share the kernels' storage paths: with -short
			// (the race detector's run) the others take ones, decimals,
			// compact float64 and 8-bit codes only.
			if testing.Short() && loss != SquaredHinge && i != 0 && i != 2 && i != 6 && i != 10 {
				continue
			}
			testKernelMatchesDenseReference(t, loss, st)
		}
	}
}

func testKernelMatchesDenseReference(t *testing.T, loss Loss, st storage) {
	for _, classes := range []int{2, 4} {
		for _, bias := range []float64{-1, 1.5} {
			for _, cv := range []bool{false, true} {
				name := fmt.Sprintf("%v/%s/classes=%d/bias=%v/weighted-cv=%v", loss, st.name(), classes, bias, cv)
				t.Run(name, func(t *testing.T) {
					rng := rand.New(rand.NewPCG(1, uint64(classes)))
					d := svmdata.Random(rng, 300, 12, classes, st.data)
					obj := objectiveOf(t, svmdata.WriteFile(t, d.Text), 5, 3, 0.01, bias, st.compact)
					obj.Loss, obj.Epsilon = loss, testEpsilon
					for _, s := range obj.Backend.(*Local).Shards {
						if s.Rows() > 0 && (s.Values != st.values || (s.Code8 != nil) != st.coded) {
							t.Fatalf("shard %d stores %v (8-bit codes: %v), want %v (%v)", s.ID, s.Values, s.Code8 != nil, st.values, st.coded)
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

// TestStoragesGiveTheSameBits: the storage a shard picks changes no bit of
// value, gradient, H·v or the diagonal, for one problem or several:
// 16-bit against 24-bit against 32-bit column ids, and 8-bit codes
// against 16-bit codes against the plain numbers.
func TestStoragesGiveTheSameBits(t *testing.T) {
	variants := []struct {
		name  string
		lower func(*limits)
		ok    func(*Shard) bool // the variant holds: the storage is the one meant
	}{
		{"default", func(*limits) {}, func(*Shard) bool { return true }},
		{"24-bit ids", func(l *limits) { l.narrowColumns = 0 }, func(s *Shard) bool { return s.Idx24 != nil && s.Idx16 == nil && s.Idx == nil }},
		{"32-bit ids", func(l *limits) { l.narrowColumns, l.mediumColumns = 0, 0 }, func(s *Shard) bool { return s.Idx != nil && s.Idx16 == nil && s.Idx24 == nil }},
		{"16-bit codes", func(l *limits) { l.maxCode8 = 0 }, func(s *Shard) bool { return s.Values == Ones || s.Code16 != nil || s.Code8 == nil }},
		{"no codes", func(l *limits) { l.maxCodes = 0 }, func(s *Shard) bool { return s.Code8 == nil && s.Code16 == nil }},
	}
	for _, st := range storages {
		if !st.compact && st.values != Ones {
			continue // the same as the compact entry's "no codes"
		}
		for _, classes := range []int{2, 3} {
			rng := rand.New(rand.NewPCG(3, uint64(classes)))
			d := svmdata.Random(rng, 400, 20, classes, st.data)
			path := svmdata.WriteFile(t, d.Text)
			K := classes
			if K == 2 {
				K = 1
			}
			x, v := make([][]float64, K), make([][]float64, K)
			for k := range x {
				x[k], v[k] = make([]float64, 21), make([]float64, 21)
				for j := range x[k] {
					x[k][j], v[k][j] = rng.NormFloat64()*0.3, rng.NormFloat64()
				}
			}
			var want []float64
			for _, vr := range variants {
				lim := defaultLimits()
				vr.lower(&lim)
				o := objectiveWith(t, path, 4, 0.01, 1, Options{Parallel: 2, Compact: true, lim: &lim})
				for _, s := range o.Backend.(*Local).Shards {
					if !vr.ok(s) {
						t.Fatalf("%s, %s: shard %d does not hold the storage meant", st.name(), vr.name, s.ID)
					}
				}
				got := storageResults(t, o, x, v)
				if want == nil {
					want = got
					continue
				}
				for i := range want {
					if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
						t.Fatalf("%s, %d classes: result %d is %v with %s, %v by default", st.data, classes, i, got[i], vr.name, want[i])
					}
				}
			}
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

// TestRangesCoverEveryLineOnce cuts a file at every possible shard count
// and checks each line lands in exactly one shard, in order.
func TestRangesCoverEveryLineOnce(t *testing.T) {
	text := "1 1:1\n-1 2:1\n\n1 3:1 4:2 # long comment here\n-1\n1 5:1\n-1 6:1" // no final newline
	path := svmdata.WriteFile(t, text)
	for n := 1; n <= len(text)+3; n++ {
		shards, err := Load(path, Layout(int64(len(text)), n), Options{Parallel: 2})
		if err != nil {
			t.Fatal(err)
		}
		rows := 0
		var cols []uint32
		for _, s := range shards {
			rows += s.Rows()
			for i := 0; i < s.Rows(); i++ {
				for q := s.RowPtr[i]; q < s.RowPtr[i+1]; q++ {
					cols = append(cols, s.Cols.Slice()[s.col(int(q))])
				}
			}
		}
		if rows != 6 || fmt.Sprint(cols) != "[0 1 2 3 4 5]" {
			t.Fatalf("%d shards: %d rows, columns %v", n, rows, cols)
		}
	}
}

// TestReusedLoaderMatchesFresh loads shards of unlike kinds (labels,
// value storage, column ranges) one after another through one loader and
// checks each equals the shard a fresh loader builds from its range alone:
// the scratch a loader keeps must not leak from one shard into the next.
func TestReusedLoaderMatchesFresh(t *testing.T) {
	text := "3 1:1 7:1\n3 2:1\n" + // ones
		"-1 40000:0.3 70000:1.5\n2 5:-3.125\n" + // decimals, wide
		"1 2:0.1 3:1e-30\n1 1:2\n" + // float64
		"5 20000000:1\n-1 1:1 16777300:2\n" + // past the dense remap table
		"\n# nothing\n" + // no rows
		"1 3:0.5\n"
	path := svmdata.WriteFile(t, text)
	var ranges []Range
	for i, start := 0, 0; start < len(text); i++ {
		end := start
		for n := 0; n < 2 && end < len(text); end++ {
			if text[end] == '\n' {
				n++
			}
		}
		ranges = append(ranges, Range{ID: i, Start: int64(start), End: int64(end)})
		start = end
	}
	reused, err := Load(path, ranges, Options{Parallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range ranges {
		fresh, err := Load(path, []Range{r}, Options{Parallel: 1})
		if err != nil {
			t.Fatal(err)
		}
		// Printed, so that an empty slice and nil compare equal.
		if got, want := fmt.Sprintf("%+v", *reused[i]), fmt.Sprintf("%+v", *fresh[0]); got != want {
			t.Errorf("shard %d: reused loader built\n%s\nfresh one\n%s", i, got, want)
		}
	}
	if reused[1].Values != Decimal || reused[2].Values != Float64 || reused[0].Values != Ones {
		t.Errorf("value storage %v %v %v: the fixture no longer covers the kinds", reused[0].Values, reused[1].Values, reused[2].Values)
	}
}

func TestLoadErrorNamesLine(t *testing.T) {
	text := strings.Repeat("1 1:1 2:0.5\n", 5000) + "-1 3:oops\n" + strings.Repeat("1 1:1\n", 100)
	path := svmdata.WriteFile(t, text)
	_, err := Load(path, Layout(int64(len(text)), 8), Options{Parallel: 2})
	want := path + `:5001: index 3: "oops" is not a number`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}

func TestLabelOrder(t *testing.T) {
	tests := []struct{ in, want []float64 }{
		{[]float64{-1, 1}, []float64{1, -1}},
		{[]float64{1, -1}, []float64{1, -1}},
		{[]float64{2, 1}, []float64{2, 1}},
		{[]float64{0, 1}, []float64{0, 1}},
		{[]float64{-1, 1, 2}, []float64{-1, 1, 2}},
	}
	for _, tc := range tests {
		if got := LabelOrder(tc.in); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("LabelOrder(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestLoadCheckedNoticesAChangedFile(t *testing.T) {
	path := svmdata.WriteFile(t, "1 1:1\n-1 2:1\n")
	id, err := Identify(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadChecked(path, Layout(12, 1), Options{Parallel: 1}, id); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, []byte("1 1:1\n-1 2:1\n1 3:1\n"), 0o644)
	_, err = LoadChecked(path, Layout(12, 1), Options{Parallel: 1}, id)
	if !errors.Is(err, ErrChanged) {
		t.Fatalf("got %v, want ErrChanged", err)
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
		var sc Scratch
		parts[i] = new(reduce.Partial)
		s.Eval(p, &sc, parts[i])
		cols[i] = s.Cols.Slice()
	}
	groups := reduce.Groups(cols)
	reduce := func(order []int, preSummed map[int]bool) *reduce.Sum {
		sum := &reduce.Sum{Loss: make([]float64, K), BiasGrad: make([]float64, K), Grad: make([][]float64, K)}
		for k := range sum.Grad {
			sum.Grad[k] = make([]float64, obj.Features)
		}
		r := reduce.NewReducer(cols)
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
					s.EvalHess(p, new(Scratch), parts[i])
				} else {
					s.Eval(p, new(Scratch), parts[i])
				}
			}
			newSum := func() *reduce.Sum {
				sum := &reduce.Sum{Loss: make([]float64, K), BiasGrad: make([]float64, K), Grad: make([][]float64, K), Hess: make([]float64, len(parts[0].Hess))}
				for k := range sum.Grad {
					sum.Grad[k] = make([]float64, obj.Features)
				}
				return sum
			}
			got := newSum()
			r := reduce.NewReducer(cols)
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

// TestInlineLoopsMatchCalls: the binary kernels write a row's margin and
// gradient terms inline instead of calling dot and axpy; they must give,
// to the bit, what the calls give (the same margins in every kernel), on
// rows long enough to use every branch of the unrolled loop.
func TestInlineLoopsMatchCalls(t *testing.T) {
	for _, st := range storages {
		for _, bias := range []float64{-1, 1.5} {
			t.Run(fmt.Sprintf("%s/bias=%v", st.name(), bias), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(7, 1))
				d := svmdata.Random(rng, 200, 40, 2, st.data)
				obj := objectiveOf(t, svmdata.WriteFile(t, d.Text), 3, 2, 0.01, bias, st.compact)
				p, v := &Point{Bias: bias, Weights: []float64{0.7, 1.9}}, &Point{Bias: bias}
				for _, pt := range []*Point{p, v} {
					pt.W = [][]float64{make([]float64, obj.Dim())}
					for j := range pt.W[0] {
						pt.W[0][j] = rng.NormFloat64() * 0.2
					}
					pt.WBias = []float64{rng.NormFloat64()}
				}
				var sc Scratch
				var ev, hv reduce.Partial
				for _, s := range obj.Backend.(*Local).Shards {
					s.Eval(p, &sc, &ev)
					s.HessVec(p, v, &sc, &hv)
					wl := slices.Clone(s.gather(p, &sc))
					vl := slices.Clone(s.gather(v, &sc))
					r := s.rowsFor(p, 0)
					g, h := make([]float64, len(wl)), make([]float64, len(wl))
					var want [3]float64
					if s.Idx16 != nil {
						want = viaCalls(s, s.Idx16, &r, wl, vl, g, h, bias, p.WBias[0], v.WBias[0])
					} else {
						want = viaCalls(s, s.Idx, &r, wl, vl, g, h, bias, p.WBias[0], v.WBias[0])
					}
					got := []float64{ev.Loss[0], ev.BiasGrad[0], hv.BiasGrad[0]}
					got = append(append(got, ev.Grad...), hv.Grad...)
					exp := append(append(want[:], g...), h...)
					for i := range exp {
						if math.Float64bits(got[i]) != math.Float64bits(exp[i]) {
							t.Fatalf("shard %d (%v): result %d is %v inline, %v through dot and axpy", s.ID, s.Values, i, got[i], exp[i])
						}
					}
				}
			})
		}
	}
}

// viaCalls is the loss, bias gradient and bias Hessian-vector term, with
// the gradient in g and H v in h, found one row at a time through dot
// and axpy over the values as plain slices (codes looked up first).
func viaCalls[I plainID](s *Shard, idx []I, r *rows, wl, vl, g, h []float64, bias, wb, vb float64) [3]float64 {
	switch {
	case s.Values == Ones: // dot and axpy over values of 1 are dotOnes and addOnes, bit for bit
		ones := make([]float64, len(idx))
		for q := range ones {
			ones[q] = 1
		}
		return rowsViaCalls(s, idx, ones, 1, r, wl, vl, g, h, bias, wb, vb)
	case s.Code8 != nil || s.Code16 != nil:
		nums := make([]float64, len(idx))
		for q := range nums {
			nums[q] = s.number(q)
		}
		return rowsViaCalls(s, idx, nums, s.Scale, r, wl, vl, g, h, bias, wb, vb)
	case s.Val32 != nil:
		return rowsViaCalls(s, idx, s.Val32, 1, r, wl, vl, g, h, bias, wb, vb)
	case s.Mant != nil:
		return rowsViaCalls(s, idx, s.Mant, s.Scale, r, wl, vl, g, h, bias, wb, vb)
	default:
		return rowsViaCalls(s, idx, s.Val64, 1, r, wl, vl, g, h, bias, wb, vb)
	}
}

// plainID are the column ids the reference loops below index with.
type plainID interface{ uint16 | uint32 }

// dot is sum_q val[q] w[idx[q]] with four sums, as the kernels add them.
func dot[V float32 | float64 | int32, I plainID](w []float64, idx []I, val []V) float64 {
	val = val[:len(idx)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(idx); i += 4 {
		s0 += float64(val[i]) * w[idx[i]]
		s1 += float64(val[i+1]) * w[idx[i+1]]
		s2 += float64(val[i+2]) * w[idx[i+2]]
		s3 += float64(val[i+3]) * w[idx[i+3]]
	}
	for ; i < len(idx); i++ {
		s0 += float64(val[i]) * w[idx[i]]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpy is g[idx[q]] += c val[q].
func axpy[V float32 | float64 | int32, I plainID](g []float64, idx []I, val []V, c float64) {
	for q, j := range idx {
		g[j] += c * float64(val[q])
	}
}

func rowsViaCalls[V float32 | float64 | int32, I plainID](s *Shard, idx []I, val []V, scale float64, r *rows, wl, vl, g, h []float64, bias, wb, vb float64) (out [3]float64) {
	inv := 1 / scale
	for i := 0; i < s.Rows(); i++ {
		a, b := s.RowPtr[i], s.RowPtr[i+1]
		row, x := idx[a:b], val[a:b]
		z := dot(wl, row, x) * inv
		if bias >= 0 {
			z += bias * wb
		}
		sd := r.side(s.Class[i]) & 1
		y, w := signs[sd], r.w[sd]
		d := 1 - y*z
		if d <= 0 {
			continue
		}
		out[0] += w * d * d
		c := -2 * w * y * d
		axpy(g, row, x, c*inv)
		tv := dot(vl, row, x) * inv
		if bias >= 0 {
			tv += bias * vb
		}
		tv *= w
		axpy(h, row, x, tv*inv)
		if bias >= 0 {
			out[1] += c * bias
			out[2] += tv * bias
		}
	}
	return out
}

// TestDiagAtZero: the diagonal of the Hessian at 0, which methods start
// from (train asks for it with the pass at 0), is the closed form
// lambda + (2/m) sum_i a_ij^2 over the parsed rows (every row is active at
// 0), for every value storage, with and without a bias feature.
func TestDiagAtZero(t *testing.T) {
	const lambda = 0.01
	for _, st := range storages {
		values := st.name()
		for _, bias := range []float64{-1, 1.5} {
			rng := rand.New(rand.NewPCG(3, 4))
			d := svmdata.Random(rng, 200, 30, 2, st.data)
			obj := objectiveOf(t, svmdata.WriteFile(t, d.Text), 5, 2, lambda, bias, st.compact)
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

// TestCompactAfterLoad: Compact on loaded shards gives the storage that
// compacting as they are built gives, field for field (the object store's
// path compacts after reading, Load's while building).
func TestCompactAfterLoad(t *testing.T) {
	for _, st := range storages {
		d := svmdata.Random(rand.New(rand.NewPCG(5, 6)), 300, 12, 3, st.data)
		path, ranges := svmdata.WriteFile(t, d.Text), Layout(int64(len(d.Text)), 4)
		after, err := Load(path, ranges, Options{Parallel: 2})
		if err != nil {
			t.Fatal(err)
		}
		Compact(after)
		built, err := Load(path, ranges, Options{Parallel: 2, Compact: true})
		if err != nil {
			t.Fatal(err)
		}
		for i := range built {
			if got, want := fmt.Sprintf("%+v", *after[i]), fmt.Sprintf("%+v", *built[i]); got != want {
				t.Errorf("%s, shard %d: compacted after loading\n%s\nwhile loading\n%s", st.data, i, got, want)
			}
		}
	}
}

// TestHeldFollowsShards: building shards adds their bytes to the count
// the collector's tuning uses, and their collection takes them back.
// (Shards of earlier tests may be collected meanwhile: the count only
// falls by them.)
func TestHeldFollowsShards(t *testing.T) {
	d := svmdata.Random(rand.New(rand.NewPCG(8, 9)), 2000, 50, 2, "f64-few")
	path := svmdata.WriteFile(t, d.Text)
	before := heldNow()
	shards, err := Load(path, Layout(int64(len(d.Text)), 4), Options{Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	bytes := 0
	for _, s := range shards {
		bytes += s.Bytes()
	}
	if got := heldNow(); got < int64(bytes) {
		t.Fatalf("held is %d with shards of %d bytes alive", got, bytes)
	}
	// Compact takes what it saves off the count (and the cleanups give
	// back only what is left).
	plainHeld, compactBefore := heldNow(), compactNow()
	Compact(shards)
	saved, compacted := bytes, 0
	for _, s := range shards {
		saved -= s.Bytes()
		if s.Compacted() {
			compacted += s.Bytes()
		}
	}
	if saved <= 0 || compacted == 0 {
		t.Fatal("Compact saved nothing: the test shows nothing")
	}
	if got := heldNow(); got > plainHeld-int64(saved) {
		t.Fatalf("held is %d after Compact saved %d of %d", got, saved, plainHeld)
	}
	if got := compactNow(); got < compactBefore+int64(compacted) {
		t.Fatalf("compact shards of %d bytes counted as %d (%d before)", compacted, got, compactBefore)
	}
	// The shards are unreachable from here on.
	gcwait.Until(t, func() bool { return heldNow() <= before && compactNow() <= compactBefore }, func() string {
		return fmt.Sprintf("held is %d (compact %d) after the shards went, %d (%d) before", heldNow(), compactNow(), before, compactBefore)
	})
}

func heldNow() int64    { all, _ := memory.Held(); return all }
func compactNow() int64 { _, compact := memory.Held(); return compact }

// TestCoder: codes number distinct values by their bits in order of first
// appearance, whatever the collisions in the hash table (tens of
// thousands of values in it), and the limit is exact: one value more and
// coding stops.
func TestCoder(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 11))
	distinct := make([]float64, 40000) // a few repeat
	for i := range distinct {
		distinct[i] = math.Round(rng.NormFloat64()*1e6) / 1e6
	}
	distinct[0], distinct[1] = 0, math.Copysign(0, -1) // equal, but not in bits
	vals := make([]float64, 200000)
	for q := range vals {
		vals[q] = distinct[rng.IntN(len(distinct))]
	}
	vals[0], vals[1] = distinct[0], distinct[1]
	var c coder
	c.reset(len(distinct))
	seen := map[uint64]uint16{}
	for q, v := range vals {
		code, ok := c.code(v)
		if !ok {
			t.Fatalf("value %d refused below the limit", q)
		}
		want, ok := seen[math.Float64bits(v)]
		if !ok {
			want = uint16(len(seen))
			seen[math.Float64bits(v)] = want
		}
		if code != want || math.Float64bits(c.table[code]) != math.Float64bits(v) {
			t.Fatalf("value %d (%v): code %d, want %d (table holds %v)", q, v, code, want, c.table[code])
		}
	}
	c.reset(len(seen) - 1)
	for q, v := range vals {
		if _, ok := c.code(v); !ok {
			if len(c.table) != len(seen)-1 {
				t.Fatalf("refused value %d with %d codes given, limit %d", q, len(c.table), len(seen)-1)
			}
			return
		}
	}
	t.Fatal("a limit below the distinct values was never reached")
}

// TestWideShardIDs: a compact shard with more than 65,536 columns keeps
// three-byte ids, every byte of them used, and evaluates to the bits of
// four-byte ids.
func TestWideShardIDs(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 13))
	var b strings.Builder
	for i := 0; i < 1500; i++ {
		b.WriteString([]string{"+1", "-1"}[rng.IntN(2)])
		for j := 1 + rng.IntN(3); j < 150000; j += 1 + rng.IntN(3000) {
			fmt.Fprintf(&b, " %d:%.3f", j, rng.NormFloat64())
		}
		b.WriteString("\n")
	}
	path := svmdata.WriteFile(t, b.String())
	wide := objectiveOf(t, path, 1, 1, 0.01, 1, true)
	x, v := [][]float64{make([]float64, wide.Dim())}, [][]float64{make([]float64, wide.Dim())}
	for j := range x[0] {
		x[0][j], v[0][j] = rng.NormFloat64()*0.05, rng.NormFloat64()
	}
	s := wide.Backend.(*Local).Shards[0]
	if s.Idx24 == nil || s.Cols.Len() <= 1<<16 {
		t.Fatalf("%d columns in 24-bit ids: %v", s.Cols.Len(), s.Idx24 != nil)
	}
	widest := objectiveFor(t, path, 1, 1, 0.01, 1) // not compact
	if s := widest.Backend.(*Local).Shards[0]; s.Idx == nil {
		t.Fatal("no 32-bit ids")
	}
	// Compacting after the load gives the same ids (the object store's path).
	after := &Shard{Idx: slices.Clone(widest.Backend.(*Local).Shards[0].Idx), Cols: s.Cols, Values: Ones}
	Compact([]*Shard{after})
	if after.Idx != nil || !slices.Equal(after.Idx24, s.Idx24) || cap(after.Idx24) <= len(after.Idx24) {
		t.Fatal("Compact after loading gave other ids")
	}
	for q := range s.NNZ() {
		if s.col(q) != int(widest.Backend.(*Local).Shards[0].Idx[q]) {
			t.Fatalf("nonzero %d: column %d in three bytes, %d in four", q, s.col(q), widest.Backend.(*Local).Shards[0].Idx[q])
		}
	}
	got, want := storageResults(t, wide, x, v), storageResults(t, widest, x, v)
	for i := range want {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			t.Fatalf("result %d is %v with 24-bit ids, %v with 32-bit", i, got[i], want[i])
		}
	}
}

// TestLayoutTiles: ranges tile the file in order, as many as asked for (or
// bytes, if fewer), and an automatic count past one group is a whole
// number of groups.
func TestLayoutTiles(t *testing.T) {
	for _, c := range []struct {
		size int64
		n    int
	}{{0, 0}, {1, 0}, {100, 0}, {100, 16}, {5, 9}, {2329875, 0}, {3478238, 0}, {871587, 0}, {134603135, 0}, {10 << 30, 0}, {4500 << 20, 0}, {1 << 20, 3}} {
		r := Layout(c.size, c.n)
		want := int64(c.n)
		if c.n > 0 && want > c.size {
			want = c.size
		}
		if c.n > 0 && int64(len(r)) != max(want, 1) {
			t.Errorf("size %d, %d asked: %d ranges", c.size, c.n, len(r))
		}
		if c.n == 0 && len(r) > reduce.GroupSize && len(r)%reduce.GroupSize != 0 {
			t.Errorf("size %d: %d ranges, not whole groups", c.size, len(r))
		}
		end := int64(0)
		for i, g := range r {
			if g.ID != i || g.Start != end || g.End < g.Start || (g.End == g.Start && c.size > 0) {
				t.Fatalf("size %d: range %d is %+v after %d", c.size, i, g, end)
			}
			end = g.End
		}
		if end != c.size {
			t.Errorf("size %d: ranges end at %d", c.size, end)
		}
	}
}

// TestSparseRowsKeepTheBits: a multi-class row's gradient taken down its
// list of active problems gives the bits of the loop over every problem,
// at points where rows are active in few problems and in many.
func TestSparseRowsKeepTheBits(t *testing.T) {
	for _, st := range []storage{storages[0], storages[1], storages[2]} {
		for _, scale := range []float64{0.1, 3} {
			t.Run(fmt.Sprintf("%s/scale=%v", st.name(), scale), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(7, 8))
				d := svmdata.Random(rng, 400, 30, 9, st.data)
				obj := objectiveOf(t, svmdata.WriteFile(t, d.Text), 4, 2, 0.01, 1, st.compact)
				_, K := problems(obj)
				x := make([][]float64, K)
				for k := range x {
					x[k] = make([]float64, obj.Dim())
					for j := range x[k] {
						x[k][j] = rng.NormFloat64() * scale
					}
				}
				eval := func(dense bool) ([]float64, [][]float64) {
					local := obj.Backend.(*Local)
					local.denseRows, local.scratch = dense, nil
					f, g := make([]float64, K), make([][]float64, K)
					for k := range g {
						g[k] = make([]float64, obj.Dim())
					}
					if err := obj.Eval(x, f, g); err != nil {
						t.Fatal(err)
					}
					return f, g
				}
				f, g := eval(false)
				wf, wg := eval(true)
				for k := range f {
					if math.Float64bits(f[k]) != math.Float64bits(wf[k]) {
						t.Errorf("f[%d] = %v, want %v", k, f[k], wf[k])
					}
					for j := range g[k] {
						if math.Float64bits(g[k][j]) != math.Float64bits(wg[k][j]) {
							t.Errorf("g[%d][%d] = %v, want %v", k, j, g[k][j], wg[k][j])
						}
					}
				}
			})
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
	if len(local.free) == 0 {
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
