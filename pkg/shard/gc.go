package shard

import (
	"os"
	"runtime/debug"
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
