package cluster

import (
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/transport"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// clusterCore is the coordinator's side of the protocol: who holds which
// shard, the round under way and what came back, and the clocks that tell
// a slow worker from a lost one. It takes what the Cluster hears through
// Step and the time through Tick (clusterstep.go), and acts through its
// clusterIO; it has no connection or goroutine, and reads the time from
// now, so the transcript tests (testdata/cluster) step it by hand.
//
// Its state comes in parts by concern: members (membership.go), the
// job's shards as described, the rounds' clocks and memory (round.go),
// how points go out (layouts, ownpoints.go and tree.go), and the stats.
type clusterCore struct {
	cfg Config
	io  clusterIO
	log *zap.Logger
	now func() time.Time

	members
	described
	clocks
	roundMemory
	layouts
	stepping
	stats statsBox
	view  viewBox

	bad transport.Counter
}

// members is who works for the job and what each answers for.
type members struct {
	workers  map[string]*peer
	owner    []string       // shard -> worker answering for it
	incoming map[int]string // shard -> worker it is moving to

	heldSince map[int]time.Time   // Load: since when a shard held is undescribed
	asked     map[workerShard]int // Load: asks for a shard's description its holder left unanswered
}

// described is the job's shards as their holders described them, and
// what every round's point says of the job.
type described struct {
	metas   []shard.Meta
	haveMet []bool
	order   []float64
	folds   uint32   // cross-validation folds (0: none), see SetFolds
	rows    uint64   // rows of the job
	starts  []uint64 // first global row of each shard
}

// all reports whether every shard has been described: what Load waits for.
func (d *described) all() bool { return !slices.Contains(d.haveMet, false) }

// enoughWorkers reports whether MinWorkers are alive: what Load waits
// for before it assigns the shards.
func (c *clusterCore) enoughWorkers() bool { return len(c.live()) >= c.cfg.MinWorkers }

// clocks are the round's number and the times that decide when a round
// goes out again and who is taken for stuck.
type clocks struct {
	round uint64

	// A NATS server restart loses what was in flight, and clients come
	// back one by one. Whoever is back last makes the round go out again
	// soon (resendAt): this coordinator (reconnected) or a worker (its
	// heartbeat's Reconnects grew). While cut off (deafSince) the
	// coordinator hears no heartbeat and declares nobody dead for it.
	resendAt   time.Time
	deafSince  time.Time
	probeQuiet time.Time // until when a reconnection makes probes' answers moot

	// How long the last rounds took, to tell a stuck worker from a slow
	// round (see unstick).
	took    [16]time.Duration
	tookPos int
}

// roundMemory is memory kept from round to round: the point's head, and
// the partials decoded in the last round with the payloads their vectors
// view, free again once the next round starts (its reduction was over
// when the round ended).
type roundMemory struct {
	pointBuf []byte
	decoded  []*decodedPartial
	reuse    []*decodedPartial
	viewed   [][]byte
}

// layouts are how points go out, worked out again only when the owners
// or the point's width change.
type layouts struct {
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
}

// statsBox holds the Stats, which callers read from other goroutines.
type statsBox struct {
	mu sync.Mutex
	s  Stats
}

// count changes the stats under their lock.
func (b *statsBox) count(f func(*Stats)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(&b.s)
}

func (b *statsBox) get() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.s
}

// errPointBuffered is sendPoint's error for a point the connection
// holds until it is back on NATS.
var errPointBuffered = errors.New("transport: point buffered until the connection is back")

// clusterIO is what the coordinator's core asks of the world around it.
type clusterIO interface {
	// connected reports whether the coordinator is on NATS now.
	connected() bool
	// sendPoint sends a round's point on subj, and the bytes it sent;
	// errPointBuffered when the connection keeps it until it is back.
	sendPoint(subj string, round uint64, version uint32, pieces [][]byte) (int64, error)
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
	assigned   time.Time // when it was last told its shards
	left       bool      // it said goodbye (dead too)

	// What its last heartbeat said for a status page (see WorkerView).
	host              string
	rss               int64
	rounds            uint64
	bytesIn, bytesOut int64
}

type upMsg struct {
	kind    wire.Kind
	round   uint64
	shard   int
	payload []byte
}

func newClusterCore(cfg Config, io clusterIO) *clusterCore {
	n := len(cfg.Ranges)
	c := &clusterCore{cfg: cfg, io: io, log: cfg.Log, now: time.Now,
		members:   members{workers: map[string]*peer{}, owner: make([]string, n), incoming: map[int]string{}},
		described: described{metas: make([]shard.Meta, n), haveMet: make([]bool, n)}}
	c.bad.Log = c.log
	return c
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
		if ok || p == nil || p.dead || !has(p.held, s) {
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
		c.asked = map[workerShard]int{}
	}
	var stuck []string
	for _, id := range slices.Sorted(maps.Keys(ask)) {
		shards := ask[id]
		unanswered := 0
		for _, s := range shards {
			if !all { // one ask each ResendAfter; not the ask at a reconnection
				c.asked[workerShard{id, s}]++
			}
			unanswered = max(unanswered, c.asked[workerShard{id, s}])
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
