package cluster

import (
	"errors"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/reduce"
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
// Its state comes in parts by concern: members, the job's shards as
// described, the rounds' clocks and memory, how points go out, the way
// in, and the stats. This file holds that state; each file above it adds
// what the core does with one concern, and uses only the files below
// it: view.go (the status view), membership.go (heartbeats, probes,
// assignment), tree.go and ownpoints.go (how points go out), round.go
// (rounds), load.go (Load's descriptions), clusterstep.go (the way in).
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

func newClusterCore(cfg Config, io clusterIO) *clusterCore {
	n := len(cfg.Ranges)
	c := &clusterCore{cfg: cfg, io: io, log: cfg.Log, now: time.Now,
		members:   members{workers: map[string]*peer{}, owner: make([]string, n), incoming: map[int]string{}},
		described: described{metas: make([]shard.Meta, n), haveMet: make([]bool, n)}}
	c.bad.Log = c.log
	return c
}

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

// errPointBuffered is sendPoint's error for a point the connection
// holds until it is back on NATS.
var errPointBuffered = errors.New("transport: point buffered until the connection is back")

// members is who works for the job and what each answers for.
type members struct {
	workers  map[string]*peer
	owner    []string       // shard -> worker answering for it
	incoming map[int]string // shard -> worker it is moving to

	heldSince map[int]time.Time   // Load: since when a shard held is undescribed
	asked     map[workerShard]int // Load: asks for a shard's description its holder left unanswered
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

// workerShard is a shard held by a worker.
type workerShard struct {
	worker string
	shard  int
}

// assigned lists the shards a worker must hold: those it owns and those
// moving to it.
func (c *members) assigned(id string) []int {
	var out []int
	for s := range c.owner {
		if c.owner[s] == id || c.incoming[s] == id {
			out = append(out, s)
		}
	}
	return out
}

// inSorted reports whether the sorted ids hold s.
func inSorted(ids []int, s int) bool {
	_, ok := slices.BinarySearch(ids, s)
	return ok
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

// reconnectSettle is how long a reconnection waits before the round
// goes out again, for the clients that come back with it: after a server
// restart they all retry on the same backoff schedule and are back within
// a few hundred milliseconds, and one broadcast then serves them all
// where one each would multiply the bytes by the number of workers.
const reconnectSettle = 250 * time.Millisecond

// soon asks for the round, or Load's missing descriptions, to go out
// again after reconnectSettle.
func (c *clusterCore) soon() {
	c.sawReconnect()
	if c.resendAt.IsZero() {
		c.resendAt = c.now().Add(reconnectSettle)
	}
}

// sawReconnect notes a reconnection, this coordinator's or a worker's: for
// a heartbeat timeout, workers missing on the server may be on their way
// back, and only their silence counts (see onGone).
func (c *clusterCore) sawReconnect() {
	c.probeQuiet = c.now().Add(c.cfg.HeartbeatTimeout)
}

// due reports whether what soon asked for is due, and clears it if so.
func (c *clusterCore) due(now time.Time) bool {
	if c.resendAt.IsZero() || now.Before(c.resendAt) || !c.io.connected() {
		return false
	}
	c.resendAt = time.Time{}
	return true
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

// decodedPartial is a result decoded in a round, with the memory its
// gradient was laid out in when it came sparse.
type decodedPartial struct {
	reduce.Partial
	grad []float64
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

// pointLayout is how rounds go out while the shards' owners stay: each
// owner's own point. A nil layout is a broadcast.
type pointLayout struct {
	own []*ownPoint
}

// ownPoint is a worker's share of the point and the memory it is
// gathered into, kept from round to round.
type ownPoint struct {
	worker string
	bits   []uint64 // the coordinates it is sent, over every coordinate
	pos    []int32  // their positions in the point's vectors
	head   []byte
	x, v   [][]float64
}

// stepping is the core's part of the way in: its phase, and the clocks
// of the phases.
type stepping struct {
	phase   phase
	current *roundState // in a round

	waitBegan, waitReport time.Time // waitingForWorkers: since, and the next "still waiting"
	early                 []upMsg   // waitingForWorkers: what came up, for describing
	stopBy                time.Time // a round asked to stop fails past this
}

// phase is what the core's events serve.
type phase uint8

const (
	waitingForWorkers phase = iota // Load, until MinWorkers are alive
	outsideRounds                  // Load's descriptions, and between rounds
	inRound                        // a round, until every shard's result is in
)

// roundState is a round under way: what went out, what has come back, and
// the clocks that tell a slow round from a stuck one.
type roundState struct {
	c       *clusterCore
	pt      *wire.Point
	add     func(*reduce.Partial) error
	payload [][]byte     // the whole point, for broadcasts
	version uint32       // payload's number in the round (the chunks' Shard; see repack)
	layout  *pointLayout // own points went out (nil: a broadcast, or whole since)
	tree    []string     // the owners the workers add the tree along (nil: each sends its sums here)
	got     []bool       // shards whose results are in
	left    int          // shards whose results are not
	compute float64      // the longest a worker computed

	began, lastProgress time.Time
	alone               time.Time // since when no worker has been live
	resends             int       // broadcasts again since the last result
}

type upMsg struct {
	kind    wire.Kind
	round   uint64
	shard   int
	payload []byte
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

// WorkerView is what the coordinator knows of one worker, for a status
// page: the heartbeat's counters as the worker last sent them, and the
// shards as the coordinator gave them out.
type WorkerView struct {
	ID, Host string
	// State is "loading" (it has shards assigned that it does not hold
	// yet), "ready", "lost" (silent, gone from NATS, or stuck) or "left"
	// (it said goodbye).
	State    string
	Shards   []int // the shards it answers for
	Incoming []int // shards moving to it, which it is loading
	Rows     int   // rows of the shards it answers for, as described
	Rounds   uint64
	BytesIn  int64
	BytesOut int64
	RSS      int64 // its process's resident memory (0: not said)
	LastSeen time.Time
}

// viewBox holds the workers' views as the core last published them: the
// core steps on the loop's goroutine, and a status page reads from its
// own.
type viewBox struct {
	mu sync.Mutex
	v  []WorkerView
}

// get is every worker the job has heard from, by ID, as last published.
func (b *viewBox) get() []WorkerView {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.v)
}
