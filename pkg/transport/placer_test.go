package transport

import (
	"slices"
	"testing"
	"time"

	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// fakePlacerIO records what the core sends.
type fakePlacerIO struct{ sent, stopped, probed []string }

func (f *fakePlacerIO) send(id string, p *placement) error {
	f.sent = append(f.sent, id)
	return nil
}

func (f *fakePlacerIO) probe(id string) error {
	f.probed = append(f.probed, id)
	return nil
}

func (f *fakePlacerIO) stop(id string, p *placement) error {
	f.stopped = append(f.stopped, id)
	return nil
}

func newPlacement(k int) *placement {
	return &placement{req: &wire.Solve{K: k, Settings: osgm.Settings{F0: []float64{1}, G0: [][]float64{{1}}}}, events: make(chan placerEvent, 16)}
}

// drain is what a placement's caller has heard so far.
func drain(p *placement) (evs []placerEvent) {
	for {
		select {
		case ev := <-p.events:
			evs = append(evs, ev)
		default:
			return evs
		}
	}
}

// TestPlacerCore steps the coordinator's side of placed problems
// through a worker's loss, a lost Solve, stale progress from the lost
// worker and stops: each problem ends once, from the last state when it
// moves, and a worker runs one problem at a time.
func TestPlacerCore(t *testing.T) {
	io := &fakePlacerIO{}
	t0 := time.Unix(1000, 0)
	c := newPlacerCore(io, 3*time.Second)
	hb := func(id string, at time.Duration, placed ...uint64) {
		c.onHeartbeat(wire.Heartbeat{ID: id, Solves: true, Avail: 1 << 30, Placed: placed}, t0.Add(at))
	}
	hb("a", 0)
	hb("b", 0)
	c.onHeartbeat(wire.Heartbeat{ID: "old"}, t0) // a worker that does not solve
	ps := []*placement{newPlacement(0), newPlacement(1), newPlacement(2)}
	for _, p := range ps {
		c.submit(p, t0)
	}
	if !slices.Equal(io.sent, []string{"a", "b"}) || ps[2].worker != "" {
		t.Fatalf("sent to %v; the third waits on %q", io.sent, ps[2].worker)
	}
	if n, ok := c.fits(1 << 20); n != 2 || !ok {
		t.Fatalf("fits: %d workers, %v", n, ok)
	}
	if _, ok := c.fits(2 << 30); ok {
		t.Fatal("fits more than the workers have")
	}
	// A worker that heartbeats while its class makes no progress, its
	// loads reading nothing, for ten times the longest gap seen (and
	// minHung) is hung: the class goes to another, and it gets no more.
	c3 := newPlacerCore(&fakePlacerIO{}, time.Minute)
	beat := func(id string, at time.Duration, read uint64) {
		c3.onHeartbeat(wire.Heartbeat{ID: id, Solves: true, Read: read}, t0.Add(at))
	}
	beat("h", 0, 0)
	hp := newPlacement(0)
	c3.submit(hp, t0)
	beat("h", 30*time.Second, 1000) // loading: progress
	c3.onSolving(hp.id, &wire.Solving{Record: &osgm.Record{Evals: 1}}, t0.Add(40*time.Second))
	c3.onSolving(hp.id, &wire.Solving{Record: &osgm.Record{Evals: 2}}, t0.Add(100*time.Second)) // longest gap 60 s
	tick := func(from, to time.Duration, ids ...string) {
		for at := from; at <= to; at += 10 * time.Second {
			for _, id := range ids {
				beat(id, at, 1000)
			}
			c3.onTick(t0.Add(at))
		}
	}
	tick(110*time.Second, 690*time.Second, "h")
	if hp.worker != "h" || c3.workers["h"].stuck {
		t.Fatal("taken for hung before ten times the longest gap")
	}
	tick(700*time.Second, 720*time.Second, "h", "i")
	if hp.worker != "i" || !c3.workers["h"].stuck {
		t.Fatalf("the hung worker's class on %q", hp.worker)
	}
	if n, _ := c3.fits(0); n != 1 {
		t.Fatalf("%d slots with a hung worker's", n)
	}
	// A worker of two slots takes two placements at once.
	c2 := newPlacerCore(&fakePlacerIO{}, time.Second)
	c2.onHeartbeat(wire.Heartbeat{ID: "w", Solves: true, Slots: 2}, t0)
	two := []*placement{newPlacement(0), newPlacement(1), newPlacement(2)}
	for _, p := range two {
		c2.submit(p, t0)
	}
	if n, _ := c2.fits(0); n != 2 || two[0].worker != "w" || two[1].worker != "w" || two[2].worker != "" {
		t.Fatalf("two slots: %d, placed on %q %q %q", n, two[0].worker, two[1].worker, two[2].worker)
	}
	// a's progress: a record and a state, then the same record again.
	snap := &osgm.Snapshot{Evals: 7}
	c.onSolving(ps[0].id, &wire.Solving{Record: &osgm.Record{Evals: 5}}, t0)
	c.onSolving(ps[0].id, &wire.Solving{Snapshot: snap}, t0)
	c.onSolving(ps[0].id, &wire.Solving{Record: &osgm.Record{Evals: 5}}, t0)
	if evs := drain(ps[0]); len(evs) != 2 || evs[0].record == nil || evs[1].snap != snap {
		t.Fatalf("progress handed on: %+v", evs)
	}
	// b's heartbeats list its placement; a's stop: a is lost, and its
	// problem goes first to the next free worker, from its state.
	for s := 1; s <= 4; s++ {
		hb("b", time.Duration(s)*time.Second, ps[1].id)
	}
	c.onTick(t0.Add(4 * time.Second))
	if ps[0].worker != "" || c.waiting[0] != ps[0] {
		t.Fatalf("a's problem on %q, waiting %v", ps[0].worker, c.waiting)
	}
	c.onSolved(ps[1].id, &wire.Solved{Result: &osgm.Result{}}, t0.Add(4*time.Second))
	if evs := drain(ps[1]); len(evs) != 1 || evs[0].end.Result == nil {
		t.Fatalf("b's end: %+v", evs)
	}
	if ps[0].worker != "b" || ps[0].req.Settings.Resume != snap || ps[0].req.Settings.F0 != nil {
		t.Fatalf("moved to %q, resuming from %v", ps[0].worker, ps[0].req.Settings.Resume)
	}
	// a comes back and takes the third; its Solve is lost: heartbeats
	// that miss it twice send it again.
	hb("a", 5*time.Second)
	if ps[2].worker != "a" {
		t.Fatalf("third on %q", ps[2].worker)
	}
	n := len(io.sent)
	hb("a", 7*time.Second)
	hb("a", 8*time.Second)
	if len(io.sent) != n+1 || io.sent[n] != "a" {
		t.Fatalf("sent %v after the Solve was lost", io.sent[n:])
	}
	// Stale progress of the problem that moved, from a: an older state is
	// not handed on; its end is taken, once, whoever sends it.
	c.onSolving(ps[0].id, &wire.Solving{Snapshot: &osgm.Snapshot{Evals: 3}}, t0.Add(9*time.Second))
	c.onSolved(ps[0].id, &wire.Solved{Result: &osgm.Result{}}, t0.Add(9*time.Second))
	c.onSolved(ps[0].id, &wire.Solved{Result: &osgm.Result{}}, t0.Add(9*time.Second))
	if evs := drain(ps[0]); len(evs) != 1 || evs[0].end == nil {
		t.Fatalf("the moved problem's end: %+v", evs)
	}
	// A stop of a problem under way goes to its worker; of one waiting,
	// it ends at once.
	c.stop(ps[2].id)
	p4 := newPlacement(3)
	c.submit(p4, t0.Add(9*time.Second))
	if p4.worker != "b" {
		t.Fatalf("fourth on %q", p4.worker)
	}
	p5 := newPlacement(4)
	c.submit(p5, t0.Add(9*time.Second))
	c.stop(p5.id)
	if evs := drain(p5); !slices.Equal(io.stopped, []string{"a"}) || len(evs) != 1 || !evs[0].end.Interrupted {
		t.Fatalf("stops sent to %v; the waiting one heard %+v", io.stopped, evs)
	}
	// A worker that leaves while stopping its problem ends it.
	c.onHeartbeat(wire.Heartbeat{ID: "a", Solves: true, Leaving: true}, t0.Add(10*time.Second))
	if evs := drain(ps[2]); len(evs) != 1 || !evs[0].end.Interrupted {
		t.Fatalf("the stopped problem of a worker that left: %+v", evs)
	}
	// A busy worker silent for probeAfter is probed, and lost when the
	// server finds nobody on its subject; its problem waits for a worker.
	hb("b", 10*time.Second, p4.id)
	c.onTick(t0.Add(11*time.Second + 500*time.Millisecond))
	if !slices.Equal(io.probed, []string{"b"}) {
		t.Fatalf("probed %v", io.probed)
	}
	c.onGone("b", t0.Add(11*time.Second+600*time.Millisecond))
	if p4.worker != "" || c.waiting[0] != p4 {
		t.Fatalf("the lost worker's problem on %q", p4.worker)
	}
}
