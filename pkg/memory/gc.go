package memory

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultGCPercent is the garbage collector's target for the commands, as
// a percentage of the heap other than the tracked data (see TuneGC). Go's
// default (100: let the heap double before collecting) mostly buys idle
// memory (BENCHMARKS.md). A pass makes little garbage beside that heap
// (the shards, the methods' and the sums' vectors, reused), and marking
// a heap of large pointer-free vectors is cheap, so collecting at 10%
// costs no time a run can measure (embedded, and a coordinator and its
// workers over NATS) where 25% held 20-40 MB more at 1 GB.
const DefaultGCPercent = 10

// CompactGCPercent replaces DefaultGCPercent while the process holds
// compact data (Track's compact): it is stored so because memory is
// short (-compact, or -compact=auto finding it so), and the headroom over
// the heap other than the tracked data is then worth a few collections more.
// Lower targets cost collections, not time, and cut a compact worker's
// peak (BENCHMARKS.md).
const CompactGCPercent = 5

// GroupLimitShare is the part of the container's memory limit (the
// least of its cgroups') that TuneGC gives the Go runtime as its soft
// limit when GOMEMLIMIT is not set. Near it the collector runs more
// often instead of letting garbage grow into the container's last
// megabytes, where the kernel evicts the program's own pages, then kills
// it. The rest is for what Go does not count: the binary's pages and the
// data file's page cache.
const GroupLimitShare = 0.9

// held is about the memory of the data Tracked in this process: n bytes
// of an object count until it is unreachable. compactHeld is the part of
// it stored compact.
var held, compactHeld atomic.Int64

// Track counts n bytes (negative: takes them back) of long-lived data
// owned by obj until obj is unreachable: TuneGC's target leaves it out of
// the heap it scales. compact says the data is stored compact because
// memory is short.
func Track[T any](obj *T, n int64, compact bool) {
	add := func(n int64) {
		held.Add(n)
		if compact {
			compactHeld.Add(n)
		}
	}
	add(n)
	runtime.AddCleanup(obj, func(n int64) { add(-n) }, n)
}

// Held is the bytes Tracked and still reachable, and the compact part of
// them.
func Held() (all, compact int64) { return held.Load(), compactHeld.Load() }

// gc is the collector's setting: off while loads run (Pause); with
// TuneGC, percent of the heap other than the tracked data.
var gc gcState

type gcState struct {
	sync.Mutex
	loads   int  // loads under way
	restore int  // the setting a pause found
	tuning  bool // TuneGC's goroutine is running
	percent int  // its target for the heap other than the tracked data
	gogc    bool // percent is GOGC's, whatever the data
	applied int  // what it last set
}

// target is the percent of the heap other than the tracked data to aim at.
func (g *gcState) target() int {
	if !g.gogc && compactHeld.Load() > 0 {
		return min(g.percent, CompactGCPercent)
	}
	return g.percent
}

// TuneGC makes the collector's target DefaultGCPercent (or GOGC's, or
// CompactGCPercent while compact data is held) of the heap other than
// the Tracked data. Such data (a worker's shards) makes no garbage and
// lives for the whole job, so headroom in proportion to it (a quarter of
// the data, with GOGC=25 of the whole heap) is memory the collector never
// uses. The
// setting follows the live heap, read every 100 ms. In a container, and
// without GOMEMLIMIT, it also sets Go's soft memory limit to
// GroupLimitShare of the container's.
func TuneGC() {
	gc.Lock()
	defer gc.Unlock()
	if gc.tuning {
		return
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		if limit := GroupLimit(os.DirFS("/")); limit > 0 {
			debug.SetMemoryLimit(int64(GroupLimitShare * float64(limit)))
		}
	}
	gc.percent = DefaultGCPercent
	if gc.gogc = os.Getenv("GOGC") != ""; gc.gogc {
		gc.percent = debug.SetGCPercent(DefaultGCPercent) // GOGC's, read by a set
	}
	debug.SetGCPercent(gc.percent)
	gc.applied = gc.percent
	if gc.percent < 0 {
		return // GOGC=off: nothing to scale
	}
	gc.tuning = true
	go func() {
		live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		for range time.Tick(100 * time.Millisecond) {
			metrics.Read(live)
			gc.Lock()
			p := scaledPercent(gc.target(), live[0].Value.Uint64(), held.Load())
			if gc.loads == 0 && p != gc.applied {
				debug.SetGCPercent(p)
				gc.applied = p
			}
			gc.Unlock()
		}
	}()
}

// scaledPercent is the whole heap's target that gives percent of the
// heap other than data bytes, live being the heap's live bytes.
func scaledPercent(percent int, live uint64, data int64) int {
	if data <= 0 || live <= uint64(data) {
		return percent
	}
	return max(1, int(uint64(percent)*(live-uint64(data))/live))
}

// Pause turns the collector off until the returned function is called.
// Loading makes almost no garbage (its scratch is reused from shard to
// shard), so each cycle during a load only marks the growing shards,
// for a tenth of the load's time. A memory limit (GOMEMLIMIT) still
// applies. Loads may overlap; the setting comes back when the last one
// ends.
func Pause() (resume func()) {
	gc.Lock()
	defer gc.Unlock()
	if gc.loads == 0 {
		gc.restore = debug.SetGCPercent(-1)
	}
	gc.loads++
	return func() {
		gc.Lock()
		defer gc.Unlock()
		if gc.loads--; gc.loads == 0 {
			debug.SetGCPercent(gc.restore)
		}
	}
}
