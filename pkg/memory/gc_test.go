package memory

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/osgm-svm/osgm/internal/gcwait"
)

// TestGCPauseNests: overlapping loads keep the collector off until the
// last ends, then restore the setting they found.
func TestGCPauseNests(t *testing.T) {
	old := debug.SetGCPercent(37)
	defer debug.SetGCPercent(old)
	first := Pause()
	second := Pause()
	first()
	if p := debug.SetGCPercent(-1); p != -1 {
		t.Errorf("collector at %d while a load runs", p)
	}
	second()
	if p := debug.SetGCPercent(37); p != 37 {
		t.Errorf("collector at %d after the loads, want 37", p)
	}
}

func TestScaledPercent(t *testing.T) {
	tests := []struct {
		percent int
		live    uint64
		data    int64
		want    int
	}{
		{25, 100, 0, 25},   // no shards: as set
		{25, 100, 60, 10},  // 25% of the other 40 is 10% of the whole
		{25, 100, 100, 25}, // a stale live figure below the data: as set
		{25, 1000, 999, 1}, // never 0, which would collect continuously
		{100, 200, 100, 50},
	}
	for _, tc := range tests {
		if got := scaledPercent(tc.percent, tc.live, tc.data); got != tc.want {
			t.Errorf("scaledPercent(%d, %d, %d) = %d, want %d", tc.percent, tc.live, tc.data, got, tc.want)
		}
	}
}

// TestCompactDataLowersTheTarget: while compact data is held the
// collector aims at CompactGCPercent, unless GOGC set the target; once
// the data is unreachable, the count gives it back.
func TestCompactDataLowersTheTarget(t *testing.T) {
	for _, tc := range []struct {
		percent int
		gogc    bool
		compact bool
		want    int
	}{
		{DefaultGCPercent, false, false, DefaultGCPercent},
		{DefaultGCPercent, false, true, CompactGCPercent},
		{5, false, true, 5},
		{DefaultGCPercent, true, true, DefaultGCPercent},
	} {
		gcwait.Until(t, func() bool { _, c := Held(); return c == 0 }, func() string {
			_, c := Held()
			return fmt.Sprintf("compact data of %d bytes still counted", c)
		})
		data := new([1 << 10]byte)
		Track(data, 1<<10, tc.compact)
		g := gcState{percent: tc.percent, gogc: tc.gogc}
		if got := g.target(); got != tc.want {
			t.Errorf("percent %d, GOGC set %v, compact %v: target %d, want %d", tc.percent, tc.gogc, tc.compact, got, tc.want)
		}
		runtime.KeepAlive(data)
	}
}
