package cluster

import (
	"errors"
	"flag"

	"github.com/osgm-svm/osgm/internal/cli"
	"github.com/osgm-svm/osgm/pkg/transport"
)

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
