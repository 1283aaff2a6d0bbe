package shard

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/osgm-svm/osgm/internal/svmdata"
	"github.com/osgm-svm/osgm/pkg/memory"
)

// TestFitSwitches follows the decision: four ranges of 100 text bytes
// whose shards take 50 bytes each, so after the first shard the rest
// need 150 bytes, after the second 100.
func TestFitSwitches(t *testing.T) {
	ranges := []Range{{0, 0, 100}, {1, 100, 200}, {2, 200, 300}, {3, 300, 400}}
	s := &Shard{RowPtr: make([]uint32, 50/4), LabelOf: make([]int32, 1)} // 4*12 + 4 bytes
	if s.Bytes() != 52 {
		t.Fatalf("the test shard takes %d bytes", s.Bytes())
	}
	shared := &Shared{}
	for _, tc := range []struct {
		avail []int64 // answers, in turn
		after int     // shards built before the switch; 0: none
	}{
		{[]int64{-1}, 0},
		{[]int64{1 << 40}, 0},
		{[]int64{233}, 1},                          // 156 > 2/3 of 233
		{[]int64{235}, 0},                          // 156 < 2/3 of 235, then 104, 52
		{[]int64{1000, 155}, 2},                    // 104 > 2/3 of 155
		{[]int64{1000, 1000, 77, 0}, 3},            // 52 > 2/3 of 77
		{[]int64{1000, 1000, 1000, 0, 0}, 0},       // nothing left to load
		{[]int64{0, 1 << 40, 1 << 40, 1 << 40}, 1}, // once on, stays on
	} {
		calls := 0
		f := newFit(Options{Available: func() int64 { calls++; return tc.avail[min(calls, len(tc.avail))-1] }, Shared: shared}, ranges)
		switched := 0
		for i := range ranges {
			f.built(s, ranges[i].End-ranges[i].Start)
			if f.on() && switched == 0 {
				switched = i + 1
			}
		}
		f.done()
		if switched != tc.after {
			t.Errorf("available %v: compact after %d shards, want %d", tc.avail, switched, tc.after)
		}
	}
	if n := shared.pending.Load(); n != 0 {
		t.Errorf("%d bytes pending after every load ended", n)
	}
	if (*fit)(nil).on() || newFit(Options{}, ranges) != nil || newFit(Options{Compact: true, Available: memory.Available}, ranges) != nil {
		t.Error("no Available, or Compact, yet a decision")
	}
}

// TestFitSwitchesOnLargeShards: with memory to spare, a load still goes
// compact once the plain shards of the loads sharing the process would
// pass the large threshold (LargeShards), each load's estimate being
// its shards built and the rest at their rate: four shards of 52 bytes
// make 208.
func TestFitSwitchesOnLargeShards(t *testing.T) {
	ranges := []Range{{0, 0, 100}, {1, 100, 200}, {2, 200, 300}, {3, 300, 400}}
	s := &Shard{RowPtr: make([]uint32, 50/4), LabelOf: make([]int32, 1)} // 52 bytes
	plenty := func() int64 { return 1 << 40 }
	for _, tc := range []struct {
		large int64
		loads int // sharing one Shared, built in turn
		after int // shards the first load built before the switch; 0: none
	}{
		{207, 1, 1},
		{208, 1, 0},
		{415, 2, 2}, // the second load's first shard makes it 416; the first sees it at its next
		{416, 2, 0},
	} {
		shared := &Shared{}
		fits := make([]*fit, tc.loads)
		for i := range fits {
			fits[i] = newFit(Options{Available: plenty, Shared: shared}, ranges)
			fits[i].large = tc.large
		}
		switched := 0
		for r := range ranges {
			for _, f := range fits {
				f.built(s, 100)
			}
			if fits[0].on() && switched == 0 {
				switched = r + 1
			}
		}
		for _, f := range fits {
			f.done()
		}
		if switched != tc.after {
			t.Errorf("large %d, %d load(s): compact after %d shards, want %d", tc.large, tc.loads, switched, tc.after)
		}
		if n := shared.plain.Load(); n != 0 {
			t.Errorf("large %d: %d plain bytes counted after every load ended", tc.large, n)
		}
	}
}

// TestFitsShareTheProcess: two loads at once that share a Shared, each of
// which would fit alone, go compact together; loads that do not share
// one do not see each other; a load that failed part way leaves nothing
// pending.
func TestFitsShareTheProcess(t *testing.T) {
	ranges := []Range{{0, 0, 100}, {1, 100, 200}, {2, 200, 300}, {3, 300, 400}}
	s := &Shard{RowPtr: make([]uint32, 50/4), LabelOf: make([]int32, 1)} // 52 bytes
	avail := func() int64 { return 300 }                                 // 2/3: 200
	alone, other := newFit(Options{Available: avail}, ranges), newFit(Options{Available: avail}, ranges)
	alone.built(&Shard{RowPtr: make([]uint32, 50/4), LabelOf: make([]int32, 1)}, 100)
	other.built(&Shard{RowPtr: make([]uint32, 50/4), LabelOf: make([]int32, 1)}, 100)
	if alone.on() || other.on() {
		t.Fatal("loads that share nothing saw each other")
	}
	shared := &Shared{}
	a, b := newFit(Options{Available: avail, Shared: shared}, ranges), newFit(Options{Available: avail, Shared: shared}, ranges)
	a.built(s, 100) // 156 pending
	if a.on() {
		t.Fatal("one load alone went compact")
	}
	b.built(s, 100) // 312
	if !b.on() {
		t.Fatal("the second load did not see the first")
	}
	a.built(s, 100) // 104 + 156
	if !a.on() {
		t.Fatal("the first load did not see the second")
	}
	a.done()
	b.done()
	if n := shared.pending.Load(); n != 0 {
		t.Errorf("%d bytes pending after both loads ended", n)
	}
}

// TestLoadCompactsWhatWouldNotFit: when memory runs short the load
// compacts every shard, those built before the switch included, as
// Options.Compact would have, on plain and compressed files; with room
// it builds them plain; and the results keep their bits.
func TestLoadCompactsWhatWouldNotFit(t *testing.T) {
	d := svmdata.Random(rand.New(rand.NewPCG(9, 10)), 600, 30, 2, "dec-few")
	plainPath := svmdata.WriteFile(t, d.Text)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(d.Text))
	zw.Close()
	gzPath := filepath.Join(t.TempDir(), "data.gz")
	if err := os.WriteFile(gzPath, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ranges := Layout(int64(len(d.Text)), 6)
	load := func(path string, opt Options) []*Shard {
		t.Helper()
		shards, err := Load(path, ranges, opt)
		if err != nil {
			t.Fatal(err)
		}
		return shards
	}
	same := func(what string, got, want []*Shard) {
		t.Helper()
		for i := range want {
			if g, w := fmt.Sprintf("%+v", *got[i]), fmt.Sprintf("%+v", *want[i]); g != w {
				t.Fatalf("%s, shard %d:\n%s\nwant\n%s", what, i, g, w)
			}
		}
	}
	plain := load(plainPath, Options{Parallel: 1})
	compact := load(plainPath, Options{Parallel: 1, Compact: true})
	if compact[0].Code8 == nil && compact[0].Code16 == nil {
		t.Fatal("the data does not make codes: the test shows nothing")
	}
	for _, path := range []string{plainPath, gzPath} {
		name := filepath.Base(path)
		for _, parallel := range []int{1, 3} {
			same(name+", room for all", load(path, Options{Parallel: parallel, Available: func() int64 { return 1 << 40 }}), plain)
			same(name+", no room", load(path, Options{Parallel: parallel, Available: func() int64 { return 0 }}), compact)
			calls := 0
			late := func() int64 {
				if calls++; calls < 3 {
					return 1 << 40
				}
				return 0
			}
			same(name+", room for two", load(path, Options{Parallel: parallel, Available: late}), compact)
		}
	}

	// Shards read one at a time (from an object store's objects).
	texts := map[int][]byte{}
	if err := Text(plainPath, ranges, func(r Range, text []byte) error { texts[r.ID] = bytes.Clone(text); return nil }); err != nil {
		t.Fatal(err)
	}
	each := func(avail func() int64) []*Shard {
		t.Helper()
		shards, err := ReadEach(ranges, Options{Available: avail}, func(r Range) (*Shard, error) {
			return Read(bytes.NewReader(texts[r.ID]), "object", r.ID)
		})
		if err != nil {
			t.Fatal(err)
		}
		return shards
	}
	same("one at a time, room for all", each(func() int64 { return 1 << 40 }), plain)
	same("one at a time, no room", each(func() int64 { return 0 }), compact)
	calls := 0
	same("one at a time, room for two", each(func() int64 {
		if calls++; calls < 3 {
			return 1 << 40
		}
		return 0
	}), compact)

	objective := func(shards []*Shard) *Objective {
		b := NewLocal(shards, 1)
		var sum Summary
		for _, m := range b.Meta() {
			sum.Merge(m.Rows, m.NNZ, m.MaxIndex, m.NormSq, m.Labels, m.LabelCount)
		}
		b.SetClasses(LabelOrder(sum.Labels))
		return NewObjective(b, int(sum.MaxIndex), 0.01, 1)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	x, v := [][]float64{make([]float64, 31)}, [][]float64{make([]float64, 31)}
	for j := range x[0] {
		x[0][j], v[0][j] = rng.NormFloat64()*0.3, rng.NormFloat64()
	}
	want := storageResults(t, objective(plain), x, v)
	got := storageResults(t, objective(load(plainPath, Options{Parallel: 2, Available: func() int64 { return 0 }})), x, v)
	for i := range want {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			t.Fatalf("result %d is %v from shards compacted for memory, %v from plain ones", i, got[i], want[i])
		}
	}
}
