package worker

import (
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/metrics"
	"github.com/osgm-svm/osgm/pkg/shard"
)

// Config configures a worker.
type Config struct {
	Name      string
	Parallel  int              // goroutines evaluating shards
	Compact   shard.Compaction // when shards are stored compact (auto: when plain ones would not fit)
	Heartbeat time.Duration    // how often to announce itself
	Log       *zap.Logger
	Metrics   *metrics.Worker // nil: none
	// Shared, for workers in the coordinator's process, is what their
	// loads share with it and each other (text it decompressed, the
	// memory fit); nil for a worker of its own.
	Shared *shard.Shared
	// Bus, when set, carries the worker's messages in its connection's
	// place, over that connection. A deployment leaves it nil; tests
	// lose messages on it, as a cut connection or a hung evaluation
	// would.
	Bus Bus
	// Load, when set, stands around each load of shards: it calls read,
	// the load itself, and returns what read returned. read counts the
	// bytes it reads into bytes, which the heartbeats carry to the
	// coordinator's stall check. Tests hold a load on it, or trickle
	// bytes, as a hung or slow network mount would.
	Load func(read func() ([]*shard.Shard, int, error), bytes *atomic.Int64) ([]*shard.Shard, int, error)
	// BetweenRounds, when set, is called when a new round's point has
	// come, before it is evaluated: a connection that moves to another
	// server there (transport.ConnectNear's between) loses nothing, as
	// the next point comes only once this worker's results are in, and
	// results sent meanwhile wait in the connection's buffer.
	BetweenRounds func() bool
}

// Bus is what a worker sends and receives its messages through: the NATS
// connection, or in tests one that loses messages on the way (a cut
// connection, a server that drops what a slow reader had queued, a hung
// evaluation that hears no more points).
type Bus interface {
	Publish(subject string, data []byte) error
	Subscribe(subject string, cb nats.MsgHandler) (*nats.Subscription, error)
}
