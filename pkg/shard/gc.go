package shard

import (
	"os"
	"runtime/debug"
	"sync"
)

// DefaultGCPercent is the garbage collector's target for the commands.
// The heap of a worker is mostly shards that live for the whole job, so
// Go's default (100: let the heap double before collecting) mostly buys
// idle memory: on the 8.8 M-nonzero generated set a worker peaked at 258 MB
// with 100 and 163 MB with 25, for 2% more time (BENCHMARKS.md).
const DefaultGCPercent = 25

// TuneGC applies DefaultGCPercent unless GOGC is set.
func TuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(DefaultGCPercent)
	}
}

// gcPause counts the loads under way; the collector is off while any is.
var gcPause struct {
	sync.Mutex
	loads   int
	percent int // the setting to restore
}

// pauseGC turns the collector off until the returned function is called.
// Loading makes almost no garbage (its scratch is reused from shard to
// shard), so each cycle during a load only marks the growing shards: on
// the 8.8 M-nonzero generated set, 27 cycles took 10-15% of the load
// time (BENCHMARKS.md). A memory limit (GOMEMLIMIT) still applies.
// Loads may overlap; the setting comes back when the last one ends.
func pauseGC() (resume func()) {
	gcPause.Lock()
	defer gcPause.Unlock()
	if gcPause.loads == 0 {
		gcPause.percent = debug.SetGCPercent(-1)
	}
	gcPause.loads++
	return func() {
		gcPause.Lock()
		defer gcPause.Unlock()
		if gcPause.loads--; gcPause.loads == 0 {
			debug.SetGCPercent(gcPause.percent)
		}
	}
}
