// Package memory tells how much memory this process may still take (the
// machine's, and under the memory limits of its cgroups, v1 or v2, and
// Go's soft limit), and tunes the garbage collector for a process that
// holds long-lived data it accounts for (Track). The cgroups' limits
// include those of the groups above the process's; Go itself already
// sets GOMAXPROCS from the cgroup's CPU limit.
package memory

import (
	"bufio"
	"bytes"
	"io/fs"
	"math"
	"os"
	"path"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Available is the memory this process may still take, in bytes, or -1
// when nothing says: the least of the machine's MemAvailable, the room
// left under the container's memory limit (cgroup v2 or v1), and the room
// left under the Go memory limit (GOMEMLIMIT). It is read afresh on each
// call, so workers sharing a machine see each other's shards.
func Available() int64 {
	avail := systemAvailable(os.DirFS("/"))
	if limit := debug.SetMemoryLimit(-1); limit < math.MaxInt64 {
		avail = least(avail, max(limit-runtimeHeld(), 0))
	}
	return avail
}

// Recent is Available as read at most 10 ms ago: reading it
// takes about 0.1 ms (several files), and a small file's load builds a
// shard every millisecond or so.
var Recent = cached(Available, 10*time.Millisecond, time.Now)

// cached is f, called again only once its last answer is ttl old.
func cached(f func() int64, ttl time.Duration, now func() time.Time) func() int64 {
	var (
		mu   sync.Mutex
		at   time.Time
		last int64
	)
	return func() int64 {
		mu.Lock()
		defer mu.Unlock()
		if t := now(); at.IsZero() || t.Sub(at) >= ttl {
			last, at = f(), t
		}
		return last
	}
}

// systemAvailable is Available without the Go limit, with the files read
// from root (a test's map).
func systemAvailable(root fs.FS) int64 {
	avail := int64(-1)
	if b, err := fs.ReadFile(root, "proc/meminfo"); err == nil {
		if kb, ok := field(b, "MemAvailable:"); ok {
			avail = kb << 10
		}
	}
	groups(root, func(v cgroupVersion, dir string) {
		if room, ok := v.room(root, dir); ok {
			avail = least(avail, room)
		}
	})
	return avail
}

// cgroupVersion says where a cgroup version keeps a group's memory limit
// and usage.
type cgroupVersion struct {
	mount, controller string // controller: "" for v2's one hierarchy
	limit, usage      string
	file              [2]string // memory.stat's page cache lines
}

var cgroupVersions = [...]cgroupVersion{
	{"sys/fs/cgroup", "", "memory.max", "memory.current", [2]string{"active_file", "inactive_file"}},
	{"sys/fs/cgroup/memory", "memory", "memory.limit_in_bytes", "memory.usage_in_bytes", [2]string{"total_active_file", "total_inactive_file"}},
}

// groups calls f with each memory cgroup that bounds the process: its
// own and those above it, in either version (a service's group under a
// sliced host, a container's under the host's).
func groups(root fs.FS, f func(v cgroupVersion, dir string)) {
	self, _ := fs.ReadFile(root, "proc/self/cgroup")
	for _, v := range cgroupVersions {
		dir := v.mount
		if p, ok := cgroupPath(self, v.controller); ok && strings.HasPrefix(path.Join(v.mount, p), v.mount+"/") {
			dir = path.Join(v.mount, p)
		}
		for {
			f(v, dir)
			if dir == v.mount {
				break
			}
			dir = path.Dir(dir)
		}
	}
}

// GroupLimit is the least memory limit of the groups bounding the
// process, or -1 when none has one.
func GroupLimit(root fs.FS) int64 {
	limit := int64(-1)
	groups(root, func(v cgroupVersion, dir string) {
		if n, ok := v.limitOf(root, dir); ok {
			limit = least(limit, n)
		}
	})
	return limit
}

// limitOf is the group's memory limit; no limit, or no group: !ok.
func (v cgroupVersion) limitOf(root fs.FS, dir string) (int64, bool) {
	limit, ok := number(root, dir+"/"+v.limit)
	return limit, ok && limit < 1<<60 // "max", or v1's "no limit", a huge number
}

// room is how much the group in dir may still take: its limit less what
// it uses, not counting the page cache (which reading the data file
// fills, and which the kernel drops before it kills for want of memory).
// No limit, or no group: !ok.
func (v cgroupVersion) room(root fs.FS, dir string) (int64, bool) {
	limit, ok := v.limitOf(root, dir)
	if !ok {
		return 0, false
	}
	usage, ok := number(root, dir+"/"+v.usage)
	if !ok {
		return 0, false
	}
	if b, err := fs.ReadFile(root, dir+"/memory.stat"); err == nil {
		for _, key := range v.file {
			if n, ok := field(b, key); ok {
				usage -= min(n, usage)
			}
		}
	}
	return max(limit-usage, 0), true
}

// cgroupPath is the process's group in /proc/self/cgroup's lines
// ("hierarchy:controllers:path"): v2's (controllers empty, hierarchy 0)
// or the v1 hierarchy's holding controller.
func cgroupPath(self []byte, controller string) (string, bool) {
	for _, line := range strings.Split(string(self), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if controller == "" && f[0] == "0" && f[1] == "" || controller != "" && slices.Contains(strings.Split(f[1], ","), controller) {
			return f[2], true
		}
	}
	return "", false
}

// least is the smaller of two amounts, -1 standing for unknown.
func least(a, b int64) int64 {
	switch {
	case a < 0:
		return b
	case b < 0:
		return a
	}
	return min(a, b)
}

// number reads a file holding one integer ("max" reads as no number).
func number(root fs.FS, name string) (int64, bool) {
	b, err := fs.ReadFile(root, name)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	return n, err == nil && n >= 0
}

// field finds "key value" among b's lines (meminfo's "MemAvailable: 123
// kB", memory.stat's "inactive_file 123").
func field(b []byte, key string) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) >= 2 && string(f[0]) == key {
			n, err := strconv.ParseInt(string(f[1]), 10, 64)
			return n, err == nil && n >= 0
		}
	}
	return 0, false
}

// Resident is this process's resident memory in bytes, as the kernel
// counts it (/proc/self/statm); where that cannot be read, the memory the
// Go runtime holds from the system.
func Resident() int64 {
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			if pages, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				return pages * int64(os.Getpagesize())
			}
		}
	}
	return runtimeHeld()
}

// runtimeHeld is the memory the Go runtime holds from the system: what
// it mapped, less what it gave back (what Go's memory limit counts).
func runtimeHeld() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64() - s[1].Value.Uint64())
}
