package worker

import (
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/cols"
	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/transport"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// workerCore is a worker's protocol: the job and the shards it holds, the
// point in hand, and what it answered in this round. It is stepped by what
// the worker hears (an assignment, a point, a finished load) and acts
// through its workerIO. It has no connection, clock or goroutine of its
// own, so the transcript tests (testdata/worker) step it message by
// message through Step; Worker is the NATS loop around it.
//
// This file holds its state; each file above it adds what it does with
// one concern, and uses only the files below it: workerround.go (a
// round's point, the shards' partials and the sums that go up),
// workerload.go (assignments and loads), workerstep.go (the way in). A
// round's tree among the workers is a value of its own (treeRound,
// workertree.go).
type workerCore struct {
	id  string
	cfg *Config
	io  workerIO
	log *zap.Logger
	now func() time.Time   // for the seconds a partial reports, and metrics
	bad *transport.Counter // messages dropped

	job      uint64
	source   wire.Source
	shards   map[int]*shard.Shard
	want     map[int]input.Range
	loading  map[int]bool
	order    []float64
	foldN    uint32   // the folds foldIDs numbers (0: none yet)
	foldIDs  []uint16 // every row's fold, for the current point's folds
	point    *wire.Point
	live     *cols.LiveMap // the coordinates point carries (nil: all)
	askedFor uint64        // the last round this worker asked for the whole point
	round    uint64
	answered map[int][]byte                    // this round's encoded partials, for resends
	sums     map[reduce.NodeID]*reduce.Partial // this round's node sums, for resends
	laidOut  [][]byte                          // memory of this round's sums sent sparse
	spare    [][]byte                          // and of the last rounds', free again
	total    int                               // shards in the job
	adder    *reduce.Adder                     // adds the shards under nodes held whole (nil: none; see rebuildLocal)
	started  time.Time                         // when this round's evaluation began
	local    *objective.Local
	tree     *treeRound                 // this round's tree among the workers (nil: sums go to the coordinator)
	lastTree *treeRound                 // the last round's, reused while its owners and width stay
	early    []relayMsg                 // sums relayed for a round whose point has not come
	colsAt   map[reduce.NodeID][]uint32 // see pointCols

}

// workerIO is what a worker's core asks of the world around it.
type workerIO interface {
	// send sends one message up to the coordinator, whole (the NATS loop
	// cuts it into chunks). The pieces are kept for resends: they must
	// not be written to.
	send(kind wire.Kind, job, round uint64, shardID uint32, pieces ...[]byte)
	// listen makes the job's broadcast points come to the core, and no
	// other job's.
	listen(job uint64)
	// startLoad reads the ranges of src and, later, steps the core with the
	// result (finishLoad).
	startLoad(job uint64, src wire.Source, ranges []input.Range)
	// holding says which shards the core holds and loads, for heartbeats.
	holding(job uint64, held, loading []int)
	// relay sends a sum to the worker that adds it (see treeRound).
	relay(to string, kind wire.Kind, job, round uint64, id uint32, pieces ...[]byte)
}

type roundMsg struct {
	round uint64
	job   uint64
	parts [][]byte // the point message's chunks, in order
}

type loadResult struct {
	job    uint64
	shards []*shard.Shard
	err    error
	failed int
	took   time.Duration
	ranges []input.Range
}

func newWorkerCore(id string, cfg *Config, io workerIO, log *zap.Logger, bad *transport.Counter) *workerCore {
	return &workerCore{id: id, cfg: cfg, io: io, log: log, now: time.Now, bad: bad,
		shards: map[int]*shard.Shard{}, want: map[int]input.Range{}, loading: map[int]bool{}}
}

func (w *workerCore) publishState() {
	held := make([]int, 0, len(w.shards))
	for id := range w.shards {
		held = append(held, id)
	}
	slices.Sort(held)
	loading := make([]int, 0, len(w.loading))
	for id := range w.loading {
		loading = append(loading, id)
	}
	slices.Sort(loading)
	w.io.holding(w.job, held, loading)
}

func (w *workerCore) publishUp(kind wire.Kind, round uint64, shardID uint32, payload ...[]byte) {
	w.io.send(kind, w.job, round, shardID, payload...)
}
