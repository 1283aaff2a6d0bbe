package shard

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
// a percentage of the heap other than the shards (see TuneGC). Go's
// default (100: let the heap double before collecting) mostly buys idle
// memory: on the 8.8 M-nonzero generated set a worker peaked at 258 MB
// with 100 and 163 MB with 25, for 2% more time (BENCHMARKS.md).
const DefaultGCPercent = 25

// CompactGCPercent replaces DefaultGCPercent while the process holds
// compact shards (Shard.Compacted): they are stored so because memory is
// short (-compact, or -compact=auto finding it so), and the headroom over
// the heap other than the shards is then worth a few collections more.
// On gen1g a compact worker peaked at 296-298 MiB with 10 instead of
// 310-311 with 25 (BENCHMARKS.md, session 9), and at 283-284 MiB with 5
// instead of 287-290 with 10 (session 13), training in the same time.
const CompactGCPercent = 5

// GroupLimitShare is the part of the container's memory limit (the
// least of its cgroups') that TuneGC gives the Go runtime as its soft
// limit when GOMEMLIMIT is not set. Near it the collector runs more
// often instead of letting garbage grow into the container's last
// megabytes, where the kernel evicts the program's own pages, then kills
// it: news20.t's cross-validation in 100 MiB was killed with GOGC alone
// and peaked at 87 MiB with it (BENCHMARKS.md, session 20). The rest is
// for what Go does not count: the binary's pages and the data file's
// page cache.
const GroupLimitShare = 0.9

// held is about the memory of the shards alive in this process: a build
// adds a shard's bytes, a cleanup takes them back once the shard is
// unreachable. compactHeld is the part of it in compact shards.
var held, compactHeld atomic.Int64

// account adds n bytes to the counts now and takes them back when s is
// unreachable.
func account(s *Shard, n int64, compact bool) {
	add := func(n int64) {
		held.Add(n)
		if compact {
			compactHeld.Add(n)
		}
	}
	add(n)
	runtime.AddCleanup(s, func(n int64) { add(-n) }, n)
}

func track(s *Shard) {
	account(s, int64(s.Bytes()), s.Compacted())
	s.tracked = true
}

// retrack follows a tracked shard that Compact changed from before bytes
// stored plain (wasCompact false) or compact: what track counted is
// cancelled, and the shard is counted anew, each with its own cleanup.
func retrack(s *Shard, before int, wasCompact bool) {
	if s.tracked && (before != s.Bytes() || wasCompact != s.Compacted()) {
		account(s, -int64(before), wasCompact)
		account(s, int64(s.Bytes()), s.Compacted())
	}
}

// gc is the collector's setting: off while loads run; with TuneGC,
// percent of the heap other than the shards.
var gc gcState

type gcState struct {
	sync.Mutex
	loads   int  // loads under way
	restore int  // the setting a pause found
	tuning  bool // TuneGC's goroutine is running
	percent int  // its target for the heap other than the shards
	gogc    bool // percent is GOGC's, whatever the shards
	applied int  // what it last set
}

// target is the percent of the heap other than the shards to aim at.
func (g *gcState) target() int {
	if !g.gogc && compactHeld.Load() > 0 {
		return min(g.percent, CompactGCPercent)
	}
	return g.percent
}

// TuneGC makes the collector's target DefaultGCPercent (or GOGC's, or
// CompactGCPercent while compact shards are held) of the heap other than
// the shards. Shards make no garbage and live for the
// whole job, so headroom in proportion to them (a quarter of the data,
// with GOGC=25 of the whole heap) is memory the collector never uses. The
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
		if limit := groupLimit(os.DirFS("/")); limit > 0 {
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

// pauseGC turns the collector off until the returned function is called.
// Loading makes almost no garbage (its scratch is reused from shard to
// shard), so each cycle during a load only marks the growing shards: on
// the 8.8 M-nonzero generated set, 27 cycles took 10-15% of the load
// time (BENCHMARKS.md). A memory limit (GOMEMLIMIT) still applies.
// Loads may overlap; the setting comes back when the last one ends.
func pauseGC() (resume func()) {
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
