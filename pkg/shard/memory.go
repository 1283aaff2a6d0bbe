package shard

import (
	"sync"
	"sync/atomic"

	"github.com/osgm-svm/osgm/internal/cli"
	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/memory"
)

// ShardShare is the part of the available memory that plain shards may
// take before a load stores them compact: the rest is for what training
// holds besides (on the 1 GB generated set a worker's rounds kept about
// half as much again as its shards: feature-sized sums, the point, the
// collector's headroom; BENCHMARKS.md).
const ShardShare = 2.0 / 3

// LargeShards is the plain shards' size in one process past which a load
// stores them compact whatever the free memory: on files that large the
// passes are bound by the gathers and scatters over a model of many
// features, not by the bytes a nonzero takes, so the third of the peak
// that compact shards save costs a few percent of time, within this
// VM's noise (BENCHMARKS.md, "A 3 GB binary file").
const LargeShards = 1 << 30

// A fit decides, shard by shard, whether the shards still to load fit in
// memory as plain ones. Each plain shard built says how many bytes the
// shards take per byte of text; once the rest of the loads under way
// that share it (Options.Shared: the in-process workers load at once),
// each at its rate, need more than ShardShare of what is available, or
// all of them would hold more than large as plain shards, the rest are
// built compact (Compact: the same values to the bit, 1-3 bytes less a
// nonzero). Workers in other processes are seen only through what they
// have taken already.
type fit struct {
	avail   func() int64
	large   int64 // LargeShards
	compact atomic.Bool

	mu          sync.Mutex
	left        int64         // text bytes still to load
	text, bytes int64         // text and shard bytes of the plain shards built
	need        int64         // this load's part of pending
	pending     *atomic.Int64 // the bytes the loads sharing it still need as plain shards
	total       *atomic.Int64 // pending and the plain shards' bytes built: bytes + need for this load
}

// newFit is the decision for loading ranges as opt says: nil, deciding
// nothing, when opt compacts anyway or has no Available. done ends it.
func newFit(opt Options, ranges []input.Range) *fit {
	if opt.Compact || opt.Available == nil {
		return nil
	}
	f := &fit{avail: opt.Available, large: LargeShards, pending: new(atomic.Int64), total: new(atomic.Int64)}
	if opt.Shared != nil {
		f.pending, f.total = &opt.Shared.pending, &opt.Shared.plain
	}
	for _, r := range ranges {
		f.left += r.End - r.Start
	}
	return f
}

// on says whether shards are now to be built compact.
func (f *fit) on() bool { return f != nil && f.compact.Load() }

// built accounts for shard s, built from text bytes of text.
func (f *fit) built(s *Shard, text int64) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.left -= text
	if f.compact.Load() || text <= 0 {
		return
	}
	f.text += text
	f.bytes += int64(s.Bytes())
	need := int64(float64(float64(f.bytes) / float64(f.text) * float64(f.left)))
	all := f.pending.Add(need - f.need)
	total := f.total.Add(int64(s.Bytes()) + need - f.need)
	f.need = need
	if avail := f.avail(); avail >= 0 && float64(all) > float64(ShardShare*float64(avail)) || total > f.large {
		f.compact.Store(true)
	}
}

// done says the load has ended, whether or not it read every range.
func (f *fit) done() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending.Add(-f.need)
	f.total.Add(-f.bytes - f.need)
	f.text, f.bytes, f.need = 0, 0, 0
}

// Compaction is when shards are stored compact: the commands' -compact,
// a flag that reads like a bool one (-compact alone is on).
type Compaction = cli.Choice[compactionWords]

const (
	CompactAuto Compaction = iota // when plain shards would not fit (Options.Available) or pass LargeShards
	CompactOn
	CompactOff
)

type compactionWords struct{}

func (compactionWords) Words() []string { return []string{"auto", "true", "false"} }

// Compacted is o with the compaction c: on, Compact; auto, Available.
func (o Options) Compacted(c Compaction) Options {
	o.Compact, o.Available = c == CompactOn, nil
	if c == CompactAuto {
		o.Available = memory.Recent
	}
	return o
}
