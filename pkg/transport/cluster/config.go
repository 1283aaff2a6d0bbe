package cluster

import (
	"errors"
	"flag"
	"time"

	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/internal/cli"
	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/transport"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// Config configures the coordinator's side of the protocol.
type Config struct {
	Job        uint64 // 0: random
	Source     wire.Source
	Ranges     []input.Range
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
	// (transport.DefaultWaitReport): without it, a cluster whose workers never
	// start shows one line and then nothing.
	WaitReport time.Duration
	// BetweenRounds, when set, is called at each round's start, before
	// its point goes out: a connection that moves to another server
	// there (transport.ConnectNear's between) loses nothing, and reports
	// true; the round then waits for the new connection (moveWait).
	BetweenRounds func() bool
	Log           *zap.Logger
}

// ClusterFlags and OperationFlags are the names Config.Flags
// registers, by the group a command's help lists them in.
var (
	ClusterFlags   = []string{"min-workers", "points", "reduce", "place"}
	OperationFlags = []string{"heartbeat-timeout", "load-stall", "no-worker-timeout"}
)

// Flags registers into fs the options of how the coordinator waits for
// workers, judges them lost and sends them points; CheckFlags checks them
// once fs is parsed.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.IntVar(&c.MinWorkers, "min-workers", 1, "with -nats: wait for this many workers")
	fs.Var(&c.Points, "points", "how rounds' points reach workers (`mode`): broadcast, own (each worker's with only the columns its shards touch), or auto: own when they add up to at most half of a broadcast's bytes (text-like data over many workers), unless rounds go along the workers' tree (-reduce), whose sums are over the broadcast's coordinates")
	fs.Var(&c.Reduce, "reduce", "who adds the workers' sums of a round (`mode`): tree (the workers, along the fixed reduction tree; the coordinator receives one sum a round, whatever the number of workers), star (each worker sends its own here), or auto: tree when the workers' own sums would bring the coordinator more than twice the bytes of the tree's longest chain; the model is the same")
	fs.Var(&c.Place, "place", "with -nats, where one-vs-rest classes train (`mode`): classes (each class whole on one worker, which loads every shard: no round on the bus per pass), rows (every pass a round over the workers' shards), or auto: classes when every worker has memory for the whole data")
	fs.DurationVar(&c.HeartbeatTimeout, "heartbeat-timeout", transport.DefaultHeartbeatTimeout, "a worker silent this long is lost; its shards move (one whose connection closes, sooner)")
	fs.DurationVar(&c.LoadStall, "load-stall", transport.DefaultLoadStall, "a worker whose load of shards reads nothing this long (a hung network mount) loses them to the other workers")
	fs.DurationVar(&c.NoWorkerTimeout, "no-worker-timeout", 0, "with every worker lost, or NATS out of reach, fail after this long (0: wait for workers to come back); with -checkpoint, resume from it")
}

// CheckFlags checks the options Flags registered.
func (c *Config) CheckFlags() error {
	switch {
	// Not positive, they would take every worker for lost or stuck.
	case c.HeartbeatTimeout <= 0:
		return errors.New("-heartbeat-timeout must be positive")
	case c.LoadStall <= 0:
		return errors.New("-load-stall must be positive")
	case c.NoWorkerTimeout < 0:
		return errors.New("-no-worker-timeout must not be negative")
	case c.MinWorkers < 1:
		return errors.New("-min-workers must be at least 1")
	}
	return nil
}

// PlaceMode says whether one-vs-rest problems go whole to workers: -place.
type PlaceMode = cli.Choice[placeWords]

const (
	PlaceAuto    PlaceMode = iota // whole problems when every worker has memory for every shard
	PlaceClasses                  // whole problems on workers that solve
	PlaceRows                     // every pass a round over the row-sharded workers
)

type placeWords struct{}

func (placeWords) Words() []string { return []string{"auto", "classes", "rows"} }

// PointMode says how rounds' points go to workers: -points.
type PointMode = cli.Choice[pointWords]

const (
	PointsAuto      PointMode = iota // own points when they carry at most half of a broadcast's bytes
	PointsBroadcast                  // always broadcast
	PointsOwn                        // own points whenever every worker takes them
)

type pointWords struct{}

func (pointWords) Words() []string { return []string{"auto", "broadcast", "own"} }

// ReduceMode says who adds the workers' sums of a round: -reduce.
type ReduceMode = cli.Choice[reduceWords]

const (
	// ReduceAuto adds along the workers' tree when that takes fewer bytes
	// through the coordinator's link than every worker's own sums, by a
	// margin for the tree's hops (see treePays); each worker sends its
	// own otherwise.
	ReduceAuto ReduceMode = iota
	// ReduceTree has the workers add the reduction tree among themselves
	// and send the coordinator the root alone (see reduce.Relay): its
	// intake stays one sum a round however many workers there are.
	ReduceTree
	// ReduceStar has every worker send its own sums to the coordinator,
	// which adds them: one sum per worker a round.
	ReduceStar
)

type reduceWords struct{}

func (reduceWords) Words() []string { return []string{"auto", "tree", "star"} }
