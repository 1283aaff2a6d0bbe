package cluster

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/osgm-svm/osgm/pkg/transport/wire"
	"github.com/osgm-svm/osgm/pkg/transport/worker"
)

// faultyBus is a worker's bus over its connection that loses messages on
// the way: out judges each chunk the worker publishes, in each chunk it
// would receive (nil: none lost). A message is lost whole: the verdict on
// its first chunk holds for the rest.
type faultyBus struct {
	*nats.Conn
	out, in *losing
}

// onFaultyBus puts the messages of a worker on nc on a faultyBus.
func onFaultyBus(nc *nats.Conn, cfg *worker.Config, out, in *losing) {
	cfg.Bus = &faultyBus{Conn: nc, out: out, in: in}
}

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

// wholeBus is a worker's bus that sends every shard partial and node sum
// up with its gradient whole, as a sender that never lays a gradient
// out sparse would: the worker's messages, assembled, decoded and encoded
// again whole.
type wholeBus struct {
	*nats.Conn
	mu  sync.Mutex
	asm wire.Assembler
}

func (b *wholeBus) Publish(subject string, data []byte) error {
	h, payload, err := wire.DecodeChunk(data)
	if err != nil || h.Kind != wire.KindPartial && h.Kind != wire.KindGroup {
		return b.Conn.Publish(subject, data)
	}
	b.mu.Lock()
	msg, done := b.asm.Add(h, slices.Clone(payload))
	b.mu.Unlock()
	if !done {
		return nil
	}
	p, err := wire.DecodePartial(int(h.Shard), msg)
	if err != nil {
		return err
	}
	whole := wire.AppendPartialAs(nil, p, true)
	b.asm.Recycle(msg) // ours: a clone, or the assembler's own memory
	return wire.Chunks(h.Kind, h.Job, h.Round, h.Shard, whole, int(b.MaxPayload()),
		func(chunk []byte) error { return b.Conn.Publish(subject, chunk) })
}

// forgetfulBus is a worker's bus on which the first n points without x
// (OpHessVecAt) come naming an x the worker never held, as they do to a
// worker that missed the round that sent it: the point, assembled,
// decoded and encoded again with another stamp. Other messages pass as
// they come.
type forgetfulBus struct {
	*nats.Conn
	mu   sync.Mutex
	n    int
	asm  wire.Assembler
	held map[[2]uint64][]*nats.Msg // a point's chunks so far, by round and shard
}

func (b *forgetfulBus) Subscribe(subject string, cb nats.MsgHandler) (*nats.Subscription, error) {
	return b.Conn.Subscribe(subject, func(m *nats.Msg) {
		for _, m := range b.take(m) {
			cb(m)
		}
	})
}

// take is what a chunk lets through: nothing while its point is
// incomplete, then the point's chunks, or a forgotten point's new ones.
func (b *forgetfulBus) take(m *nats.Msg) []*nats.Msg {
	h, payload, err := wire.DecodeChunk(m.Data)
	if err != nil || h.Kind != wire.KindPoint {
		return []*nats.Msg{m}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held == nil {
		b.held = map[[2]uint64][]*nats.Msg{}
	}
	key := [2]uint64{h.Round, uint64(h.Shard)}
	if b.n == 0 && len(b.held[key]) == 0 {
		return []*nats.Msg{m} // all forgotten, and none of this point held
	}
	b.held[key] = append(b.held[key], m)
	msg, done := b.asm.Add(h, payload)
	if !done {
		return nil
	}
	chunks := b.held[key]
	delete(b.held, key)
	p, err := wire.DecodePoint(msg)
	if err != nil || p.Op != wire.OpHessVecAt || b.n == 0 {
		return chunks
	}
	b.n--
	p.Stamp = ^p.Stamp
	var out []*nats.Msg
	wire.Chunks(h.Kind, h.Job, h.Round, h.Shard, wire.EncodePoint(p), int(b.MaxPayload()), func(c []byte) error {
		out = append(out, &nats.Msg{Subject: m.Subject, Data: slices.Clone(c)})
		return nil
	})
	return out
}
