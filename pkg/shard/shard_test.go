package shard

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/osgm-svm/osgm/internal/gcwait"
	"github.com/osgm-svm/osgm/internal/svmdata"
	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/memory"
	"github.com/osgm-svm/osgm/pkg/reduce"
)

// TestStoragesGiveTheSameBits: the storage a shard picks changes no bit of
// value, gradient, H·v or the diagonal, for one problem or several:
// 16-bit against 24-bit against 32-bit column ids, and 8-bit codes
// against 16-bit codes against the plain numbers.
func TestStoragesGiveTheSameBits(t *testing.T) {
	t.Parallel()
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
	for _, st := range svmdata.Storages {
		if !st.Compact && st.Values != Ones.String() {
			continue // the same as the compact entry's "no codes"
		}
		for _, classes := range []int{2, 3} {
			rng := rand.New(rand.NewPCG(3, uint64(classes)))
			d := svmdata.Random(rng, 400, 20, classes, st.Data)
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
				opt := Options{Parallel: 2, Compact: true, limits: defaultLimits()}
				vr.lower(&opt.limits)
				shards := loaded(t, path, 4, opt)
				for _, s := range shards {
					if !vr.ok(s) {
						t.Fatalf("%s, %s: shard %d does not hold the storage meant", st.Name(), vr.name, s.ID)
					}
				}
				got := passResults(shards, x, v, 1)
				if want == nil {
					want = got
					continue
				}
				for i := range want {
					if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
						t.Fatalf("%s, %d classes: result %d is %v with %s, %v by default", st.Data, classes, i, got[i], vr.name, want[i])
					}
				}
			}
		}
	}
}

// loaded loads path into nShards shards, their classes set in LIBLINEAR's
// order, for the tests below the objective.
func loaded(t testing.TB, path string, nShards int, opt Options) []*Shard {
	t.Helper()
	info, err := input.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	shards, err := Load(path, input.Layout(info.Size, nShards), opt)
	if err != nil {
		t.Fatal(err)
	}
	var sum Summary
	for _, s := range shards {
		m := MetaOf(s)
		sum.Merge(m.Rows, m.NNZ, m.MaxIndex, m.NormSq, m.Labels, m.LabelCount)
	}
	for _, s := range shards {
		s.SetClasses(LabelOrder(sum.Labels))
	}
	return shards
}

// passResults lists each shard's partial sums, in shard order, of the
// value and gradient and of H·v at x (H along v), vectors of features
// then the bias weight, and for one problem of an EvalDiag pass and, on
// narrow data (newton-full's), an EvalHess pass.
func passResults(shards []*Shard, x, v [][]float64, bias float64) []float64 {
	features := len(x[0]) - 1
	p, vp := NewPoint(x, bias, features), NewPoint(v, bias, features)
	ops := []PassKind{PassEval, PassHessVec}
	if len(x) == 1 {
		ops = append(ops, PassEvalDiag)
	}
	if len(x) == 1 && len(x[0]) <= 100 {
		ops = append(ops, PassEvalHess)
	}
	var out []float64
	for _, s := range shards {
		for _, op := range ops {
			var part reduce.Partial
			s.Pass(op, p, vp, new(Scratch), new(Activity), &part)
			out = slices.Concat(out, part.Loss, part.Grad, part.BiasGrad, part.Hess)
		}
	}
	return out
}

// TestRangesCoverEveryLineOnce cuts a file at every possible shard count
// and checks each line lands in exactly one shard, in order.
func TestRangesCoverEveryLineOnce(t *testing.T) {
	text := "1 1:1\n-1 2:1\n\n1 3:1 4:2 # long comment here\n-1\n1 5:1\n-1 6:1" // no final newline
	path := svmdata.WriteFile(t, text)
	for n := 1; n <= len(text)+3; n++ {
		shards, err := Load(path, input.Layout(int64(len(text)), n), Options{Parallel: 2})
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
	var ranges []input.Range
	for i, start := 0, 0; start < len(text); i++ {
		end := start
		for n := 0; n < 2 && end < len(text); end++ {
			if text[end] == '\n' {
				n++
			}
		}
		ranges = append(ranges, input.Range{ID: i, Start: int64(start), End: int64(end)})
		start = end
	}
	reused, err := Load(path, ranges, Options{Parallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range ranges {
		fresh, err := Load(path, []input.Range{r}, Options{Parallel: 1})
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
	_, err := Load(path, input.Layout(int64(len(text)), 8), Options{Parallel: 2})
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
	id, err := input.Identify(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadChecked(path, input.Layout(12, 1), Options{Parallel: 1}, id); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, []byte("1 1:1\n-1 2:1\n1 3:1\n"), 0o644)
	_, err = LoadChecked(path, input.Layout(12, 1), Options{Parallel: 1}, id)
	if !errors.Is(err, input.ErrChanged) {
		t.Fatalf("got %v, want input.ErrChanged", err)
	}
}

// TestInlineLoopsMatchCalls: the binary kernels write a row's margin and
// gradient terms inline instead of calling dot and axpy; they must give,
// to the bit, what the calls give (the same margins in every kernel), on
// rows long enough to use every branch of the unrolled loop.
func TestInlineLoopsMatchCalls(t *testing.T) {
	for _, st := range svmdata.Storages {
		for _, bias := range []float64{-1, 1.5} {
			t.Run(fmt.Sprintf("%s/bias=%v", st.Name(), bias), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(7, 1))
				d := svmdata.Random(rng, 200, 40, 2, st.Data)
				shards := loaded(t, svmdata.WriteFile(t, d.Text), 3, Options{Parallel: 2, Compact: st.Compact})
				p, v := &Point{Terms: Terms{Bias: bias, Weights: []float64{0.7, 1.9}}}, &Point{Terms: Terms{Bias: bias}}
				for _, pt := range []*Point{p, v} {
					pt.W = [][]float64{make([]float64, d.N)}
					for j := range pt.W[0] {
						pt.W[0][j] = rng.NormFloat64() * 0.2
					}
					pt.WBias = []float64{rng.NormFloat64()}
				}
				var sc Scratch
				var ev, hv reduce.Partial
				for _, s := range shards {
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

// TestCompactAfterLoad: Compact on loaded shards gives the storage that
// compacting as they are built gives, field for field (the object store's
// path compacts after reading, Load's while building).
func TestCompactAfterLoad(t *testing.T) {
	for _, st := range svmdata.Storages {
		d := svmdata.Random(rand.New(rand.NewPCG(5, 6)), 300, 12, 3, st.Data)
		path, ranges := svmdata.WriteFile(t, d.Text), input.Layout(int64(len(d.Text)), 4)
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
				t.Errorf("%s, shard %d: compacted after loading\n%s\nwhile loading\n%s", st.Data, i, got, want)
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
	shards, err := Load(path, input.Layout(int64(len(d.Text)), 4), Options{Parallel: 2})
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
	wide := loaded(t, path, 1, Options{Parallel: 1, Compact: true})
	dim := int(wide[0].MaxIndex) + 1 // and the bias
	x, v := [][]float64{make([]float64, dim)}, [][]float64{make([]float64, dim)}
	for j := range x[0] {
		x[0][j], v[0][j] = rng.NormFloat64()*0.05, rng.NormFloat64()
	}
	s := wide[0]
	if s.Idx24 == nil || s.Cols.Len() <= 1<<16 {
		t.Fatalf("%d columns in 24-bit ids: %v", s.Cols.Len(), s.Idx24 != nil)
	}
	widest := loaded(t, path, 1, Options{Parallel: 1}) // not compact
	if s := widest[0]; s.Idx == nil {
		t.Fatal("no 32-bit ids")
	}
	// Compacting after the load gives the same ids (the object store's path).
	after := &Shard{Idx: slices.Clone(widest[0].Idx), Cols: s.Cols, Values: Ones}
	Compact([]*Shard{after})
	if after.Idx != nil || !slices.Equal(after.Idx24, s.Idx24) || cap(after.Idx24) <= len(after.Idx24) {
		t.Fatal("Compact after loading gave other ids")
	}
	for q := range s.NNZ() {
		if s.col(q) != int(widest[0].Idx[q]) {
			t.Fatalf("nonzero %d: column %d in three bytes, %d in four", q, s.col(q), widest[0].Idx[q])
		}
	}
	got, want := passResults(wide, x, v, 1), passResults(widest, x, v, 1)
	for i := range want {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			t.Fatalf("result %d is %v with 24-bit ids, %v with 32-bit", i, got[i], want[i])
		}
	}
}

// TestSparseRowsKeepTheBits: a multi-class row's gradient taken down its
// list of active problems gives the bits of the loop over every problem,
// at points where rows are active in few problems and in many.
func TestSparseRowsKeepTheBits(t *testing.T) {
	t.Parallel()
	for _, st := range []svmdata.Storage{svmdata.Storages[0], svmdata.Storages[1], svmdata.Storages[2]} {
		for _, scale := range []float64{0.1, 3} {
			t.Run(fmt.Sprintf("%s/scale=%v", st.Name(), scale), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(7, 8))
				d := svmdata.Random(rng, 400, 30, 9, st.Data)
				shards := loaded(t, svmdata.WriteFile(t, d.Text), 4, Options{Parallel: 2, Compact: st.Compact})
				const K = 9 // one problem a class
				x := make([][]float64, K)
				for k := range x {
					x[k] = make([]float64, d.N+1)
					for j := range x[k] {
						x[k][j] = rng.NormFloat64() * scale
					}
				}
				p := NewPoint(x, 1, d.N)
				for _, s := range shards {
					var sparse, dense reduce.Partial
					s.Eval(p, &Scratch{}, &sparse)
					s.Eval(p, &Scratch{allProblems: true}, &dense)
					got, want := slices.Concat(sparse.Loss, sparse.Grad, sparse.BiasGrad), slices.Concat(dense.Loss, dense.Grad, dense.BiasGrad)
					for i := range want {
						if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
							t.Fatalf("shard %d: sum %d is %v down the active problems, %v over all", s.ID, i, got[i], want[i])
						}
					}
				}
			})
		}
	}
}
