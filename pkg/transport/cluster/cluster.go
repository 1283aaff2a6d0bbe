// Package cluster is the coordinator's side of the protocol: the Cluster
// backend, a core stepped by the workers' messages and by ticks with its
// NATS loop around it, and the placement of whole problems on workers
// (Placer, Placed).
package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/transport"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// Cluster is an objective.Backend whose shards live on workers reached over
// NATS. It assigns shards, notices workers that die or join, and moves
// shards so that every round completes; results are added in shard order,
// so none of this changes a bit of the outcome.
//
// It is the NATS loop around a clusterCore: subscriptions decode, check
// and queue, and Load and the rounds step the core on what comes, and on
// ticks, from one goroutine.
type Cluster struct {
	core *clusterCore
	// Its shards are on workers: it neither forks nor places (Placed
	// does), and its partials are decoded into memory of its own.
	objective.Alone
	nc *nats.Conn

	ups  chan upMsg
	hbs  chan wire.Heartbeat
	subs []*nats.Subscription

	reconnected chan struct{}
	unhook      func() // gives the connection its own handler back

	// A worker killed outright says no goodbye, and its heartbeats stop
	// only one HeartbeatTimeout before it is missed; but the server drops
	// its subscriptions as soon as its connection closes. While a round
	// or Load waits, the workers it waits on are probed (see probe), and
	// the server's "no responders" for a probe comes to gone.
	probeInbox string
	gone       chan string

	asm    wire.Assembler // results; their payloads go back to it
	beats  wire.Assembler // heartbeats of several chunks
	chunks wire.Chunker   // the chunk buffer points go out in

	placed  atomic.Pointer[placedHook] // takes placed problems' messages (nil: none)
	assigns atomic.Uint64              // assignments sent, which number them
	refused sync.Map                   // workers of another wire version, told once each
}

// The job as the core holds it, for the coordinator's goroutines: the
// setters before Load, the readers at any time (what they read is set up
// before the rounds, or kept apart for other goroutines: the stats, the
// drop counts and the workers' view).

// Live is the number of workers currently alive.
func (c *Cluster) Live() int { return len(c.core.live()) }

// SetSource says where workers find the data; call before Load.
func (c *Cluster) SetSource(s wire.Source) { c.core.cfg.Source = s }

// Job is the job id on the bus.
func (c *Cluster) Job() uint64 { return c.core.cfg.Job }

// Meta is the shards as their holders described them; set by Load.
func (c *Cluster) Meta() []shard.Meta { return c.core.metas }

// ShareMeta replaces the descriptions Load decoded with local, the same
// shards' as a process holding them makes them (the embedded default's
// in-process worker), which share the shards' column maps and labels:
// they are then held once, not twice (16 MB on a 1 GB file with a
// million features). Each must equal the description it replaces. Call
// it after Load, before the first round.
func (c *Cluster) ShareMeta(local []shard.Meta) error {
	metas := c.core.metas
	if len(local) != len(metas) {
		return fmt.Errorf("transport: %d shard descriptions to share, the job has %d", len(local), len(metas))
	}
	for s := range local {
		a, b := &metas[s], &local[s]
		if a.ID != b.ID || a.Pairs != b.Pairs || !sameMeta(a, b) || !slices.Equal(a.LabelCount, b.LabelCount) {
			return fmt.Errorf("transport: shard %d: the description held here is not the one its worker sent", s)
		}
	}
	copy(metas, local)
	return nil
}

// SetClasses gives the labels' order, which every later point carries.
func (c *Cluster) SetClasses(order []float64) error {
	c.core.order = slices.Clone(order)
	return nil
}

// SetFolds makes every later point carry what workers need to number
// their rows' folds themselves.
func (c *Cluster) SetFolds(n int) error { return c.core.setFolds(n) }

// Stats returns what crossed the bus so far.
func (c *Cluster) Stats() Stats { return c.core.stats.get() }

// Dropped counts bad messages by reason.
func (c *Cluster) Dropped() map[string]int { return c.core.bad.Dropped() }

// Late returns how many results came after their round had gone out
// again or ended: harmless, counted apart from Dropped.
func (c *Cluster) Late() int { return c.core.bad.Late() }

// Workers returns every worker the job has heard from, by ID, as of the
// last heartbeat or membership change the coordinator handled.
func (c *Cluster) Workers() []WorkerView { return c.core.view.get() }

// upQueue is how many whole messages from the workers wait for the loop.
const upQueue = 4096

// New subscribes to the job's subjects.
func New(nc *nats.Conn, cfg Config) (*Cluster, error) {
	cfg.Job = cmp.Or(cfg.Job, rand.Uint64()|1)
	cfg.HeartbeatTimeout = cmp.Or(cfg.HeartbeatTimeout, transport.DefaultHeartbeatTimeout)
	cfg.ResendAfter = cmp.Or(cfg.ResendAfter, transport.DefaultResendAfter)
	cfg.WaitReport = cmp.Or(cfg.WaitReport, transport.DefaultWaitReport)
	cfg.LoadStall = cmp.Or(cfg.LoadStall, transport.DefaultLoadStall)
	cfg.MinWorkers = max(cfg.MinWorkers, 1)
	cfg.Log = cmp.Or(cfg.Log, zap.NewNop())
	n := len(cfg.Ranges)
	c := &Cluster{nc: nc, ups: make(chan upMsg, upQueue), hbs: make(chan wire.Heartbeat, 256), reconnected: make(chan struct{}, 1), gone: make(chan string, 16)}
	c.beats.MaxPending = 64
	c.core = newClusterCore(cfg, c)
	c.asm.MaxPending = 4 * max(n, 16)
	up, err := nc.Subscribe(wire.UpSubject(cfg.Job), c.receiveUp)
	if err != nil {
		return nil, err
	}
	up.SetPendingLimits(-1, -1)
	hb, err := nc.Subscribe(wire.SubjectHeartbeat, c.receiveHeartbeat)
	if err != nil {
		up.Unsubscribe()
		return nil, err
	}
	c.probeInbox = nc.NewInbox()
	probes, err := nc.Subscribe(c.probeInbox+".>", c.receiveProbe)
	if err != nil {
		up.Unsubscribe()
		hb.Unsubscribe()
		return nil, err
	}
	c.subs = []*nats.Subscription{up, hb, probes}
	// Workers started right after this (the embedded ones) announce
	// themselves at once; those running already answer the hello, once
	// the subscription is in place, instead of at their next heartbeat.
	if err := nc.Flush(); err != nil {
		c.Close()
		return nil, err
	}
	if err := nc.Publish(wire.SubjectHello, nil); err != nil {
		c.Close()
		return nil, err
	}
	c.unhook = transport.OnReconnect(nc, func() {
		select {
		case c.reconnected <- struct{}{}:
		default:
		}
	})
	return c, nil
}

// connected is clusterIO's.
func (c *Cluster) connected() bool { return c.nc.IsConnected() }

// sendPoint is clusterIO's: the point in chunks the server takes.
func (c *Cluster) sendPoint(subj string, round uint64, version uint32, pieces [][]byte) (int64, error) {
	var sent int64
	err := c.chunks.SendPieces(wire.KindPoint, c.core.cfg.Job, round, version, pieces, int(c.nc.MaxPayload()), func(b []byte) error {
		sent += int64(len(b))
		return c.nc.Publish(subj, b)
	})
	if errors.Is(err, nats.ErrReconnectBufExceeded) {
		err = errPointBuffered
	}
	return sent, err
}

// assign is clusterIO's. Each assignment has a number of its own (its
// chunks' Round): a worker puts one together only from its own chunks.
func (c *Cluster) assign(id string, a wire.Assign) error {
	body, err := json.Marshal(a)
	if err != nil {
		return err
	}
	return wire.Chunks(wire.KindAssign, c.core.cfg.Job, c.assigns.Add(1), 0, body, int(c.nc.MaxPayload()), func(b []byte) error {
		return c.nc.Publish(wire.WorkerSubject(id), b)
	})
}

// probeSubject is clusterIO's: a probe on the worker's own subject with a reply
// subject that names it, which the server answers (receiveProbe) only
// when nobody holds the subject. Workers never answer probes.
func (c *Cluster) probeSubject(id string) error {
	return wire.Chunks(wire.KindProbe, c.core.cfg.Job, 0, 0, nil, int(c.nc.MaxPayload()), func(b []byte) error {
		return c.nc.PublishMsg(&nats.Msg{Subject: wire.WorkerSubject(id), Reply: c.probeInbox + "." + id, Data: b})
	})
}

// recycle is clusterIO's.
func (c *Cluster) recycle(payload []byte) { c.asm.Recycle(payload) }

// receiveUp takes a chunk of a worker's result, description or request
// and, once the message is whole, queues it for the round or Load
// waiting (onUp). The receive methods run on the subscriptions'
// goroutines: they check what needs no state, and queue.
func (c *Cluster) receiveUp(m *nats.Msg) {
	n := len(c.core.cfg.Ranges)
	h, payload, err := wire.DecodeChunk(m.Data)
	switch {
	case err != nil:
		c.core.bad.Add(err, h.Kind)
		return
	case h.Job != c.core.cfg.Job:
		c.core.bad.Add(errors.New("wrong job id"), h.Kind)
		return
	case h.Kind == wire.KindSolving || h.Kind == wire.KindSolved:
		if pl := c.placed.Load(); pl != nil {
			pl.side.receive(h, payload)
		}
		return
	case h.Kind != wire.KindPartial && h.Kind != wire.KindMeta && h.Kind != wire.KindError && h.Kind != wire.KindGroup && h.Kind != wire.KindNeedX && h.Kind != wire.KindRelayNode:
		c.core.bad.Add(nil, h.Kind)
		return
	case h.Kind == wire.KindRelayNode && h.Shard != reduce.Root(n).Wire():
		c.core.bad.Add(errors.New("a relayed sum that is not the root's"), h.Kind)
		return
	case h.Kind != wire.KindGroup && h.Kind != wire.KindRelayNode && int(h.Shard) >= n:
		c.core.bad.Add(errors.New("shard id out of range"), h.Kind)
		return
	}
	if h.Kind == wire.KindGroup {
		if _, err := reduce.NodeFromWire(h.Shard, n); err != nil {
			c.core.bad.Add(errors.New("shard id out of range"), h.Kind)
			return
		}
	}
	c.core.stats.count(func(s *Stats) { s.BytesUp += int64(len(m.Data)) })
	if whole, ok := c.asm.Add(h, payload); ok {
		c.ups <- upMsg{kind: h.Kind, round: h.Round, shard: int(h.Shard), payload: whole}
	}
}

// receiveHeartbeat queues a worker's heartbeat (for onHeartbeat), or
// drops it when the queue is full: a newer one follows shortly.
func (c *Cluster) receiveHeartbeat(m *nats.Msg) {
	h, payload, err := wire.DecodeChunk(m.Data)
	if ve := (*wire.VersionError)(nil); errors.As(err, &ve) {
		c.refuse(ve, m.Data)
	}
	if err != nil || h.Kind != wire.KindHeartbeat {
		c.core.bad.Add(err, h.Kind)
		return
	}
	whole, ok := c.beats.Add(h, payload)
	if !ok {
		return
	}
	var b wire.Heartbeat
	if err := json.Unmarshal(whole, &b); err != nil {
		c.core.bad.Add(fmt.Errorf("heartbeat: %w", err), h.Kind)
		return
	}
	if b.ID == "" {
		c.core.bad.Add(errors.New("heartbeat without a worker id"), h.Kind)
		return
	}
	if pl := c.placed.Load(); pl != nil {
		pl.side.heartbeat(b)
	}
	select {
	case c.hbs <- b:
	default:
	}
}

// refuse says, once per worker, that a worker of another release asked
// to join: it is given no work, whatever it holds. It is sent a probe
// of this version, which it cannot read and logs with both versions.
func (c *Cluster) refuse(ve *wire.VersionError, chunk []byte) {
	id, name := wire.ForeignHeartbeat(chunk)
	if _, told := c.refused.LoadOrStore(id, true); told {
		return
	}
	c.core.log.Error("a worker of another release asked to join, and is given no work: run one release on every host",
		zap.String("worker", id), zap.String("name", name), zap.Uint8("its_wire_version", ve.Got), zap.Uint8("wire_version", wire.Version))
	if id != "" {
		c.probeSubject(id)
	}
}

// placedSide is what the Cluster hands on for placed problems: a
// Placer, which is built on the Cluster and hooks itself on (hookPlaced),
// hears the heartbeats, the workers gone, and their Solving and Solved.
type placedSide interface {
	heartbeat(wire.Heartbeat)
	gone(id string)
	receive(h wire.Header, payload []byte)
}

type placedHook struct{ side placedSide }

// hookPlaced hands placed problems' messages to side until unhook.
func (c *Cluster) hookPlaced(side placedSide) (unhook func()) {
	c.placed.Store(&placedHook{side})
	return func() { c.placed.Store(nil) }
}

// receiveProbe hears the server say that nobody holds a worker's subject
// (see probe, onGone): workers never answer a probe, only the server
// does, with this status.
func (c *Cluster) receiveProbe(m *nats.Msg) {
	if m.Header.Get("Status") != noResponders {
		return
	}
	id := strings.TrimPrefix(m.Subject, c.probeInbox+".")
	if pl := c.placed.Load(); pl != nil {
		pl.side.gone(id)
	}
	select {
	case c.gone <- id:
	default: // the next probe asks again
	}
}

// Close unsubscribes.
func (c *Cluster) Close() {
	for _, s := range c.subs {
		s.Unsubscribe()
	}
	if c.unhook != nil {
		c.unhook()
	}
}

// Load waits for MinWorkers workers, assigns every shard and collects the
// shards' descriptions.
func (c *Cluster) Load(ctx context.Context) error {
	c.core.waitForWorkers()
	if err := c.until(ctx, c.core.enoughWorkers, nil); err != nil {
		return err
	}
	if err := c.core.describe(); err != nil {
		return err
	}
	return c.until(ctx, c.core.described.all, nil)
}

// until steps the core on what the subscriptions hear, and ticks it,
// until done, ctx ends, the core fails, or the connection is closed for
// good. stop is Config.Stop in a round (nil in Load).
func (c *Cluster) until(ctx context.Context, done func() bool, stop <-chan struct{}) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !done() {
		var err error
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			stop = nil
			err = c.core.Step(heardStop{})
		case <-c.reconnected:
			err = c.core.Step(heardReconnect{})
		case hb := <-c.hbs:
			err = c.core.Step(heardBeat{hb})
		case id := <-c.gone:
			err = c.core.Step(heardGone{id})
		case m := <-c.ups:
			err = c.core.Step(heardUp{m})
		case now := <-tick.C:
			if err = transport.ClosedError(c.nc); err != nil {
				return c.core.wrap(err) // it never comes back
			}
			err = c.core.Tick(now)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
