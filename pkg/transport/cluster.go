package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// ClusterConfig configures the coordinator's side of the protocol.
type ClusterConfig struct {
	Job        uint64 // 0: random
	Source     wire.Source
	Ranges     []shard.Range
	MinWorkers int
	// HeartbeatTimeout declares a silent worker dead.
	HeartbeatTimeout time.Duration
	// ResendAfter re-broadcasts a round's point when results stop coming.
	ResendAfter time.Duration
	// Stop, when closed, ends the round under way with ErrStopped unless
	// it completes within stopGrace: with every worker gone, a round
	// waits for one to come (their shards move to it), and only this or
	// NoWorkerTimeout ends the wait; a round that is going well ends, and
	// the state after it can be saved.
	Stop <-chan struct{}
	// NoWorkerTimeout, when positive, fails a round that has had no live
	// worker, or no connection to NATS, for this long (ErrNoWorkers);
	// zero waits for ever, for workers or a server that a supervisor
	// restarts.
	NoWorkerTimeout time.Duration
	// LoadStall takes a worker whose load of shards the job waits for
	// has read nothing for this long for stuck (see unstickLoads).
	LoadStall time.Duration
	// Points says whether rounds' points may go to each worker with only
	// the columns its shards touch (see PointMode).
	Points PointMode
	// Place says whether one-vs-rest problems go whole to workers (see
	// Placed); the coordinator acts on it.
	Place PlaceMode
	// Reduce says who adds the workers' sums (see ReduceMode).
	Reduce ReduceMode
	// WaitReport is how often Load logs that it still waits for workers
	// (DefaultWaitReport): without it, a cluster whose workers never
	// start shows one line and then nothing.
	WaitReport time.Duration
	Log        *zap.Logger
}

var (
	// ErrStopped is a round's error once ClusterConfig.Stop is closed.
	ErrStopped = errors.New("stopped while the round waited on workers")
	// ErrNoWorkers is a round's error after NoWorkerTimeout without one.
	ErrNoWorkers = errors.New("no live worker")
)

// maxResends bounds the broadcasts of one round that bring nothing back
// while workers are alive.
const maxResends = 20

// stopGrace is how long a round may go on once Stop is closed: a round
// takes milliseconds to seconds, and docker stop kills after 10 s.
const stopGrace = 2 * time.Second

// Cluster is an objective.Backend whose shards live on workers reached over
// NATS. It assigns shards, notices workers that die or join, and moves
// shards so that every round completes; results are added in shard order,
// so none of this changes a bit of the outcome.
//
// It is the NATS loop around a clusterCore: subscriptions decode, check
// and queue, and Load and the rounds step the core on what comes, and on
// ticks, from one goroutine.
type Cluster struct {
	*clusterCore
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
	chunks wire.Chunker   // the chunk buffer points go out in

	placed atomic.Pointer[Placer] // takes placed problems' messages (nil: none)
}

// clusterCore is the coordinator's side of the protocol: who holds which
// shard, the round under way and what came back, and the clocks that tell
// a slow worker from a lost one. It is stepped by heartbeats, results,
// probes' answers, reconnections and ticks, and acts through its
// clusterIO; it has no connection or goroutine, and reads the time from
// now, so the transcript tests (testdata/cluster) step it by hand.
type clusterCore struct {
	cfg ClusterConfig
	io  clusterIO
	log *zap.Logger
	now func() time.Time

	workers  map[string]*peer
	owner    []string       // shard -> worker answering for it
	incoming map[int]string // shard -> worker it is moving to
	metas    []shard.Meta
	haveMet  []bool
	order    []float64
	folds    uint32   // cross-validation folds (0: none), see SetFolds
	rows     uint64   // rows of the job
	starts   []uint64 // first global row of each shard
	round    uint64

	bad counter

	heldSince map[int]time.Time // Load: since when a shard held is undescribed
	asked     map[holding]int   // Load: asks for a shard's description its holder left unanswered

	// A NATS server restart loses what was in flight, and clients come
	// back one by one. Whoever is back last makes the round go out again
	// soon (resendAt): this coordinator (reconnected) or a worker (its
	// heartbeat's Reconnects grew). While cut off (deafSince) the
	// coordinator hears no heartbeat and declares nobody dead for it.
	resendAt   time.Time
	deafSince  time.Time
	probeQuiet time.Time // until when a reconnection makes probes' answers moot

	// Memory kept from round to round: the point's head, and the
	// partials decoded in the last round with the payloads their vectors
	// view, free again once the next round starts (its reduction was
	// over when the round ended).
	pointBuf []byte
	decoded  []*decodedPartial
	reuse    []*decodedPartial
	viewed   [][]byte

	// The last round's point, by its stamp, and the workers live when it
	// went out: a Hessian-vector product at that point goes without x
	// (pointHessVecAt) while they are the same.
	lastStamp  uint64
	lastLive   []string
	lastLayout *pointLayout

	// How points go out for the current owners (see layoutFor).
	layout     *pointLayout
	layoutOf   []string // the owners it was worked out for (nil: not yet)
	layoutFull int
	layoutDim  int

	// Whether rounds go along the workers' tree, for these owners and
	// points of this many coordinates (see treePays).
	treeOf   []string
	treeDim  int
	treeWins bool

	// How long the last rounds took, to tell a stuck worker from a slow
	// round (see unstick).
	took    [16]time.Duration
	tookPos int

	// Stats for the caller.
	mu    sync.Mutex
	stats Stats
}

// clusterIO is what the coordinator's core asks of the world around it.
type clusterIO interface {
	// connected reports whether the coordinator is on NATS now.
	connected() bool
	// sendPoint sends a round's point on subj, and the bytes it sent.
	sendPoint(subj string, round uint64, pieces [][]byte) (int64, error)
	// assign tells a worker its shards.
	assign(id string, a wire.Assign) error
	// probeSubject asks the server whether anyone holds worker id's
	// subject: the core hears by onGone if nobody does.
	probeSubject(id string) error
	// recycle takes back a result's payload, the core done with it.
	recycle(payload []byte)
}

// Stats count what crossed the bus.
type Stats struct {
	Rounds int
	// WithoutX counts the Hessian-vector rounds whose point went out
	// without x, the last round's (see pointHessVecAt).
	WithoutX int
	// Compute sums, over rounds, the longest time a worker reported
	// computing in the round; the rest of the rounds' time is the bus.
	Compute   time.Duration
	BytesDown int64 // points sent
	// BytesToWorkers is what the server sent on of them: a broadcast
	// once to every live worker, an own point to its worker.
	BytesToWorkers int64
	BytesUp        int64 // results received
	ResultsUp      int   // result messages (shard partials and node sums) taken
	// TreeRounds counts the rounds whose sums the workers added among
	// themselves, and Hops is, in the last, the longest chain of messages
	// from a worker to the coordinator.
	TreeRounds, Hops int
	Resends          int
	Reassignments    int
}

type peer struct {
	id, name   string
	lastSeen   time.Time
	reconnects uint64
	held       []int
	loading    []int
	dead       bool
	probed     time.Time // the last probe sent
	noSub      time.Time // since when probes find nobody on its subject (zero: they do not)
	stuck      bool      // lost for this job though alive: it stopped answering rounds or loading (see unstick)
	read       uint64    // its heartbeat's Read
	progress   time.Time // when its loads last read something, or it had none
	ownPoints  bool      // it takes points on its own subject
}

type upMsg struct {
	kind    wire.Kind
	round   uint64
	shard   int
	payload []byte
}

// NewCluster subscribes to the job's subjects.
func NewCluster(nc *nats.Conn, cfg ClusterConfig) (*Cluster, error) {
	if cfg.Job == 0 {
		cfg.Job = rand.Uint64() | 1
	}
	if cfg.HeartbeatTimeout == 0 {
		cfg.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if cfg.ResendAfter == 0 {
		cfg.ResendAfter = DefaultResendAfter
	}
	if cfg.WaitReport == 0 {
		cfg.WaitReport = DefaultWaitReport
	}
	if cfg.LoadStall == 0 {
		cfg.LoadStall = DefaultLoadStall
	}
	if cfg.MinWorkers < 1 {
		cfg.MinWorkers = 1
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	n := len(cfg.Ranges)
	c := &Cluster{nc: nc, ups: make(chan upMsg, upQueue), hbs: make(chan wire.Heartbeat, 256), reconnected: make(chan struct{}, 1), gone: make(chan string, 16)}
	c.clusterCore = newClusterCore(cfg, c)
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
	c.unhook = onReconnect(nc, func() {
		select {
		case c.reconnected <- struct{}{}:
		default:
		}
	})
	return c, nil
}

func newClusterCore(cfg ClusterConfig, io clusterIO) *clusterCore {
	n := len(cfg.Ranges)
	c := &clusterCore{cfg: cfg, io: io, log: cfg.Log, now: time.Now,
		workers: map[string]*peer{}, owner: make([]string, n), incoming: map[int]string{}, metas: make([]shard.Meta, n), haveMet: make([]bool, n)}
	c.bad.log = c.log
	return c
}

// connected is clusterIO's.
func (c *Cluster) connected() bool { return c.nc.IsConnected() }

// sendPoint is clusterIO's: the point in chunks the server takes.
func (c *Cluster) sendPoint(subj string, round uint64, pieces [][]byte) (int64, error) {
	var sent int64
	err := c.chunks.SendPieces(wire.KindPoint, c.cfg.Job, round, 0, pieces, int(c.nc.MaxPayload()), func(b []byte) error {
		sent += int64(len(b))
		return c.nc.Publish(subj, b)
	})
	return sent, err
}

// assign is clusterIO's.
func (c *Cluster) assign(id string, a wire.Assign) error {
	body, err := json.Marshal(a)
	if err != nil {
		return err
	}
	return wire.Chunks(wire.KindAssign, c.cfg.Job, 0, 0, body, int(c.nc.MaxPayload()), func(b []byte) error {
		return c.nc.Publish(wire.WorkerSubject(id), b)
	})
}

// probeSubject is clusterIO's: a probe on the worker's own subject with a reply
// subject that names it, which the server answers (receiveProbe) only
// when nobody holds the subject. Workers never answer probes.
func (c *Cluster) probeSubject(id string) error {
	return wire.Chunks(wire.KindProbe, c.cfg.Job, 0, 0, nil, int(c.nc.MaxPayload()), func(b []byte) error {
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
	n := len(c.cfg.Ranges)
	h, payload, err := wire.DecodeChunk(m.Data)
	switch {
	case err != nil:
		c.bad.add(err, h.Kind)
		return
	case h.Job != c.cfg.Job:
		c.bad.add(errors.New("wrong job id"), h.Kind)
		return
	case h.Kind == wire.KindSolving || h.Kind == wire.KindSolved:
		if pl := c.placed.Load(); pl != nil {
			pl.receive(h, payload)
		}
		return
	case h.Kind != wire.KindPartial && h.Kind != wire.KindMeta && h.Kind != wire.KindError && h.Kind != wire.KindGroup && h.Kind != wire.KindNeedX && h.Kind != wire.KindRelayNode:
		c.bad.add(nil, h.Kind)
		return
	case h.Kind == wire.KindRelayNode && h.Shard != reduce.Root(n).Wire():
		c.bad.add(errors.New("a relayed sum that is not the root's"), h.Kind)
		return
	case h.Kind != wire.KindGroup && h.Kind != wire.KindRelayNode && int(h.Shard) >= n:
		c.bad.add(errors.New("shard id out of range"), h.Kind)
		return
	}
	if h.Kind == wire.KindGroup {
		if _, err := reduce.NodeFromWire(h.Shard, n); err != nil {
			c.bad.add(errors.New("shard id out of range"), h.Kind)
			return
		}
	}
	c.mu.Lock()
	c.stats.BytesUp += int64(len(m.Data))
	c.mu.Unlock()
	if whole, ok := c.asm.Add(h, payload); ok {
		c.ups <- upMsg{kind: h.Kind, round: h.Round, shard: int(h.Shard), payload: whole}
	}
}

// receiveHeartbeat queues a worker's heartbeat (for onHeartbeat), or
// drops it when the queue is full: a newer one follows shortly.
func (c *Cluster) receiveHeartbeat(m *nats.Msg) {
	h, payload, err := wire.DecodeChunk(m.Data)
	if err != nil || h.Kind != wire.KindHeartbeat {
		c.bad.add(err, h.Kind)
		return
	}
	var b wire.Heartbeat
	if err := json.Unmarshal(payload, &b); err != nil {
		c.bad.add(fmt.Errorf("heartbeat: %w", err), h.Kind)
		return
	}
	if b.ID == "" {
		c.bad.add(errors.New("heartbeat without a worker id"), h.Kind)
		return
	}
	if pl := c.placed.Load(); pl != nil {
		pl.heartbeat(b)
	}
	select {
	case c.hbs <- b:
	default:
	}
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
		pl.gone(id)
	}
	select {
	case c.gone <- id:
	default: // the next probe asks again
	}
}

// Live is the number of workers currently alive.
func (c *clusterCore) Live() int { return len(c.live()) }

// SetSource says where workers find the data; call before Load.
func (c *clusterCore) SetSource(s wire.Source) { c.cfg.Source = s }

// Job is the job id on the bus.
func (c *clusterCore) Job() uint64 { return c.cfg.Job }

// Stats returns what crossed the bus so far.
func (c *clusterCore) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Dropped counts bad messages by reason.
func (c *clusterCore) Dropped() map[string]int { return c.bad.Dropped() }

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
	c.log.Info("waiting for workers", zap.Int("min", c.cfg.MinWorkers))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	began := time.Now()
	report := began.Add(c.cfg.WaitReport)
	for len(c.live()) < c.cfg.MinWorkers {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case hb := <-c.hbs:
			c.onHeartbeat(hb)
		case now := <-tick.C:
			if err := closedError(c.nc); err != nil {
				return err
			}
			if now.After(report) {
				c.log.Warn("still waiting for workers", zap.Int("min", c.cfg.MinWorkers),
					zap.Int("joined", len(c.live())), zap.Duration("waited", now.Sub(began).Round(time.Second)))
				report = now.Add(c.cfg.WaitReport)
			}
		}
	}
	c.balance(true)
	for slices.Contains(c.haveMet, false) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case hb := <-c.hbs:
			c.onHeartbeat(hb)
		case m := <-c.ups:
			if err := c.onUp(m, nil); err != nil {
				return err
			}
		case <-c.reconnected:
			c.soon()
		case id := <-c.gone:
			c.onGone(id)
		case <-tick.C:
			if err := closedError(c.nc); err != nil {
				return err
			}
			c.onLoadTick()
		}
	}
	return nil
}

// onLoadTick checks on the workers while Load waits for descriptions:
// shards of lost workers move, descriptions long missing are asked for
// again, and the workers owing some are probed.
func (c *clusterCore) onLoadTick() {
	c.checkWorkers(false)
	c.askAgain()
	var owing []string
	for s, ok := range c.haveMet {
		if !ok {
			owing = append(owing, c.target(s))
		}
	}
	c.probe(owing)
}

// askAgain asks workers for the descriptions of shards they hold but
// whose descriptions have not come for ResendAfter, or at once after a
// reconnection (resendAt). Descriptions are sent once, and a server
// that cuts off a slow consumer (all of a large job's column maps
// arriving at once) or restarts drops what it had queued: Load would
// wait for ever.
func (c *clusterCore) askAgain() {
	if c.heldSince == nil {
		c.heldSince = map[int]time.Time{}
	}
	now := c.now()
	all := c.due(now)
	ask := map[string][]int{}
	for s, ok := range c.haveMet {
		id := c.target(s)
		p := c.workers[id]
		if ok || p == nil || p.dead || !slices.Contains(p.held, s) {
			continue
		}
		if since, seen := c.heldSince[s]; !all && (!seen || now.Sub(since) < c.cfg.ResendAfter) {
			if !seen {
				c.heldSince[s] = now
			}
			continue
		}
		c.heldSince[s] = now // again after another ResendAfter
		ask[id] = append(ask[id], s)
	}
	if c.asked == nil {
		c.asked = map[holding]int{}
	}
	var stuck []string
	for _, id := range slices.Sorted(maps.Keys(ask)) {
		shards := ask[id]
		unanswered := 0
		for _, s := range shards {
			if !all { // one ask each ResendAfter; not the ask at a reconnection
				c.asked[holding{id, s}]++
			}
			unanswered = max(unanswered, c.asked[holding{id, s}])
		}
		if unanswered > stuckResends && len(c.live()) > 1 {
			stuck = append(stuck, id)
			continue
		}
		c.log.Warn("shard descriptions missing; asking again", zap.String("worker", id), zap.Ints("shards", shards))
		c.sendAssign(id, shards...)
	}
	c.unstickDescriptions(stuck)
}

// holding is a shard held by a worker.
type holding struct {
	worker string
	shard  int
}

// unstickDescriptions takes workers for stuck, as unstick does, when they
// hold shards the job waits for and have left stuckResends asks for their
// descriptions unanswered: a worker whose loop hangs once its load is
// over heartbeats on, and its load has ended, so unstickLoads cannot tell.
func (c *clusterCore) unstickDescriptions(ids []string) {
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids)
	for _, id := range ids {
		if len(c.live()) < 2 {
			break
		}
		c.takeStuck(id, "it holds shards but does not describe them", zap.Int("asks unanswered", stuckResends+1))
	}
	c.balance(false)
}

func (c *clusterCore) live() []string {
	var ids []string
	for id, p := range c.workers {
		if !p.dead {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
