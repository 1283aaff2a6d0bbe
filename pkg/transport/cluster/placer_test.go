package cluster

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// placerTranscript is a placer's core with a clock that moves only when
// the transcript says so, and the placements submitted, by id.
type placerTranscript struct {
	core  *placerCore
	t0    time.Time
	clock time.Time
	byID  map[uint64]*placement
}

func newPlacerTranscript(timeout time.Duration) *placerTranscript {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return &placerTranscript{core: newPlacerCore(timeout), t0: t0, clock: t0,
		byID: map[uint64]*placement{}}
}

// TestPlacerTranscripts steps the coordinator's core of placed problems
// through the cases in testdata/placer and compares what it hands back
// (the messages to workers, what each placement's caller hears) with
// the transcripts (-rewrite writes them anew). Placements are named by
// the ids the core gives them, p1, p2, ...
//
// Commands (any may carry at=D: the clock moves to D after the start
// first; it never goes back):
//
//	core timeout=D             a new core: workers silent for D are lost
//	beat W [slots=N] [avail=B] [placed=1,2] [read=R] [leaving] [nosolve]
//	submit                     a new placement (problem k = its number)
//	solving P record=E | state=E   P's progress: a record, a state
//	solved P [interrupted]     P's end, from a worker
//	stop P | forget P          P's caller stops it, or no longer waits
//	gone W                     the server: nobody holds W's subject
//	tick [from=D every=D beat=W,... read=R placed=P,...]   the ticker
//	                           fires at the clock, or every D from D,
//	                           the workers named beating just before each
//	fits B                     the slots, and whether every worker has B free
//	show                       each placement's worker, and the stuck workers
func TestPlacerTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/placer", func(t *testing.T, path string) {
		pt := newPlacerTranscript(time.Second)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out, err := pt.step(d)
			if err != nil {
				out += fmt.Sprintf("error: %v\n", err)
			}
			return out
		})
	})
}

// args is a command's arguments: the first bare word (a worker or a
// placement), and key=value pairs (bare flags map to "").
func args(d *datadriven.TestData) (string, map[string]string) {
	var name string
	kv := map[string]string{}
	for i, a := range d.CmdArgs {
		if i == 0 && len(a.Vals) == 0 && a.Key != "leaving" && a.Key != "nosolve" && a.Key != "interrupted" {
			name = a.Key
			continue
		}
		kv[a.Key] = strings.Join(a.Vals, ",")
	}
	return name, kv
}

func (pt *placerTranscript) step(d *datadriven.TestData) (string, error) {
	name, kv := args(d)
	if at, ok := kv["at"]; ok {
		if err := pt.moveTo(at); err != nil {
			return "", err
		}
	}
	c, now := pt.core, pt.clock
	var rd placerReady
	switch d.Cmd {
	case "core":
		dt, err := time.ParseDuration(kv["timeout"])
		if err != nil {
			return "", err
		}
		*pt = *newPlacerTranscript(dt)
		return "", nil
	case "beat":
		hb, err := pt.heartbeat(name, kv)
		if err != nil {
			return "", err
		}
		rd = c.Step(placerBeat{hb}, now)
	case "submit":
		p := &placement{req: &wire.Solve{K: len(pt.byID), Settings: osgm.Settings{F0: []float64{1}, G0: [][]float64{{1}}}},
			events: make(chan placerEvent, 16)}
		rd = c.Step(placerSubmit{p}, now)
		pt.byID[p.id] = p
	case "solving", "solved", "stop", "forget":
		id, err := placementID(name)
		if err != nil {
			return "", err
		}
		rd = pt.toPlacement(d.Cmd, id, kv, now)
	case "gone":
		rd = c.Step(placerGone{name}, now)
	case "tick":
		return pt.ticks(kv)
	case "fits":
		b, err := strconv.ParseInt(name, 10, 64)
		if err != nil {
			return "", err
		}
		n, ok := c.fits(b)
		return fmt.Sprintf("slots=%d ok=%v\n", n, ok), nil
	case "show":
		return pt.show(), nil
	default:
		return "", fmt.Errorf("unknown command %q", d.Cmd)
	}
	return pt.ready(rd), nil
}

// moveTo sets the clock to at after the start.
func (pt *placerTranscript) moveTo(at string) error {
	dt, err := time.ParseDuration(at)
	if err != nil {
		return err
	}
	t := pt.t0.Add(dt)
	if t.Before(pt.clock) {
		return fmt.Errorf("at=%s: the clock is at %s already", at, pt.clock.Sub(pt.t0))
	}
	pt.clock = t
	return nil
}

func placementID(s string) (uint64, error) {
	id, ok := strings.CutPrefix(s, "p")
	if !ok {
		return 0, fmt.Errorf("%q is no placement (p1, p2, ...)", s)
	}
	return strconv.ParseUint(id, 10, 64)
}

func (pt *placerTranscript) heartbeat(w string, kv map[string]string) (wire.Heartbeat, error) {
	hb := wire.Heartbeat{ID: w, Solves: true, Avail: 1 << 30}
	_, hb.Leaving = kv["leaving"]
	_, nosolve := kv["nosolve"]
	hb.Solves = !nosolve
	var err error
	num := func(key string) int64 {
		v, ok := kv[key]
		if !ok || err != nil {
			return -1
		}
		var n int64
		n, err = strconv.ParseInt(v, 10, 64)
		return n
	}
	if n := num("slots"); n >= 0 {
		hb.Slots = int(n)
	}
	if n := num("avail"); n >= 0 {
		hb.Avail = n
	}
	if n := num("read"); n >= 0 {
		hb.Read = uint64(n)
	}
	if s, ok := kv["placed"]; ok && err == nil {
		for _, f := range strings.Split(s, ",") {
			var id uint64
			if id, err = placementID(f); err != nil {
				break
			}
			hb.Placed = append(hb.Placed, id)
		}
	}
	return hb, err
}

// toPlacement steps a worker's message about placement id, or its
// caller's.
func (pt *placerTranscript) toPlacement(cmd string, id uint64, kv map[string]string, now time.Time) placerReady {
	c := pt.core
	switch cmd {
	case "solving":
		m := &wire.Solving{}
		if e, ok := kv["record"]; ok {
			n, _ := strconv.Atoi(e)
			m.Record = &osgm.Record{Evals: n}
		} else {
			n, _ := strconv.Atoi(kv["state"])
			m.Snapshot = &osgm.Snapshot{Evals: n}
		}
		return c.Step(placerSolving{id, m}, now)
	case "solved":
		_, interrupted := kv["interrupted"]
		m := &wire.Solved{Interrupted: interrupted}
		if !interrupted {
			m.Result = &osgm.Result{}
		}
		return c.Step(placerSolved{id, m}, now)
	case "stop":
		return c.Step(placerStop{pt.byID[id]}, now)
	}
	return c.Step(placerForget{pt.byID[id]}, now)
}

// ticks fires the ticker at the clock, or every D from D to the clock,
// with the workers named beating before each.
func (pt *placerTranscript) ticks(kv map[string]string) (string, error) {
	end, at := pt.clock, pt.clock
	if from, ok := kv["from"]; ok {
		f, err := time.ParseDuration(from)
		if err != nil {
			return "", err
		}
		at = pt.t0.Add(f)
	}
	every := time.Duration(1) // once, at the clock
	if e, ok := kv["every"]; ok {
		var err error
		if every, err = time.ParseDuration(e); err != nil || every <= 0 {
			return "", fmt.Errorf("every=%s: %v", e, err)
		}
	} else if at != end {
		return "", fmt.Errorf("tick from=%s needs every=", kv["from"])
	}
	var out strings.Builder
	for ; !at.After(end); at = at.Add(every) {
		for _, w := range strings.FieldsFunc(kv["beat"], func(r rune) bool { return r == ',' }) {
			beat := map[string]string{}
			for _, k := range []string{"read", "placed"} {
				if v, ok := kv[k]; ok {
					beat[k] = v
				}
			}
			hb, err := pt.heartbeat(w, beat)
			if err != nil {
				return "", err
			}
			out.WriteString(pt.ready(pt.core.Step(placerBeat{hb}, at)))
		}
		out.WriteString(pt.ready(pt.core.Tick(at)))
	}
	return out.String(), nil
}

// ready writes what a step hands back, and checks that each caller hears
// on its placement's channel as the loop would deliver it.
func (pt *placerTranscript) ready(rd placerReady) string {
	var out strings.Builder
	for _, o := range rd.out {
		switch o.kind {
		case outSend:
			// A problem starts from its first gradient (F0), or resumes
			// from its last state, never both.
			fmt.Fprintf(&out, "send p%d to %s from", o.p.id, o.worker)
			set := o.p.req.Settings
			if set.Resume != nil {
				fmt.Fprintf(&out, " the state of %d passes", set.Resume.Evals)
			}
			if set.F0 != nil {
				out.WriteString(" F0")
			}
			out.WriteString("\n")
		case outStop:
			fmt.Fprintf(&out, "stop p%d on %s\n", o.p.id, o.worker)
		case outProbe:
			fmt.Fprintf(&out, "probe %s\n", o.worker)
		}
	}
	for _, h := range rd.heard {
		fmt.Fprintf(&out, "p%d hears ", h.p.id)
		switch ev := h.ev; {
		case ev.record != nil:
			fmt.Fprintf(&out, "a record of %d passes\n", ev.record.Evals)
		case ev.snap != nil:
			fmt.Fprintf(&out, "a state of %d passes\n", ev.snap.Evals)
		case ev.end.Interrupted:
			out.WriteString("its end: interrupted\n")
		default:
			out.WriteString("its end: a result\n")
		}
	}
	return out.String()
}

// show is where each placement runs ("waiting", in the queue's order),
// and the workers taken for stuck.
func (pt *placerTranscript) show() string {
	var out strings.Builder
	c := pt.core
	for _, id := range slices.Sorted(maps.Keys(pt.byID)) {
		p := pt.byID[id]
		switch i := slices.Index(c.waiting, p); {
		case c.byID[id] != p:
			fmt.Fprintf(&out, "p%d ended\n", id)
		case p.worker != "":
			fmt.Fprintf(&out, "p%d on %s\n", id, p.worker)
		case i >= 0:
			fmt.Fprintf(&out, "p%d waiting %d\n", id, i+1)
		}
	}
	for _, w := range slices.Sorted(maps.Keys(c.workers)) {
		if c.workers[w].stuck {
			fmt.Fprintf(&out, "%s stuck\n", w)
		}
	}
	return out.String()
}
