package shard

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	"github.com/klauspost/compress/gzip"
)

func TestSystemAvailable(t *testing.T) {
	const meminfo = "MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:   2000000 kB\n"
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	for _, tc := range []struct {
		name  string
		files fstest.MapFS
		want  int64
	}{
		{"nothing to read", fstest.MapFS{}, -1},
		{"meminfo", fstest.MapFS{"proc/meminfo": file(meminfo)}, 2000000 << 10},
		{"meminfo without MemAvailable", fstest.MapFS{"proc/meminfo": file("MemTotal: 5 kB\n")}, -1},
		{"cgroup v2 under the machine's", fstest.MapFS{
			"proc/meminfo":                 file(meminfo),
			"sys/fs/cgroup/memory.max":     file("1000000000\n"),
			"sys/fs/cgroup/memory.current": file("600000000\n"),
			"sys/fs/cgroup/memory.stat":    file("anon 400000000\nfile 200000000\ninactive_file 150000000\nactive_file 50000000\n"),
		}, 1000000000 - 400000000},
		{"cgroup v2 without a limit", fstest.MapFS{
			"proc/meminfo":                 file(meminfo),
			"sys/fs/cgroup/memory.max":     file("max\n"),
			"sys/fs/cgroup/memory.current": file("600000000\n"),
		}, 2000000 << 10},
		{"cgroup v2 over its limit", fstest.MapFS{
			"sys/fs/cgroup/memory.max":     file("1000\n"),
			"sys/fs/cgroup/memory.current": file("5000\n"),
		}, 0},
		{"cgroup v2 above the machine's", fstest.MapFS{
			"proc/meminfo":                 file(meminfo),
			"sys/fs/cgroup/memory.max":     file("100000000000\n"),
			"sys/fs/cgroup/memory.current": file("0\n"),
		}, 2000000 << 10},
		{"cgroup v1", fstest.MapFS{
			"proc/meminfo": file(meminfo),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("1000000000\n"),
			"sys/fs/cgroup/memory/memory.usage_in_bytes": file("300000000\n"),
			"sys/fs/cgroup/memory/memory.stat":           file("cache 100\ninactive_file 7\ntotal_inactive_file 60000000\ntotal_active_file 40000000\n"),
		}, 1000000000 - 200000000},
		{"cgroup v1 without a limit", fstest.MapFS{
			"proc/meminfo": file(meminfo),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("9223372036854771712\n"),
			"sys/fs/cgroup/memory/memory.usage_in_bytes": file("300000000\n"),
		}, 2000000 << 10},
		{"cgroup v2, the process's group and the one above", fstest.MapFS{
			"proc/self/cgroup":                   file("0::/a/b\n"),
			"sys/fs/cgroup/memory.max":           file("max\n"),
			"sys/fs/cgroup/a/memory.max":         file("1000000\n"),
			"sys/fs/cgroup/a/memory.current":     file("400000\n"),
			"sys/fs/cgroup/a/b/memory.max":       file("max\n"),
			"sys/fs/cgroup/a/b/memory.current":   file("300000\n"),
			"sys/fs/cgroup/other/memory.max":     file("10\n"),
			"sys/fs/cgroup/other/memory.current": file("0\n"),
		}, 600000},
		{"cgroup v2, the tighter of two", fstest.MapFS{
			"proc/self/cgroup":                 file("0::/a/b\n"),
			"sys/fs/cgroup/a/memory.max":       file("1000000\n"),
			"sys/fs/cgroup/a/memory.current":   file("400000\n"),
			"sys/fs/cgroup/a/b/memory.max":     file("500000\n"),
			"sys/fs/cgroup/a/b/memory.current": file("300000\n"),
		}, 200000},
		{"cgroup v2 path out of its mount", fstest.MapFS{
			"proc/self/cgroup":             file("0::/../../x\n"),
			"sys/fs/cgroup/memory.max":     file("1000\n"),
			"sys/fs/cgroup/memory.current": file("0\n"),
			"x/memory.max":                 file("1\n"),
			"x/memory.current":             file("0\n"),
		}, 1000},
		{"cgroup v1, the memory hierarchy's group", fstest.MapFS{
			"proc/self/cgroup":                               file("5:cpu,cpuacct:/c\n4:memory:/p/q\n0::/\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes":     file("9223372036854771712\n"),
			"sys/fs/cgroup/memory/memory.usage_in_bytes":     file("900000\n"),
			"sys/fs/cgroup/memory/p/q/memory.limit_in_bytes": file("2000000\n"),
			"sys/fs/cgroup/memory/p/q/memory.usage_in_bytes": file("500000\n"),
			"sys/fs/cgroup/memory/c/memory.limit_in_bytes":   file("1\n"),
			"sys/fs/cgroup/memory/c/memory.usage_in_bytes":   file("0\n"),
		}, 1500000},
		{"garbled", fstest.MapFS{
			"proc/meminfo":                 file("MemAvailable: lots kB\n"),
			"sys/fs/cgroup/memory.max":     file("-1\n"),
			"sys/fs/cgroup/memory.current": file("0\n"),
		}, -1},
	} {
		if got := systemAvailable(tc.files); got != tc.want {
			t.Errorf("%s: %d bytes available, want %d", tc.name, got, tc.want)
		}
	}
	if got := Available(); got == 0 || got < -1 {
		t.Errorf("this machine: %d bytes available", got)
	}
}

// TestGroupLimit: the limit TuneGC scales into Go's soft limit is the
// least of the process's groups' and those above them, in either version.
func TestGroupLimit(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	for _, tc := range []struct {
		name  string
		files fstest.MapFS
		want  int64
	}{
		{"no groups", fstest.MapFS{"proc/meminfo": file("MemAvailable: 5 kB\n")}, -1},
		{"cgroup v2 without a limit", fstest.MapFS{"sys/fs/cgroup/memory.max": file("max\n")}, -1},
		{"cgroup v1 without a limit", fstest.MapFS{"sys/fs/cgroup/memory/memory.limit_in_bytes": file("9223372036854771712\n")}, -1},
		{"cgroup v2, the group above the process's", fstest.MapFS{
			"proc/self/cgroup":               file("0::/a/b\n"),
			"sys/fs/cgroup/memory.max":       file("max\n"),
			"sys/fs/cgroup/a/memory.max":     file("1000000\n"),
			"sys/fs/cgroup/a/b/memory.max":   file("max\n"),
			"sys/fs/cgroup/other/memory.max": file("10\n"),
		}, 1000000},
		{"cgroup v1, the memory hierarchy's group", fstest.MapFS{
			"proc/self/cgroup":                               file("5:cpu,cpuacct:/c\n4:memory:/p/q\n0::/\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes":     file("9223372036854771712\n"),
			"sys/fs/cgroup/memory/p/q/memory.limit_in_bytes": file("2000000\n"),
			"sys/fs/cgroup/memory/c/memory.limit_in_bytes":   file("1\n"),
		}, 2000000},
		{"garbled", fstest.MapFS{"sys/fs/cgroup/memory.max": file("-1\n")}, -1},
	} {
		if got := groupLimit(tc.files); got != tc.want {
			t.Errorf("%s: limit %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestCached: answers are reused until they are ttl old.
func TestCached(t *testing.T) {
	calls := 0
	f := cached(func() int64 { calls++; return int64(calls) }, 50*time.Millisecond)
	if a, b := f(), f(); a != 1 || b != 1 || calls != 1 {
		t.Fatalf("two calls at once: %d, %d, %d reads", a, b, calls)
	}
	for deadline := time.Now().Add(5 * time.Second); f() == 1; {
		if time.Now().After(deadline) {
			t.Fatal("the answer is never read again")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if calls != 2 {
		t.Fatalf("%d reads after the answer aged once", calls)
	}
}

// TestFitSwitches follows the decision: four ranges of 100 text bytes
// whose shards take 50 bytes each, so after the first shard the rest
// need 150 bytes, after the second 100.
func TestFitSwitches(t *testing.T) {
	ranges := []Range{{0, 0, 100}, {1, 100, 200}, {2, 200, 300}, {3, 300, 400}}
	s := &Shard{RowPtr: make([]uint32, 50/4), LabelOf: make([]int32, 1)} // 4*12 + 4 bytes
	if s.Bytes() != 52 {
		t.Fatalf("the test shard takes %d bytes", s.Bytes())
	}
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
		f := newFit(Options{Available: func() int64 { calls++; return tc.avail[min(calls, len(tc.avail))-1] }}, ranges)
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
	if n := pending.Load(); n != 0 {
		t.Errorf("%d bytes pending after every load ended", n)
	}
	if (*fit)(nil).on() || newFit(Options{}, ranges) != nil || newFit(Options{Compact: true, Available: Available}, ranges) != nil {
		t.Error("no Available, or Compact, yet a decision")
	}
}

// TestFitsShareTheProcess: two loads at once, each of which would fit
// alone, go compact together; a load that failed part way leaves nothing
// pending.
func TestFitsShareTheProcess(t *testing.T) {
	ranges := []Range{{0, 0, 100}, {1, 100, 200}, {2, 200, 300}, {3, 300, 400}}
	s := &Shard{RowPtr: make([]uint32, 50/4), LabelOf: make([]int32, 1)} // 52 bytes
	avail := func() int64 { return 300 }                                 // 2/3: 200
	a, b := newFit(Options{Available: avail}, ranges), newFit(Options{Available: avail}, ranges)
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
	if n := pending.Load(); n != 0 {
		t.Errorf("%d bytes pending after both loads ended", n)
	}
}

// TestLoadCompactsWhatWouldNotFit: when memory runs short the load
// compacts every shard, those built before the switch included, as
// Options.Compact would have, on plain and compressed files; with room
// it builds them plain; and the results keep their bits.
func TestLoadCompactsWhatWouldNotFit(t *testing.T) {
	d := randomData(rand.New(rand.NewPCG(9, 10)), 600, 30, 2, "dec-few")
	plainPath := writeFile(t, d.text)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(d.text))
	zw.Close()
	gzPath := filepath.Join(t.TempDir(), "data.gz")
	if err := os.WriteFile(gzPath, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ranges := Layout(int64(len(d.text)), 6)
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
