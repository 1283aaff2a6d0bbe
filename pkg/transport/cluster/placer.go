package cluster

import (
	"maps"
	"slices"
	"time"

	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// placerCore is the coordinator's side of placed problems: which worker
// runs which placement, those waiting for a worker, and each one's last
// state. Like raft's core it has one input for messages (Step: the
// workers', and the placements' callers') and one for time (Tick), both
// from one goroutine, and hands back what to do (placerReady); it has no
// connection and no clock, so tests step it by hand (testdata/placer).
//
// A placement is deterministic from its start or from any state it
// saved, so a worker lost mid-problem costs time, not bits: the problem
// goes to the next free worker from its last state, and whichever copy
// ends first gives the result.
type placerCore struct {
	timeout time.Duration // a worker silent this long is lost
	// longest is the longest a placement has gone between two messages
	// of progress, which tells a hung worker from a slow class.
	longest time.Duration

	workers map[string]*solverPeer
	waiting []*placement // in the order they go out
	byID    map[uint64]*placement
	next    uint64

	rd placerReady // what the step under way leaves to do
}

// placerMsg is one input of the core's Step: a placement's caller's
// (placerSubmit, placerStop, placerForget) or the workers' (placerBeat,
// placerGone, placerSolving, placerSolved). The callers name their
// placement by pointer: its id is the core's, set by the step that
// submits it.
type placerMsg interface{ placerMsg() }

type (
	placerSubmit  struct{ p *placement }
	placerStop    struct{ p *placement }
	placerForget  struct{ p *placement }
	placerBeat    struct{ hb wire.Heartbeat }
	placerGone    struct{ worker string } // the server: nobody holds its subject
	placerSolving struct {
		id uint64
		m  *wire.Solving
	}
	placerSolved struct {
		id uint64
		m  *wire.Solved
	}
)

func (placerSubmit) placerMsg()  {}
func (placerStop) placerMsg()    {}
func (placerForget) placerMsg()  {}
func (placerBeat) placerMsg()    {}
func (placerGone) placerMsg()    {}
func (placerSolving) placerMsg() {}
func (placerSolved) placerMsg()  {}

// placerReady is what a step leaves to do, in order: the messages to
// workers, then what each placement's caller hears.
type placerReady struct {
	out   []placerOut
	heard []placerHeard
}

// placerOut is a message to a worker: a Solve (send), a stop, or a probe
// of the server for the worker's subject (p nil), whose answer comes
// back as placerGone if nobody holds it.
type placerOut struct {
	kind   placerOutKind
	worker string
	p      *placement
}

type placerOutKind int

const (
	outSend placerOutKind = iota
	outStop
	outProbe
)

// placerHeard is an event for placement p's caller.
type placerHeard struct {
	p  *placement
	ev placerEvent
}

// solverPeer is a worker that takes placements, slots at a time.
type solverPeer struct {
	lastSeen time.Time
	avail    int64
	slots    int
	busy     []*placement
	probed   time.Time
	dead     bool
	stuck    bool   // heartbeats, but a placement of it made no progress (see hung)
	read     uint64 // its loads' bytes: a worker loading a job's shards makes progress
}

// placement is one problem placed on the workers, and the channel its
// caller (Placer.Place) hears its progress and end on.
type placement struct {
	id       uint64
	req      *wire.Solve
	worker   string // running it ("": waiting)
	sent     time.Time
	progress time.Time      // its last message, or when it went out
	missed   int            // its worker's heartbeats since it went out that did not list it
	last     *osgm.Snapshot // its latest state, which a new worker resumes
	evals    int            // the passes of the last record handed on
	stopping bool
	events   chan placerEvent
}

// placerEvent is what a placement's caller hears: a record, a state, or
// the end.
type placerEvent struct {
	record *osgm.Record
	snap   *osgm.Snapshot
	end    *wire.Solved
}

func newPlacerCore(timeout time.Duration) *placerCore {
	return &placerCore{timeout: timeout, workers: map[string]*solverPeer{}, byID: map[uint64]*placement{}}
}

// Step takes one message at time now.
func (c *placerCore) Step(m placerMsg, now time.Time) placerReady {
	switch m := m.(type) {
	case placerSubmit:
		c.submit(m.p, now)
	case placerStop:
		c.stop(m.p)
	case placerForget:
		c.forget(m.p)
	case placerBeat:
		c.onHeartbeat(m.hb, now)
	case placerGone:
		c.onGone(m.worker, now)
	case placerSolving:
		c.onSolving(m.id, m.m, now)
	case placerSolved:
		c.onSolved(m.id, m.m, now)
	}
	return c.ready()
}

// Tick takes the time: workers silent too long are lost, or probed.
func (c *placerCore) Tick(now time.Time) placerReady {
	c.onTick(now)
	return c.ready()
}

func (c *placerCore) ready() placerReady {
	rd := c.rd
	c.rd = placerReady{}
	return rd
}

func (c *placerCore) emit(kind placerOutKind, worker string, p *placement) {
	c.rd.out = append(c.rd.out, placerOut{kind: kind, worker: worker, p: p})
}

func (c *placerCore) hear(p *placement, ev placerEvent) {
	c.rd.heard = append(c.rd.heard, placerHeard{p: p, ev: ev})
}

// submit queues a new placement and hands it out if a worker is free.
func (c *placerCore) submit(p *placement, now time.Time) {
	c.next++
	p.id = c.next
	c.byID[p.id] = p
	c.waiting = append(c.waiting, p)
	c.dispatch(now)
}

// onHeartbeat keeps track of the workers that solve; one whose
// heartbeats keep missing its placement lost the Solve on the way, and
// is sent it again.
func (c *placerCore) onHeartbeat(hb wire.Heartbeat, now time.Time) {
	if !hb.Solves {
		return
	}
	w := c.workers[hb.ID]
	if hb.Leaving {
		if w != nil {
			c.lose(hb.ID, w)
			c.dispatch(now)
		}
		return
	}
	if w == nil {
		w = &solverPeer{}
		c.workers[hb.ID] = w
	}
	if w.stuck {
		return // alive, but given nothing more in this job
	}
	w.lastSeen, w.avail, w.slots, w.dead = now, hb.Avail, max(hb.Slots, 1), false
	if hb.Read != w.read {
		w.read = hb.Read
		for _, p := range w.busy {
			p.progress = now // its shards are being loaded
		}
	}
	for _, p := range w.busy {
		if now.Sub(p.sent) <= time.Second || slices.Contains(hb.Placed, p.id) {
			continue
		}
		if p.missed++; p.missed >= 2 {
			p.missed, p.sent = 0, now
			c.emit(outSend, hb.ID, p)
		}
	}
	c.dispatch(now)
}

// probeAfter is how long a busy worker may miss heartbeats before the
// server is asked whether it is still connected: a worker killed outright
// is then lost in about a second, not after the heartbeat timeout.
const probeAfter = time.Second

// onTick declares the workers silent for timeout lost, and probes busy
// workers that have been silent for probeAfter.
func (c *placerCore) onTick(now time.Time) {
	for _, id := range slices.Sorted(maps.Keys(c.workers)) {
		w := c.workers[id]
		switch silent := now.Sub(w.lastSeen); {
		case w.dead:
		case silent > c.timeout:
			c.lose(id, w)
		case len(w.busy) > 0 && silent > probeAfter && now.Sub(w.probed) > probeAfter/2:
			w.probed = now
			c.emit(outProbe, id, nil)
		case c.hung(w, now):
			w.stuck = true
			c.lose(id, w)
		}
	}
	c.dispatch(now)
}

// minHung is the least a placement may go without progress before its
// worker is taken for hung: a class's first iteration over a large set
// takes a while, and no history tells yet how long.
const minHung = 2 * time.Minute

// hung reports whether one of w's placements has gone without a message
// for ten times the longest gap seen, and at least minHung: the worker
// heartbeats, but its class is stuck (a hung evaluation). Its classes go
// to other workers, and it is given nothing more.
func (c *placerCore) hung(w *solverPeer, now time.Time) bool {
	for _, p := range w.busy {
		if p.req.Pass == nil && now.Sub(p.progress) > max(minHung, 10*c.longest) {
			return true
		}
	}
	return false
}

// onGone hears that nobody holds a worker's subject: one still silent is
// lost (one back meanwhile sent a heartbeat).
func (c *placerCore) onGone(id string, now time.Time) {
	if w := c.workers[id]; w != nil && !w.dead && now.Sub(w.lastSeen) > probeAfter {
		c.lose(id, w)
		c.dispatch(now)
	}
}

// lose takes a worker for lost: its placements wait first in line for
// the next workers, each from its last state, unless being stopped.
func (c *placerCore) lose(id string, w *solverPeer) {
	w.dead = true
	var again []*placement
	for _, p := range w.busy {
		p.worker = ""
		if p.stopping {
			c.finish(p, &wire.Solved{Interrupted: true})
			continue
		}
		again = append(again, p)
	}
	w.busy = nil
	c.waiting = append(again, c.waiting...)
}

// dispatch hands the waiting placements to free workers, in the
// workers' order.
func (c *placerCore) dispatch(now time.Time) {
	for _, id := range slices.Sorted(maps.Keys(c.workers)) {
		if len(c.waiting) == 0 {
			return
		}
		w := c.workers[id]
		for !w.dead && !w.stuck && len(w.busy) < w.slots && len(c.waiting) > 0 {
			p := c.waiting[0]
			c.waiting = c.waiting[1:]
			w.busy = append(w.busy, p)
			p.worker, p.sent, p.progress, p.missed = id, now, now, 0
			if p.last != nil {
				p.req.Settings.Resume, p.req.Settings.F0, p.req.Settings.G0 = p.last, nil, nil
			}
			c.emit(outSend, id, p)
		}
	}
}

// onSolving hands on a placement's progress: records past the last one
// handed on (a problem resumed elsewhere repeats some), and states newer
// than the last.
func (c *placerCore) onSolving(id uint64, m *wire.Solving, now time.Time) {
	p := c.byID[id]
	if p != nil && p.worker != "" {
		c.longest = max(c.longest, now.Sub(p.progress))
		p.progress = now
	}
	switch {
	case p == nil:
	case m.Record != nil && m.Record.Evals > p.evals:
		p.evals = m.Record.Evals
		c.hear(p, placerEvent{record: m.Record})
	case m.Snapshot != nil && (p.last == nil || m.Snapshot.Evals > p.last.Evals):
		p.last = m.Snapshot
		c.hear(p, placerEvent{snap: m.Snapshot})
	}
}

// onSolved ends a placement with the first end any worker sends for it.
func (c *placerCore) onSolved(id uint64, m *wire.Solved, now time.Time) {
	for _, w := range c.workers {
		w.busy = slices.DeleteFunc(w.busy, func(p *placement) bool { return p.id == id })
	}
	if p := c.byID[id]; p != nil {
		c.finish(p, m)
	}
	c.dispatch(now)
}

// forget drops a placement its caller no longer waits for; a worker
// running it is free once it ends.
func (c *placerCore) forget(p *placement) {
	if c.byID[p.id] == p {
		delete(c.byID, p.id)
		c.waiting = slices.DeleteFunc(c.waiting, func(q *placement) bool { return q == p })
	}
}

// stop ends a placement as soon as its worker has saved its state, or at
// once if it waits.
func (c *placerCore) stop(p *placement) {
	if c.byID[p.id] != p || p.stopping {
		return
	}
	p.stopping = true
	if p.worker == "" {
		c.waiting = slices.DeleteFunc(c.waiting, func(q *placement) bool { return q == p })
		c.finish(p, &wire.Solved{Interrupted: true})
		return
	}
	c.emit(outStop, p.worker, p)
}

func (c *placerCore) finish(p *placement, m *wire.Solved) {
	delete(c.byID, p.id)
	c.hear(p, placerEvent{end: m})
}

// fits reports whether every live worker that solves could take bytes
// more, and how many placements they run at once.
func (c *placerCore) fits(bytes int64) (slots int, ok bool) {
	ok = true
	for _, w := range c.workers {
		if w.dead || w.stuck {
			continue
		}
		slots += w.slots
		ok = ok && (w.avail < 0 || w.avail >= bytes) // < 0: the worker cannot tell
	}
	return slots, ok && slots > 0
}
