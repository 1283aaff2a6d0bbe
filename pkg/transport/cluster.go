package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/shard"
)

// ClusterConfig configures the coordinator's side of the protocol.
type ClusterConfig struct {
	Job        uint64 // 0: random
	Source     Source
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
	Log       *zap.Logger
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

// Cluster is a shard.Backend whose shards live on workers reached over
// NATS. It assigns shards, notices workers that die or join, and moves
// shards so that every round completes; results are added in shard order,
// so none of this changes a bit of the outcome.
type Cluster struct {
	cfg ClusterConfig
	nc  *nats.Conn
	log *zap.Logger

	ups  chan upMsg
	hbs  chan Heartbeat
	subs []*nats.Subscription

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

	// A NATS server restart loses what was in flight, and clients come
	// back one by one. Whoever is back last makes the round go out again
	// soon (resendAt): this coordinator (reconnected) or a worker (its
	// heartbeat's Reconnects grew). While cut off (deafSince) the
	// coordinator hears no heartbeat and declares nobody dead for it.
	reconnected chan struct{}
	unhook      func() // gives the connection its own handler back
	resendAt    time.Time
	deafSince   time.Time

	// A worker killed outright says no goodbye, and its heartbeats stop
	// only one HeartbeatTimeout before it is missed; but the server drops
	// its subscriptions as soon as its connection closes. While a round
	// or Load waits, the workers it waits on are probed (see probe), and
	// the server's "no responders" for a probe comes to gone.
	probeInbox string
	gone       chan string
	probeQuiet time.Time // until when a reconnection makes probes' answers moot

	// Memory kept from round to round: the point's head and chunks, and
	// the partials decoded in the last round with the payloads their
	// vectors view, free again once the next round starts (its reduction
	// was over when the round ended).
	asm      Assembler // results; their payloads go back to it
	pointBuf []byte
	chunks   chunker
	decoded  []*decodedPartial
	reuse    []*decodedPartial
	viewed   [][]byte

	// The last round's point, by its stamp, and the workers live when it
	// went out: a Hessian-vector product at that point goes without x
	// (opHessVecAt) while they are the same.
	lastStamp uint64
	lastLive  []string

	// How long the last rounds took, to tell a stuck worker from a slow
	// round (see unstick).
	took    [16]time.Duration
	tookPos int

	// Stats for the caller.
	mu    sync.Mutex
	stats Stats
}

// Stats count what crossed the bus.
type Stats struct {
	Rounds int
	// WithoutX counts the Hessian-vector rounds whose point went out
	// without x, the last round's (see opHessVecAt).
	WithoutX int
	// Compute sums, over rounds, the longest time a worker reported
	// computing in the round; the rest of the rounds' time is the bus.
	Compute       time.Duration
	BytesDown     int64 // point broadcasts
	BytesUp       int64 // results received
	ResultsUp     int   // result messages (shard partials and node sums) taken
	Resends       int
	Reassignments int
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
}

type upMsg struct {
	kind    Kind
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
	c := &Cluster{cfg: cfg, nc: nc, log: cfg.Log, ups: make(chan upMsg, upQueue), hbs: make(chan Heartbeat, 256), reconnected: make(chan struct{}, 1), gone: make(chan string, 16),
		workers: map[string]*peer{}, owner: make([]string, n), incoming: map[int]string{}, metas: make([]shard.Meta, n), haveMet: make([]bool, n)}
	c.bad.log = c.log
	asm := &c.asm
	asm.MaxPending = 4 * max(n, 16)
	up, err := nc.Subscribe(UpSubject(cfg.Job), func(m *nats.Msg) {
		h, payload, err := DecodeChunk(m.Data)
		switch {
		case err != nil:
			c.bad.add(err, h.Kind)
			return
		case h.Job != cfg.Job:
			c.bad.add(errors.New("wrong job id"), h.Kind)
			return
		case h.Kind != KindPartial && h.Kind != KindMeta && h.Kind != KindError && h.Kind != KindGroup && h.Kind != KindNeedX:
			c.bad.add(nil, h.Kind)
			return
		case h.Kind != KindGroup && int(h.Shard) >= n:
			c.bad.add(errors.New("shard id out of range"), h.Kind)
			return
		}
		if h.Kind == KindGroup {
			if _, err := shard.NodeFromWire(h.Shard, n); err != nil {
				c.bad.add(errors.New("shard id out of range"), h.Kind)
				return
			}
		}
		c.mu.Lock()
		c.stats.BytesUp += int64(len(m.Data))
		c.mu.Unlock()
		if whole, ok := asm.Add(h, payload); ok {
			c.ups <- upMsg{kind: h.Kind, round: h.Round, shard: int(h.Shard), payload: whole}
		}
	})
	if err != nil {
		return nil, err
	}
	up.SetPendingLimits(-1, -1)
	hb, err := nc.Subscribe(SubjectHeartbeat, func(m *nats.Msg) {
		h, payload, err := DecodeChunk(m.Data)
		if err != nil || h.Kind != KindHeartbeat {
			c.bad.add(err, h.Kind)
			return
		}
		var b Heartbeat
		if err := json.Unmarshal(payload, &b); err != nil {
			c.bad.add(fmt.Errorf("heartbeat: %w", err), h.Kind)
			return
		}
		if b.ID == "" {
			c.bad.add(errors.New("heartbeat without a worker id"), h.Kind)
			return
		}
		select {
		case c.hbs <- b:
		default: // a newer one follows shortly
		}
	})
	if err != nil {
		up.Unsubscribe()
		return nil, err
	}
	c.probeInbox = nc.NewInbox()
	probes, err := nc.Subscribe(c.probeInbox+".>", func(m *nats.Msg) {
		// Workers never answer a probe: only the server does, with
		// this status, when nobody holds the subject.
		if m.Header.Get("Status") != noResponders {
			return
		}
		select {
		case c.gone <- strings.TrimPrefix(m.Subject, c.probeInbox+"."):
		default: // the next probe asks again
		}
	})
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
	if err := nc.Publish(SubjectHello, nil); err != nil {
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

// Live is the number of workers currently alive.
func (c *Cluster) Live() int { return len(c.live()) }

// SetSource says where workers find the data; call before Load.
func (c *Cluster) SetSource(s Source) { c.cfg.Source = s }

// Job is the job id on the bus.
func (c *Cluster) Job() uint64 { return c.cfg.Job }

// Stats returns what crossed the bus so far.
func (c *Cluster) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Dropped counts bad messages by reason.
func (c *Cluster) Dropped() map[string]int { return c.bad.Dropped() }

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
	for len(c.live()) < c.cfg.MinWorkers {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case hb := <-c.hbs:
			c.onHeartbeat(hb)
		case <-tick.C:
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
	}
	return nil
}

// askAgain asks workers for the descriptions of shards they hold but
// whose descriptions have not come for ResendAfter, or at once after a
// reconnection (resendAt). Descriptions are sent once, and a server
// that cuts off a slow consumer (all of a large job's column maps
// arriving at once) or restarts drops what it had queued: Load would
// wait for ever.
func (c *Cluster) askAgain() {
	if c.heldSince == nil {
		c.heldSince = map[int]time.Time{}
	}
	now := time.Now()
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
	for id, shards := range ask {
		c.log.Warn("shard descriptions missing; asking again", zap.String("worker", id), zap.Ints("shards", shards))
		c.sendAssign(id, shards...)
	}
}

func (c *Cluster) live() []string {
	var ids []string
	for id, p := range c.workers {
		if !p.dead {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

func (c *Cluster) onHeartbeat(hb Heartbeat) {
	p := c.workers[hb.ID]
	if hb.Leaving {
		// Its shards move at the next check (checkWorkers).
		if p != nil && !p.dead {
			p.dead = true
			c.log.Info("worker left", zap.String("worker", hb.ID))
		}
		return
	}
	if p == nil {
		p = &peer{id: hb.ID, name: hb.Name, reconnects: hb.Reconnects}
		c.workers[hb.ID] = p
		c.log.Info("worker joined", zap.String("worker", hb.ID))
	}
	if p.stuck {
		return // alive, but not to be given shards again in this job
	}
	if p.dead {
		// Back after an outage: it counts again and gets shards at the
		// next round boundary.
		p.dead = false
		c.log.Info("worker back", zap.String("worker", hb.ID))
	}
	p.lastSeen, p.noSub = time.Now(), time.Time{}
	if len(hb.Loading) == 0 || hb.Read != p.read || !slices.Equal(hb.Loading, p.loading) {
		p.progress = p.lastSeen
	}
	p.read, p.held, p.loading = hb.Read, hb.Held, hb.Loading
	if hb.Reconnects > p.reconnects {
		c.log.Info("worker reconnected to NATS", zap.String("worker", hb.ID))
		p.reconnects = hb.Reconnects
		c.soon()
	}
	for s, to := range c.incoming {
		if to == hb.ID && slices.Contains(hb.Held, s) {
			// The new owner has it: the old one may let go.
			from := c.owner[s]
			c.owner[s] = to
			delete(c.incoming, s)
			c.log.Info("shard moved", zap.Int("shard", s), zap.String("from", from), zap.String("to", to))
			if from != "" && !c.workers[from].dead {
				c.sendAssign(from)
			}
		}
	}
	if want := c.assigned(hb.ID); hb.Job != c.cfg.Job && len(want) > 0 {
		c.sendAssign(hb.ID) // it lost our assignment (a restart): say it again
	}
}

// noResponders is the status the server gives a message with a reply
// subject that no subscription takes.
const noResponders = "503"

// probeConfirm is how long probes must find nobody on a worker's subject
// before it is lost: a worker whose connection broke, reconnecting to a
// server that is up, is absent for a few milliseconds.
const probeConfirm = 500 * time.Millisecond

// probe asks the server whether these workers are still connected: each
// gets a probe on its own subject with a reply subject that names it, and
// the server answers there only when nobody holds the worker's subject
// (see onGone). At most one probe per worker goes out per call.
func (c *Cluster) probe(ids []string) {
	if !c.nc.IsConnected() {
		return // the answers would come of the outage (see onGone)
	}
	slices.Sort(ids)
	now := time.Now()
	for _, id := range slices.Compact(ids) {
		p := c.workers[id]
		if p == nil || p.dead {
			continue
		}
		p.probed = now
		err := Chunks(KindProbe, c.cfg.Job, 0, 0, nil, int(c.nc.MaxPayload()), func(b []byte) error {
			return c.nc.PublishMsg(&nats.Msg{Subject: WorkerSubject(id), Reply: c.probeInbox + "." + id, Data: b})
		})
		if err != nil {
			c.log.Debug("probe", zap.String("worker", id), zap.Error(err))
		}
	}
}

// onGone handles the server's answer that nobody holds worker id's
// subject, and reports whether the worker is now lost (its shards move).
// It is lost once probes have found it gone for probeConfirm with no
// heartbeat in between. Answers that a heartbeat since the probe
// contradicts do not count, nor do those of an outage: after a server
// restart workers come back over seconds, and until HeartbeatTimeout has
// passed since a reconnection (see sawReconnect) only heartbeats tell.
func (c *Cluster) onGone(id string) bool {
	p := c.workers[id]
	now := time.Now()
	switch {
	case p == nil || p.dead:
		return false
	case !c.deafSince.IsZero() || now.Before(c.probeQuiet) || p.lastSeen.After(p.probed):
		p.noSub = time.Time{}
		return false
	case p.noSub.IsZero():
		p.noSub = now
		return false
	case now.Sub(p.noSub) < probeConfirm:
		return false
	}
	p.dead = true
	c.log.Warn("worker lost", zap.String("worker", id), zap.String("why", "its connection closed"),
		zap.Duration("silent", now.Sub(p.lastSeen)))
	c.balance(false)
	return true
}

// target is where a shard is going: its incoming owner, else its owner.
func (c *Cluster) target(s int) string {
	if to, ok := c.incoming[s]; ok {
		return to
	}
	return c.owner[s]
}

// assigned lists the shards a worker must hold: those it owns and those
// moving to it.
func (c *Cluster) assigned(id string) []int {
	var out []int
	for s := range c.owner {
		if c.owner[s] == id || c.incoming[s] == id {
			out = append(out, s)
		}
	}
	return out
}

func (c *Cluster) load(id string) int {
	n := 0
	for s := range c.owner {
		if c.target(s) == id {
			n++
		}
	}
	return n
}

// checkWorkers declares silent workers dead and gives their shards away.
// With moves set (between rounds), it also evens out the load, which is
// how a worker that joined gets shards.
func (c *Cluster) checkWorkers(moves bool) {
	now := time.Now()
	if !c.nc.IsConnected() {
		if c.deafSince.IsZero() {
			c.deafSince = now
		}
		return
	}
	if !c.deafSince.IsZero() {
		// Heartbeats could not reach us: count silence, and loads that
		// read nothing, from now.
		c.log.Info("back on NATS", zap.Duration("cut off", now.Sub(c.deafSince)))
		c.deafSince = time.Time{}
		c.sawReconnect()
		for _, p := range c.workers {
			p.lastSeen, p.progress = now, now
		}
	}
	for _, id := range c.live() {
		p := c.workers[id]
		if now.Sub(p.lastSeen) > c.cfg.HeartbeatTimeout {
			p.dead = true
			c.log.Warn("worker lost", zap.String("worker", id), zap.Duration("silent", now.Sub(p.lastSeen)))
		}
	}
	c.unstickLoads(now)
	c.balance(moves)
}

// unstickLoads takes a worker for stuck, as unstick does, when a load of
// shards the job needs from it has read nothing for LoadStall: a load
// from a hung network mount never ends, and heartbeats that say Loading
// would keep the job waiting on it for ever. Another live worker must be
// there to take the shards.
func (c *Cluster) unstickLoads(now time.Time) {
	for _, id := range c.live() {
		p := c.workers[id]
		if now.Sub(p.progress) < c.cfg.LoadStall || len(c.live()) < 2 {
			continue
		}
		var needed []int
		for _, s := range p.loading {
			if c.target(s) == id {
				needed = append(needed, s)
			}
		}
		if len(needed) == 0 {
			continue
		}
		p.dead, p.stuck = true, true
		c.log.Warn("worker stuck: its load has read nothing; its shards move for the rest of the job",
			zap.String("worker", id), zap.Ints("loading", needed), zap.Duration("still for", now.Sub(p.progress)))
		c.sendAssign(id)
	}
}

// balance gives out shards whose worker is gone and, with moves, moves
// shards until loads differ by at most one. The first assignment hands out
// contiguous blocks. A moved shard stays with its old owner until the new
// one holds it, so no round waits on a load that a move caused.
func (c *Cluster) balance(moves bool) {
	live := c.live()
	if len(live) == 0 {
		return // nobody to give shards to: keep waiting for someone
	}
	isLive := map[string]bool{}
	for _, id := range live {
		isLive[id] = true
	}
	changed := map[string]bool{}
	if !slices.ContainsFunc(c.owner, func(o string) bool { return o != "" }) {
		// Contiguous blocks, of whole groups when there are enough of
		// them: a worker holding a block of groups sends a few node sums
		// up (see shard.Combiner), not a partial per shard of a split
		// group.
		n, G, W := len(c.owner), shard.NumGroups(len(c.owner)), len(live)
		for s := range c.owner {
			if G >= 2*W {
				c.owner[s] = live[shard.GroupOf(s)*W/G]
			} else {
				c.owner[s] = live[s*W/n]
			}
		}
		for _, id := range live {
			changed[id] = true
		}
	}
	for s := range c.owner {
		if to, ok := c.incoming[s]; ok && !isLive[to] {
			delete(c.incoming, s)
		}
		if !isLive[c.owner[s]] {
			to, ok := c.incoming[s]
			if !ok {
				to = c.leastLoaded(live)
			}
			c.log.Info("shard reassigned", zap.Int("shard", s), zap.String("from", c.owner[s]), zap.String("to", to))
			c.owner[s] = to
			delete(c.incoming, s)
			changed[to] = true
			c.stats.Reassignments++
		}
	}
	// Moves go in whole groups when there are enough groups (a split
	// group costs a partial per shard on the bus), in shards otherwise,
	// and only while a move narrows the gap.
	byGroup := shard.NumGroups(len(c.owner)) >= 2*len(live)
	for moves {
		hi, lo := c.mostLoaded(live), c.leastLoaded(live)
		var batch []int // hi's last shard, or the shards of its last group it has
		for s := len(c.owner) - 1; s >= 0; s-- {
			if c.target(s) != hi {
				continue
			}
			if len(batch) > 0 && (!byGroup || shard.GroupOf(s) != shard.GroupOf(batch[0])) {
				break
			}
			batch = append(batch, s)
		}
		if len(batch) == 0 || c.load(hi)-c.load(lo) <= len(batch) {
			break
		}
		for _, s := range batch {
			if c.owner[s] == lo {
				delete(c.incoming, s)
			} else {
				c.incoming[s] = lo
			}
			c.stats.Reassignments++
		}
		changed[lo] = true
	}
	for _, id := range live {
		if changed[id] {
			c.sendAssign(id)
		}
	}
}

func (c *Cluster) leastLoaded(live []string) string {
	best := live[0]
	for _, id := range live[1:] {
		if c.load(id) < c.load(best) {
			best = id
		}
	}
	return best
}

func (c *Cluster) mostLoaded(live []string) string {
	best := live[0]
	for _, id := range live[1:] {
		if c.load(id) > c.load(best) {
			best = id
		}
	}
	return best
}

// sendAssign tells worker id its shards, and to describe again those of
// them listed in describe.
func (c *Cluster) sendAssign(id string, describe ...int) {
	a := Assign{Job: c.cfg.Job, Source: c.cfg.Source, Shards: []shard.Range{}, Total: len(c.owner), Describe: describe}
	for _, s := range c.assigned(id) {
		a.Shards = append(a.Shards, c.cfg.Ranges[s])
	}
	body, _ := json.Marshal(a)
	err := Chunks(KindAssign, c.cfg.Job, 0, 0, body, int(c.nc.MaxPayload()), func(b []byte) error {
		return c.nc.Publish(WorkerSubject(id), b)
	})
	if err != nil {
		c.log.Error("assign", zap.String("worker", id), zap.Error(err))
	}
}

// onUp handles one result; add receives partials of the current round.
func (c *Cluster) onUp(m upMsg, add func(*shard.Partial) error) error {
	// The payload goes back to the Assembler now, unless a partial's
	// vectors view it: then when the next round starts.
	viewed := false
	defer func() {
		if viewed {
			c.viewed = append(c.viewed, m.payload)
		} else {
			c.asm.Recycle(m.payload)
		}
	}()
	switch m.kind {
	case KindError:
		var le LoadError
		json.Unmarshal(m.payload, &le)
		return fmt.Errorf("worker %s: %s", le.Worker, le.Err)
	case KindMeta:
		worker, meta, err := DecodeMeta(m.shard, m.payload)
		if err != nil {
			c.bad.add(err, m.kind)
			return nil
		}
		if c.owner[m.shard] != worker && c.incoming[m.shard] != worker {
			c.bad.add(errors.New("description of a shard from a worker that was not given it"), m.kind)
			return nil
		}
		if c.haveMet[m.shard] {
			if !sameMeta(&c.metas[m.shard], meta) {
				return fmt.Errorf("shard %d reloaded by %s differs from before: did %s change during training?",
					m.shard, worker, c.cfg.Source.Path)
			}
			return nil
		}
		c.metas[m.shard], c.haveMet[m.shard] = *meta, true
	case KindPartial, KindGroup:
		if m.round != c.round || add == nil {
			if m.round < c.round {
				c.bad.add(errors.New("stale round"), m.kind)
			}
			return nil
		}
		id := m.shard
		var node shard.NodeID
		if m.kind == KindGroup {
			node, _ = shard.NodeFromWire(uint32(m.shard), len(c.owner)) // checked on arrival
			id = node.Index
		}
		var into *decodedPartial
		if n := len(c.reuse); n > 0 {
			into, c.reuse = c.reuse[n-1], c.reuse[:n-1]
		} else {
			into = new(decodedPartial)
		}
		c.decoded = append(c.decoded, into)
		p, err := DecodePartialInto(id, m.payload, &into.Partial, &into.grad)
		if err != nil {
			c.bad.add(err, m.kind)
			return nil
		}
		viewed = true
		p.Group, p.Level = m.kind == KindGroup, node.Level
		c.mu.Lock()
		c.stats.ResultsUp++
		c.mu.Unlock()
		return add(p)
	}
	return nil
}

// decodedPartial is a result decoded in a round, with the memory its
// gradient was laid out in when it came sparse.
type decodedPartial struct {
	shard.Partial
	grad []float64
}

func sameMeta(a, b *shard.Meta) bool {
	return a.Rows == b.Rows && a.NNZ == b.NNZ && a.NormSq == b.NormSq && a.MaxNormSq == b.MaxNormSq && a.MaxIndex == b.MaxIndex &&
		slices.Equal(a.Cols, b.Cols) && slices.Equal(a.Labels, b.Labels)
}

func (c *Cluster) Meta() []shard.Meta { return c.metas }

func (c *Cluster) SetClasses(order []float64) error {
	c.order = slices.Clone(order)
	return nil
}

// SetFolds makes every later point carry what workers need to number
// their rows' folds themselves: the fold count, the rows and where each
// shard's rows start.
func (c *Cluster) SetFolds(n int) error {
	if _, err := shard.Folds(2, n); err != nil { // the count's bounds
		return err
	}
	c.folds = uint32(n)
	c.starts = make([]uint64, len(c.metas))
	c.rows = 0
	for i, m := range c.metas {
		c.starts[i] = c.rows
		c.rows += uint64(m.Rows)
	}
	return nil
}

// point is the wire form of a request at p.
func (c *Cluster) point(op shard.Op, p *shard.Point) (*Point, error) {
	if p.Holdout > 0 && c.folds == 0 {
		return nil, errors.New("a fold is held out but SetFolds was not called")
	}
	// The vectors already hold the bias weight last, as workers expect.
	pt := &Point{Op: op, Bias: p.Bias, Labels: c.order, Weights: p.Weights, Stamp: p.Stamp, X: p.W, Holdout: uint32(p.Holdout)}
	for _, k := range p.Classes {
		pt.Classes = append(pt.Classes, uint32(k))
	}
	if p.Live != nil {
		pt.Live, pt.Full = p.Live.Bits, uint32(p.Live.Full)
	}
	if c.folds > 0 {
		pt.Folds, pt.Rows, pt.Starts = c.folds, c.rows, c.starts
	}
	return pt, nil
}

// Eval runs one round: broadcast the point, gather every shard's partial.
func (c *Cluster) Eval(op shard.Op, p, v *shard.Point, add func(*shard.Partial) error) error {
	pt, err := c.point(op, p)
	if err != nil {
		return err
	}
	if op == shard.OpHessVec {
		pt.V = v.W
		if p.Stamp != 0 && p.Stamp == c.lastStamp && slices.Equal(c.live(), c.lastLive) {
			pt.Op = opHessVecAt
			c.mu.Lock()
			c.stats.WithoutX++
			c.mu.Unlock()
		}
	}
	return c.round1(pt, add)
}

// Tally counts rows and correct predictions on the workers: each shard's
// partial carries rows per class in Loss and correct ones in BiasGrad.
func (c *Cluster) Tally(p *shard.Point) (shard.Tally, error) {
	pt, err := c.point(opCorrect, p)
	if err != nil {
		return shard.Tally{}, err
	}
	t := shard.Tally{Rows: make([]int, len(c.order)), Correct: make([]int, len(c.order))}
	err = c.round1(pt, func(part *shard.Partial) error {
		if len(part.Loss) != len(c.order) {
			return fmt.Errorf("shard %d: tally of %d classes, want %d", part.Shard, len(part.Loss), len(c.order))
		}
		for k := range part.Loss {
			t.Rows[k] += int(part.Loss[k])
			t.Correct[k] += int(part.BiasGrad[k])
		}
		return nil
	})
	return t, err
}

func (c *Cluster) round1(pt *Point, add func(*shard.Partial) error) error {
	c.checkWorkers(true)
	c.round++
	c.reuse, c.decoded = append(c.reuse, c.decoded...), c.decoded[:0]
	for _, b := range c.viewed {
		c.asm.Recycle(b)
	}
	clear(c.viewed)
	c.viewed = c.viewed[:0]
	payload := pointPieces(c.pointBuf, pt)
	c.pointBuf = payload[0]
	c.lastStamp, c.lastLive = pt.Stamp, c.live()
	got := make([]bool, len(c.owner))
	left := len(got)
	compute := 0.0
	accept := func(part *shard.Partial) error {
		compute = max(compute, part.Seconds)
		first, end := part.Shard, part.Shard+1
		if part.Group {
			first, end = shard.NodeID{Level: part.Level, Index: part.Shard}.Shards(len(got))
		}
		fresh := false
		for s := first; s < end; s++ {
			if !got[s] {
				got[s], fresh = true, true
				left--
			}
		}
		if !fresh {
			return nil // a duplicate from a resend or a moved shard
		}
		return add(part)
	}
	// This broadcast reaches whoever is connected now: reconnections
	// before it need no other.
	c.resendAt = time.Time{}
	select {
	case <-c.reconnected:
		c.sawReconnect()
	default:
	}
	if err := c.broadcast(payload); err != nil {
		return err
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastProgress := time.Now()
	began := lastProgress
	resends := 0
	var alone time.Time // since when no worker has been live
	again := func() error {
		c.mu.Lock()
		c.stats.Resends++
		c.mu.Unlock()
		var err error
		if pt.Op == opHessVecAt {
			// Some worker may not hold x: send it again too.
			payload, err = c.sendX(pt)
		} else {
			err = c.broadcast(payload)
		}
		lastProgress = time.Now()
		return err
	}
	stop := c.cfg.Stop
	var stopped <-chan time.Time
	for left > 0 {
		select {
		case <-stop:
			stop, stopped = nil, time.After(stopGrace)
		case <-stopped:
			return fmt.Errorf("round %d: %w", c.round, ErrStopped)
		case <-c.reconnected:
			c.soon()
		case hb := <-c.hbs:
			c.onHeartbeat(hb)
		case id := <-c.gone:
			if c.onGone(id) {
				lastProgress = time.Now() // its shards are loading elsewhere
			}
		case m := <-c.ups:
			if m.kind == KindNeedX {
				if m.round == c.round && pt.Op == opHessVecAt {
					c.log.Info("a worker lacks x: broadcasting the point with x",
						zap.Uint64("round", c.round), zap.String("worker", string(m.payload)))
					if err := again(); err != nil {
						return err
					}
				}
				c.asm.Recycle(m.payload)
				continue
			}
			before := left
			if err := c.onUp(m, accept); err != nil {
				return err
			}
			if left < before {
				lastProgress, resends = time.Now(), 0
			}
		case <-tick.C:
			owners := slices.Clone(c.owner)
			c.checkWorkers(false)
			switch {
			case len(c.live()) > 0 && c.nc.IsConnected():
				alone = time.Time{}
			case alone.IsZero():
				alone = time.Now()
			case c.cfg.NoWorkerTimeout > 0 && time.Since(alone) > c.cfg.NoWorkerTimeout:
				return fmt.Errorf("round %d: %w for %v", c.round, ErrNoWorkers, c.cfg.NoWorkerTimeout)
			}
			if !slices.Equal(owners, c.owner) {
				lastProgress = time.Now() // moved shards are loading
			}
			var owing []string
			for s, ok := range got {
				if !ok {
					owing = append(owing, c.owner[s])
				}
			}
			c.probe(owing)
			if !c.nc.IsConnected() {
				// Nothing can be heard or sent; reconnecting sends the
				// round again, and only then does silence count.
				lastProgress = time.Now()
				continue
			}
			if c.due(time.Now()) {
				c.log.Info("back on NATS after an outage: broadcasting the point again", zap.Uint64("round", c.round))
				if err := again(); err != nil {
					return err
				}
				continue
			}
			if time.Since(lastProgress) > c.cfg.ResendAfter {
				resends++
				if resends >= stuckResends && c.unstick(got, time.Since(began)) {
					lastProgress, resends = time.Now(), 0
					continue
				}
				if resends > maxResends && len(c.live()) > 0 {
					// Workers are alive but nothing comes back: they are
					// refusing the point. Waiting longer will not help.
					return fmt.Errorf("round %d: no results after %d broadcasts to %d live workers (see their logs)",
						c.round, resends, len(c.live()))
				}
				var missing []int
				for s, ok := range got {
					if !ok {
						missing = append(missing, s)
					}
				}
				c.log.Warn("round waiting on shards; broadcasting the point again",
					zap.Uint64("round", c.round), zap.Ints("shards", missing))
				if err := again(); err != nil {
					return err
				}
			}
		}
	}
	c.took[c.tookPos%len(c.took)] = time.Since(began)
	c.tookPos++
	c.mu.Lock()
	c.stats.Rounds++
	c.stats.Compute += time.Duration(compute * float64(time.Second))
	c.mu.Unlock()
	return nil
}

// A worker is stuck when it heartbeats, holds its subject and the shards
// it owes, and yet sends nothing for a round that has gone out
// stuckResends times and taken stuckFactor times the longest of the last
// rounds: a hung evaluation. Waiting would fail the round after
// maxResends. One still loading a shard it owes (moved to it from a lost
// worker) is not stuck: large shards take seconds to read.
const (
	stuckResends = 3
	stuckFactor  = 10
)

// unstick moves the shards of the round's missing results away from
// their owners if they are stuck and another worker is live, and reports
// whether it did. A stuck worker is lost for the rest of the job (its
// heartbeats no longer revive it) and is told to let go of its shards. A
// round that has no history to compare with, or that every live worker
// owes, is left to its resends: that is a slow round, or a point every
// worker refuses.
func (c *Cluster) unstick(got []bool, waited time.Duration) bool {
	longest := slices.Max(c.took[:])
	if longest == 0 || waited < stuckFactor*longest {
		return false
	}
	var owing []string
	for s, ok := range got {
		if p := c.workers[c.owner[s]]; !ok && p != nil && !p.dead && slices.Contains(p.held, s) {
			owing = append(owing, p.id)
		}
	}
	slices.Sort(owing)
	owing = slices.Compact(owing)
	if len(owing) == 0 || len(owing) == len(c.live()) {
		return false
	}
	for _, id := range owing {
		p := c.workers[id]
		p.dead, p.stuck = true, true
		c.log.Warn("worker stuck: it heartbeats but sends no results; its shards move for the rest of the job",
			zap.String("worker", id), zap.Uint64("round", c.round), zap.Duration("waited", waited), zap.Duration("longest recent round", longest))
		c.sendAssign(id)
	}
	c.balance(false)
	return true
}

// reconnectSettle is how long a reconnection waits before the round
// goes out again, for the clients that come back with it: after a server
// restart they all retry on the same backoff schedule and are back within
// a few hundred milliseconds, and one broadcast then serves them all
// where one each would multiply the bytes by the number of workers.
const reconnectSettle = 250 * time.Millisecond

// soon asks for the round, or Load's missing descriptions, to go out
// again after reconnectSettle.
func (c *Cluster) soon() {
	c.sawReconnect()
	if c.resendAt.IsZero() {
		c.resendAt = time.Now().Add(reconnectSettle)
	}
}

// sawReconnect notes a reconnection, this coordinator's or a worker's: for
// a heartbeat timeout, workers missing on the server may be on their way
// back, and only their silence counts (see onGone).
func (c *Cluster) sawReconnect() {
	c.probeQuiet = time.Now().Add(c.cfg.HeartbeatTimeout)
}

// due reports whether what soon asked for is due, and clears it if so.
func (c *Cluster) due(now time.Time) bool {
	if c.resendAt.IsZero() || now.Before(c.resendAt) || !c.nc.IsConnected() {
		return false
	}
	c.resendAt = time.Time{}
	return true
}

// sendX turns the round's point without x into one with x and
// broadcasts it; it returns the new payload, for later resends.
func (c *Cluster) sendX(pt *Point) ([][]byte, error) {
	pt.Op = shard.OpHessVec
	payload := pointPieces(c.pointBuf, pt)
	c.pointBuf = payload[0]
	return payload, c.broadcast(payload)
}

func (c *Cluster) broadcast(payload [][]byte) error {
	subj := DownSubject(c.cfg.Job)
	var sent int64
	err := c.chunks.sendPieces(KindPoint, c.cfg.Job, c.round, 0, payload, int(c.nc.MaxPayload()), func(b []byte) error {
		sent += int64(len(b))
		return c.nc.Publish(subj, b)
	})
	c.mu.Lock()
	c.stats.BytesDown += sent
	c.mu.Unlock()
	if errors.Is(err, nats.ErrReconnectBufExceeded) {
		// Cut off from NATS, with its buffer full: the point goes out
		// again once reconnected, so the round need not fail.
		c.log.Warn("NATS unreachable: the point will go out on reconnection", zap.Uint64("round", c.round))
		return nil
	}
	return err
}
