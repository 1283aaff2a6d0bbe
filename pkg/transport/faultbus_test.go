package transport

import (
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// faultyBus is a worker's bus over its connection that loses messages on
// the way: out judges each chunk the worker publishes, in each chunk it
// would receive (nil: none lost). A message is lost whole: the verdict on
// its first chunk holds for the rest.
type faultyBus struct {
	*nats.Conn
	out, in *losing
}

// onFaultyBus puts w's messages on a faultyBus.
func onFaultyBus(w *Worker, out, in *losing) { w.bus = &faultyBus{Conn: w.nc, out: out, in: in} }

func (b *faultyBus) Publish(subject string, data []byte) error {
	if b.out.loses(data) {
		return nil
	}
	return b.Conn.Publish(subject, data)
}

func (b *faultyBus) Subscribe(subject string, cb nats.MsgHandler) (*nats.Subscription, error) {
	return b.Conn.Subscribe(subject, func(m *nats.Msg) {
		if !b.in.loses(m.Data) {
			cb(m)
		}
	})
}

// losing loses messages its rule picks, by their first chunk's header.
type losing struct {
	rule func(wire.Header) bool
	mu   sync.Mutex
	lost map[[3]uint64]bool // messages being lost: kind, round, shard
}

func (l *losing) loses(data []byte) bool {
	if l == nil {
		return false
	}
	h, _, err := wire.DecodeChunk(data)
	if err != nil {
		return false
	}
	key := [3]uint64{uint64(h.Kind), h.Round, uint64(h.Shard)}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil {
		l.lost = map[[3]uint64]bool{}
	}
	if h.Seq == 0 {
		l.lost[key] = l.rule(h)
	}
	return l.lost[key]
}

// loseFirst loses the first n messages of kind.
func loseFirst(kind wire.Kind, n int64) *losing {
	var left atomic.Int64
	left.Store(n)
	return &losing{rule: func(h wire.Header) bool { return h.Kind == kind && left.Add(-1) >= 0 }}
}

// loseAfter loses the messages of kind of every round after round: a
// worker whose evaluation hung hears no more points, and its heartbeats
// go on.
func loseAfter(kind wire.Kind, round uint64) *losing {
	return &losing{rule: func(h wire.Header) bool { return h.Kind == kind && h.Round > round }}
}
