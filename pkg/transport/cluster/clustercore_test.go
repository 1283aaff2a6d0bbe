package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/osgm-svm/osgm/pkg/cols"
	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/transport/internal/transcript"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// clusterRecorder is a coordinator core's world in tests: it writes down
// the points, assignments and probes the core sends, and is connected to
// NATS or not as the transcript says.
type clusterRecorder struct {
	out     strings.Builder
	offline bool
	sent    map[pointKey][]byte // the broadcasts, by what a worker puts their chunks together by
}

// pointKey is what a worker's Assembler keys a broadcast's chunks by,
// beside the kind and job: two different points under one key could be
// put together from chunks of both.
type pointKey struct {
	round   uint64
	version uint32
}

func (r *clusterRecorder) connected() bool { return !r.offline }

func (r *clusterRecorder) sendPoint(subj string, round uint64, version uint32, pieces [][]byte) (int64, error) {
	b := bytes.Join(pieces, nil)
	if subj == wire.DownSubject(transcriptJob) {
		if r.sent == nil {
			r.sent = map[pointKey][]byte{}
		}
		k := pointKey{round, version}
		if before, ok := r.sent[k]; ok && !bytes.Equal(before, b) {
			return 0, fmt.Errorf("round %d: two different broadcasts numbered %d", round, version)
		}
		r.sent[k] = bytes.Clone(b)
	}
	p, err := wire.DecodePointParts([][]byte{b}, nil)
	if err != nil {
		return 0, err
	}
	to := "all"
	if id, ok := strings.CutPrefix(subj, wire.WorkerSubject("")); ok {
		to = id
	}
	x := "with x"
	if len(p.X) == 0 {
		x = "without x"
	}
	tree := ""
	if len(p.Owners) > 0 {
		// Each shard's owner, which adds the nodes it is first in.
		owners := make([]string, len(p.Owners))
		for s, o := range p.Owners {
			owners[s] = p.Relays[o]
		}
		tree = " tree=" + strings.Join(owners, ",")
	}
	fmt.Fprintf(&r.out, "point round=%d to=%s op=%s %s%s\n", round, to, opNames[p.Op], x, tree)
	return int64(len(b)), nil
}

func (r *clusterRecorder) assign(id string, a wire.Assign) error {
	ids := make([]int, len(a.Shards))
	for i, s := range a.Shards {
		ids[i] = s.ID
	}
	fmt.Fprintf(&r.out, "assign %s shards=%s", id, transcript.Spans(ids))
	if len(a.Describe) > 0 {
		fmt.Fprintf(&r.out, " describe=%s", transcript.Spans(a.Describe))
	}
	r.out.WriteString("\n")
	return nil
}

func (r *clusterRecorder) probeSubject(id string) error {
	fmt.Fprintf(&r.out, "probe %s\n", id)
	return nil
}

func (r *clusterRecorder) recycle([]byte) {}

var opNames = map[wire.Op]string{wire.OpEval: "eval", wire.OpHessVec: "hessvec", wire.OpHessVecAt: "hessvec-at",
	wire.OpEvalDiag: "evaldiag", wire.OpEvalHess: "evalhess", wire.OpCorrect: "correct"}

// clusterTranscript is one coordinator core of eight shards on a recorder,
// with a clock that moves only when the transcript says so.
type clusterTranscript struct {
	core  *clusterCore
	rec   *clusterRecorder
	logs  *observer.ObservedLogs
	clock time.Time
	round *roundState // the round under way (nil: none, Load's time)
	added []string
	beats map[string]wire.Heartbeat // each worker's last heartbeat, for tick's beat=
}

const transcriptJob = 1

func newClusterTranscript() *clusterTranscript {
	zc, logs := observer.New(zapcore.InfoLevel)
	ranges := make([]input.Range, 8)
	for i := range ranges {
		ranges[i] = input.Range{ID: i, Start: int64(100 * i), End: int64(100 * (i + 1))}
	}
	cfg := Config{Job: transcriptJob, Ranges: ranges, MinWorkers: 1, HeartbeatTimeout: 3 * time.Second,
		ResendAfter: 3 * time.Second, LoadStall: time.Minute, Points: PointsBroadcast, Reduce: ReduceTree, Log: zap.New(zc)}
	ct := &clusterTranscript{rec: &clusterRecorder{}, logs: logs, clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		beats: map[string]wire.Heartbeat{}}
	ct.core = newClusterCore(cfg, ct.rec)
	ct.core.now = func() time.Time { return ct.clock }
	return ct
}

// TestClusterTranscripts steps a coordinator's core through the
// protocol's cases and compares what it sends, and logs, with the
// transcripts in testdata/cluster (-rewrite writes them anew). Timeouts:
// heartbeats 3 s, resends 3 s.
//
// Commands:
//
//	heartbeat W [held=0-3] [loading=4] [job=J] [reconnects=N] [leaving]
//	balance                    Load's first assignment, once workers came
//	meta W shard=0-3           shards' descriptions from worker W
//	round op=eval|hessvec [stamp=S]   the next round's point goes out
//	result W round=R shard=0-3 | node=L.I   shards' partials or a node's sum
//	needx W round=R
//	gone W                     the server: nobody holds W's subject
//	tick D [beat=W,...]        D later (1s, 250ms) the workers named beat
//	                           as last time, and the ticker fires
//	offline | online           this coordinator's connection to NATS
//	reconnected                its connection came back
//	owners                     who answers for each shard
//	dropped                    messages dropped, by reason
func TestClusterTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/cluster", func(t *testing.T, path string) {
		ct := newClusterTranscript()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			ct.rec.out.Reset()
			ct.added = nil
			seen := ct.logs.Len()
			err := ct.step(d)
			var out strings.Builder
			for _, e := range ct.logs.All()[seen:] {
				fmt.Fprintf(&out, "log: %s", e.Message)
				fields := e.ContextMap()
				for _, k := range []string{"worker", "shard", "shards", "from", "to", "why"} {
					if v, ok := fields[k]; ok {
						fmt.Fprintf(&out, " %s=%v", k, v)
					}
				}
				out.WriteString("\n")
			}
			out.WriteString(ct.rec.out.String())
			for _, a := range ct.added {
				out.WriteString(a + "\n")
			}
			if err != nil {
				fmt.Fprintf(&out, "error: %v\n", err)
			}
			return out.String()
		})
	})
}

func (ct *clusterTranscript) step(d *datadriven.TestData) error {
	args := map[string]string{}
	var worker string
	for _, a := range d.CmdArgs {
		if len(a.Vals) == 0 && worker == "" && a.Key != "leaving" {
			worker = a.Key
			continue
		}
		args[a.Key] = strings.Join(a.Vals, ",")
	}
	num := func(key string, def uint64) (uint64, error) {
		s, ok := args[key]
		if !ok {
			return def, nil
		}
		return strconv.ParseUint(s, 10, 64)
	}
	c := ct.core
	switch d.Cmd {
	case "heartbeat":
		hb, err := ct.heartbeat(worker, args)
		if err != nil {
			return err
		}
		ct.beats[worker] = hb
		return ct.beat(hb)
	case "balance":
		return c.describe()
	case "meta":
		ids, err := transcript.ParseSpans(args["shard"])
		if err != nil {
			return err
		}
		for _, s := range ids {
			m := shard.Meta{ID: s, Rows: 10, NNZ: 20, MaxIndex: 3, Labels: []float64{-1, 1}, LabelCount: []int{5, 5}, Cols: cols.NewList([]uint32{0, 1, 2})}
			if err := ct.up(upMsg{kind: wire.KindMeta, shard: s, payload: wire.EncodeMeta(worker, &m)}); err != nil {
				return err
			}
		}
	case "round":
		return ct.startRound(args)
	case "result":
		return ct.result(args)
	case "needx":
		r, err := num("round", c.round)
		if err != nil {
			return err
		}
		return ct.up(upMsg{kind: wire.KindNeedX, round: r, payload: []byte(worker)})
	case "gone":
		return c.Step(heardGone{worker})
	case "reduce":
		// Who adds the sums from now on: tree (the harness's default) or
		// star.
		return c.cfg.Reduce.Set(d.CmdArgs[0].Key)
	case "tick":
		dt, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			return err
		}
		ct.clock = ct.clock.Add(dt)
		if s, ok := args["beat"]; ok {
			for _, w := range strings.Split(s, ",") {
				if err := ct.beat(ct.beats[w]); err != nil {
					return err
				}
			}
		}
		return c.Tick(ct.clock)
	case "offline", "online":
		ct.rec.offline = d.Cmd == "offline"
	case "reconnected":
		return c.Step(heardReconnect{})
	case "owners":
		for s, o := range c.owner {
			fmt.Fprintf(&ct.rec.out, "shard %d: %s", s, o)
			if to, ok := c.incoming[s]; ok {
				fmt.Fprintf(&ct.rec.out, " -> %s", to)
			}
			ct.rec.out.WriteString("\n")
		}
	case "dropped":
		transcript.WriteDropped(&ct.rec.out, c.bad.Dropped())
		if n := c.bad.Late(); n > 0 {
			fmt.Fprintf(&ct.rec.out, "%d: late result\n", n)
		}
	default:
		return fmt.Errorf("unknown command %q", d.Cmd)
	}
	return nil
}

// beat hands the core a heartbeat.
func (ct *clusterTranscript) beat(hb wire.Heartbeat) error {
	return ct.core.Step(heardBeat{hb})
}

func (ct *clusterTranscript) heartbeat(worker string, args map[string]string) (wire.Heartbeat, error) {
	hb := wire.Heartbeat{ID: worker, Name: worker, Job: transcriptJob, OwnPoints: true}
	var err error
	if s, ok := args["held"]; ok {
		if hb.Held, err = transcript.ParseSpans(s); err != nil {
			return hb, err
		}
	}
	if s, ok := args["loading"]; ok {
		if hb.Loading, err = transcript.ParseSpans(s); err != nil {
			return hb, err
		}
	}
	if s, ok := args["job"]; ok {
		if hb.Job, err = strconv.ParseUint(s, 10, 64); err != nil {
			return hb, err
		}
	}
	if s, ok := args["reconnects"]; ok {
		if hb.Reconnects, err = strconv.ParseUint(s, 10, 64); err != nil {
			return hb, err
		}
	}
	_, hb.Leaving = args["leaving"]
	return hb, nil
}

// up hands the core a message from a worker: to the round under way, or
// to Load's collection of descriptions.
func (ct *clusterTranscript) up(m upMsg) error {
	if err := ct.core.Step(heardUp{m}); err != nil || ct.round == nil {
		return err
	}
	if ct.round.done() {
		ct.round.finish()
		ct.core.endRound()
		ct.added = append(ct.added, fmt.Sprintf("round %d complete", ct.core.round))
		ct.round = nil
	}
	return nil
}

// startRound sends the next round's point: a three-coordinate point of
// one problem.
func (ct *clusterTranscript) startRound(args map[string]string) error {
	if ct.round != nil {
		return errors.New("a round is under way")
	}
	ops := map[string]wire.Op{"eval": wire.OpEval, "hessvec": wire.OpHessVec}
	op, ok := ops[args["op"]]
	if !ok {
		return fmt.Errorf("no op %q", args["op"])
	}
	stamp, _ := strconv.ParseUint(args["stamp"], 10, 64)
	pt := &wire.Point{Op: op, Labels: []float64{-1, 1}, Stamp: stamp, X: [][]float64{{0.1, 0.2, 0.3, 0}}, Terms: shard.Terms{Bias: 1}}
	if op == wire.OpHessVec {
		pt.V = [][]float64{{1, 1, 1, 1}}
		ct.core.withoutX(pt)
	}
	r, err := ct.core.startRound(pt, func(p *reduce.Partial) error {
		what := fmt.Sprintf("shard %d", p.Shard)
		if p.Group {
			what = fmt.Sprintf("node %d.%d", p.Level, p.Shard)
		}
		if p.Dense {
			what += fmt.Sprintf(" (the workers' root, %d hops)", ct.core.stats.get().Hops)
		}
		ct.added = append(ct.added, "added "+what)
		return nil
	})
	ct.round = r
	return err
}

// result is a worker's partial of one shard, a node's sum, or (root=H)
// the root as the workers added it along H hops.
func (ct *clusterTranscript) result(args map[string]string) error {
	round, err := strconv.ParseUint(args["round"], 10, 64)
	if err != nil {
		return err
	}
	send := func(kind wire.Kind, id int) error {
		part := &reduce.Partial{Shard: id, Loss: []float64{1}, Grad: []float64{0.5, 0.5, 0.5}, BiasGrad: []float64{0.25}}
		return ct.up(upMsg{kind: kind, round: round, shard: id, payload: wire.AppendPartialAs(nil, part, true)})
	}
	if h, ok := args["root"]; ok {
		// The root as the workers added it, over the point's coordinates.
		hops, err := strconv.Atoi(h)
		if err != nil {
			return err
		}
		part := &reduce.Partial{Loss: []float64{1}, Grad: []float64{0.5, 0.5, 0.5}, BiasGrad: []float64{0.25}}
		id := int(reduce.Root(len(ct.core.owner)).Wire())
		return ct.up(upMsg{kind: wire.KindRelayNode, round: round, shard: id, payload: slices.Concat(wire.RelayPieces(hops, part, nil, true)...)})
	}
	if s, ok := args["node"]; ok {
		node, err := transcript.ParseNode(s)
		if err != nil {
			return err
		}
		return send(wire.KindGroup, int(node.Wire()))
	}
	ids, err := transcript.ParseSpans(args["shard"])
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := send(wire.KindPartial, id); err != nil {
			return err
		}
	}
	return nil
}

// TestHeldListsInAnyOrder: the core looks a heartbeat's shards up by
// binary search, so a list that came unsorted is sorted first: a worker
// holding every shard it was given, listed in any order, lacks none.
func TestHeldListsInAnyOrder(t *testing.T) {
	for _, c := range []struct {
		held, loading []int
		lacks         bool
	}{
		{[]int{5, 1, 9}, []int{3}, false},
		{[]int{9, 5}, []int{3, 1}, false},
		{[]int{9, 5, 3}, nil, true},
		{nil, nil, true},
	} {
		hb := wire.Heartbeat{Held: sortedIDs(c.held), Loading: sortedIDs(c.loading)}
		if got := lacks(hb, []int{1, 3, 5, 9}); got != c.lacks {
			t.Errorf("held %v, loading %v: lacks %v, want %v", c.held, c.loading, got, c.lacks)
		}
	}
}
