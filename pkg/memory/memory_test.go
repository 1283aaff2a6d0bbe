package memory

import (
	"runtime"
	"testing"
	"testing/fstest"
	"time"
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
		if got := GroupLimit(tc.files); got != tc.want {
			t.Errorf("%s: limit %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestCached: answers are reused until they are ttl old.
func TestCached(t *testing.T) {
	calls := 0
	clock := time.Unix(1e9, 0)
	f := cached(func() int64 { calls++; return int64(calls) }, 50*time.Millisecond, func() time.Time { return clock })
	if a, b := f(), f(); a != 1 || b != 1 || calls != 1 {
		t.Fatalf("two calls at once: %d, %d, %d reads", a, b, calls)
	}
	clock = clock.Add(49 * time.Millisecond)
	if a := f(); a != 1 || calls != 1 {
		t.Fatalf("read again before the answer aged: %d, %d reads", a, calls)
	}
	clock = clock.Add(time.Millisecond)
	if a, b := f(), f(); a != 2 || b != 2 || calls != 2 {
		t.Fatalf("after the answer aged once: %d, %d, %d reads", a, b, calls)
	}
}

// TestResidentGrows: memory written to is resident, so a 64 MB slice
// touched page by page raises Resident by most of its size.
func TestResidentGrows(t *testing.T) {
	before := Resident()
	if before <= 0 {
		t.Fatalf("Resident() = %d", before)
	}
	b := make([]byte, 64<<20)
	for i := range b {
		b[i] = byte(i)
	}
	if grew := Resident() - before; grew < 48<<20 {
		t.Fatalf("64 MB written raised Resident by %d bytes", grew)
	}
	runtime.KeepAlive(b)
}
