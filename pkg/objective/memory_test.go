package objective

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
	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/shard"
)

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
	ranges := input.Layout(int64(len(d.Text)), 6)
	load := func(path string, opt shard.Options) []*shard.Shard {
		t.Helper()
		shards, err := shard.Load(path, ranges, opt)
		if err != nil {
			t.Fatal(err)
		}
		return shards
	}
	same := func(what string, got, want []*shard.Shard) {
		t.Helper()
		for i := range want {
			if g, w := fmt.Sprintf("%+v", *got[i]), fmt.Sprintf("%+v", *want[i]); g != w {
				t.Fatalf("%s, shard %d:\n%s\nwant\n%s", what, i, g, w)
			}
		}
	}
	plain := load(plainPath, shard.Options{Parallel: 1})
	compact := load(plainPath, shard.Options{Parallel: 1, Compact: true})
	if compact[0].Code8 == nil && compact[0].Code16 == nil {
		t.Fatal("the data does not make codes: the test shows nothing")
	}
	for _, path := range []string{plainPath, gzPath} {
		name := filepath.Base(path)
		for _, parallel := range []int{1, 3} {
			same(name+", room for all", load(path, shard.Options{Parallel: parallel, Available: func() int64 { return 1 << 40 }}), plain)
			same(name+", no room", load(path, shard.Options{Parallel: parallel, Available: func() int64 { return 0 }}), compact)
			calls := 0
			late := func() int64 {
				if calls++; calls < 3 {
					return 1 << 40
				}
				return 0
			}
			same(name+", room for two", load(path, shard.Options{Parallel: parallel, Available: late}), compact)
		}
	}

	// Shards read one at a time (from an object store's objects).
	texts := map[int][]byte{}
	if err := input.Text(plainPath, ranges, func(r input.Range, text []byte) error { texts[r.ID] = bytes.Clone(text); return nil }); err != nil {
		t.Fatal(err)
	}
	each := func(avail func() int64) []*shard.Shard {
		t.Helper()
		shards, err := shard.ReadEach(ranges, shard.Options{Available: avail}, func(r input.Range) (*shard.Shard, error) {
			return shard.Read(bytes.NewReader(texts[r.ID]), "object", r.ID)
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

	objective := func(shards []*shard.Shard) *Objective {
		b := NewLocal(shards, 1)
		var sum shard.Summary
		for _, m := range b.Meta() {
			sum.Merge(m.Rows, m.NNZ, m.MaxIndex, m.NormSq, m.Labels, m.LabelCount)
		}
		b.SetClasses(shard.LabelOrder(sum.Labels))
		return New(b, int(sum.MaxIndex), 0.01, 1)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	x, v := [][]float64{make([]float64, 31)}, [][]float64{make([]float64, 31)}
	for j := range x[0] {
		x[0][j], v[0][j] = rng.NormFloat64()*0.3, rng.NormFloat64()
	}
	want := storageResults(t, objective(plain), x, v)
	got := storageResults(t, objective(load(plainPath, shard.Options{Parallel: 2, Available: func() int64 { return 0 }})), x, v)
	for i := range want {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			t.Fatalf("result %d is %v from shards compacted for memory, %v from plain ones", i, got[i], want[i])
		}
	}
}
