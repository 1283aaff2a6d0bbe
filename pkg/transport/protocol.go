package transport

import (
	"errors"
	"maps"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// What both sides of the protocol share: its timing, and the count of
// the messages each drops.

// Defaults of the protocol's timing, shared by coordinator and workers.
const (
	DefaultHeartbeat        = 500 * time.Millisecond
	DefaultHeartbeatTimeout = 3 * time.Second
	DefaultResendAfter      = 3 * time.Second
	// DefaultLoadStall is how long a worker's load may read nothing
	// before the coordinator takes it for hung: a healthy load reads all
	// the time, and what it does after reading (building, compacting)
	// takes seconds.
	DefaultLoadStall  = time.Minute
	DefaultWaitReport = 30 * time.Second
)

// Counter counts the messages dropped, and logs the first of each kind.
// A late result, of a round since sent again or ended, is no fault:
// every resend and every shard moved leaves some. It is counted apart
// and logged at debug level only.
type Counter struct {
	Log    *zap.Logger // where the first of each kind is logged; set before use
	mu     sync.Mutex
	counts map[string]int
	late   int
}

// LateResult counts a result that came after its round.
func (c *Counter) LateResult(kind wire.Kind) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.late++
	if c.late == 1 {
		c.Log.Debug("ignored a result of an earlier round (resends and moved shards leave these)", zap.Stringer("kind", kind))
	}
}

// Late returns how many results came after their round.
func (c *Counter) Late() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.late
}

// Add counts a message dropped for err (nil: of an unexpected kind).
func (c *Counter) Add(err error, kind wire.Kind) {
	if err == nil {
		err = errors.New("unexpected message kind " + kind.String())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[string]int{}
	}
	c.counts[err.Error()]++
	if c.counts[err.Error()] == 1 {
		c.Log.Warn("ignored a damaged or foreign message (each reason is logged once; the bus line counts them)", zap.Error(err))
	}
}

// Dropped returns how many messages were dropped, by reason.
func (c *Counter) Dropped() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := maps.Clone(c.counts)
	if out == nil {
		out = map[string]int{}
	}
	return out
}
