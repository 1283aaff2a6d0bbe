package shard

import (
	"testing"

	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/memory"
)

// TestFitSwitches follows the decision: four ranges of 100 text bytes
// whose shards take 50 bytes each, so after the first shard the rest
// need 150 bytes, after the second 100.
func TestFitSwitches(t *testing.T) {
	ranges := input.Layout(400, 4)
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
	ranges := input.Layout(400, 4)
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
	ranges := input.Layout(400, 4)
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
