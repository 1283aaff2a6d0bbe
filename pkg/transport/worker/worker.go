// Package worker is the worker's side of the protocol: a core that holds
// shards and answers a coordinator's rounds, stepped by messages, the NATS
// loop around it, and the solver of the whole problems placed on it.
package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/memory"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/transport"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// Worker holds shards for a coordinator and evaluates them on request:
// the NATS loop around a workerCore. All protocol state is the core's,
// stepped by the Run goroutine; NATS callbacks only decode, reassemble
// and queue, and loads read on goroutines of their own.
type Worker struct {
	ID   string
	cfg  Config
	nc   *nats.Conn // the connection's state: connected, payload limit, reconnections
	bus  Bus        // its messages: nc, or Config.Bus's
	log  *zap.Logger
	core *workerCore
	// solver runs the whole problems placed on this worker.
	solver *solver

	cmds   chan wire.Assign
	points chan roundMsg
	relays chan relayMsg // sums other workers relayed here
	loaded chan loadResult
	down   *nats.Subscription // the job's broadcast points
	sums   *nats.Subscription // the job's sums relayed here

	// The one chunk buffer kept from round to round for what goes up.
	// Points come down as chunks decoded in place (the next point goes
	// into the last one's memory), and node sums go up from the memory
	// they were added in: no vector crosses the bus through a copy of
	// its own.
	chunks wire.Chunker

	read atomic.Int64 // bytes its loads have read (shard.Options.Read)
	// For the heartbeat's status fields: bytes received and sent, the
	// rounds answered and the last of them.
	bytesIn, bytesOut atomic.Int64
	refused           atomic.Bool // a coordinator of another release was heard
	rounds, lastRound atomic.Uint64
	mu                sync.Mutex // guards hb, read by the heartbeat goroutine
	hb                wire.Heartbeat
	// beats (under mu) and beatTag number the heartbeats in their
	// chunks' Round and Shard: the coordinator puts together a heartbeat
	// of several chunks (thousands of shards, a small max_payload) from
	// its own chunks alone, every worker's on one subject.
	beats   uint64
	beatTag uint32
	beat    chan struct{} // a heartbeat now, not at the next tick
	badMsg  transport.Counter
}

// New prepares a worker on an open connection.
func New(nc *nats.Conn, cfg Config) *Worker {
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, transport.DefaultHeartbeat)
	cfg.Parallel = max(cfg.Parallel, 1)
	cfg.Log = cmp.Or(cfg.Log, zap.NewNop())
	id := nuid.Next()
	if cfg.Name != "" {
		id = cfg.Name + "-" + id
	}
	w := &Worker{ID: id, cfg: cfg, nc: nc, bus: nc, log: cfg.Log.With(zap.String("worker", id)),
		cmds: make(chan wire.Assign, 16), points: make(chan roundMsg, 64), relays: make(chan relayMsg, 256), loaded: make(chan loadResult, 4), beat: make(chan struct{}, 1)}
	w.badMsg.Log = w.log
	if cfg.Bus != nil {
		w.bus = cfg.Bus
	}
	w.core = newWorkerCore(id, &w.cfg, w, w.log, &w.badMsg)
	w.solver = newSolver(w, w.cfg.Parallel, w.log, &w.badMsg)
	host, _ := os.Hostname()
	w.hb = wire.Heartbeat{ID: id, Name: cfg.Name, Host: host, OwnPoints: true, Solves: true, Slots: cfg.Parallel}
	w.beatTag = rand.Uint32()
	return w
}

// Run serves until ctx ends.
func (w *Worker) Run(ctx context.Context) error {
	sub, err := w.bus.Subscribe(wire.WorkerSubject(w.ID), w.ownMessages(ctx))
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	hello, err := w.bus.Subscribe(wire.SubjectHello, func(*nats.Msg) { w.beatNow() })
	if err != nil {
		return err
	}
	defer hello.Unsubscribe()
	defer transport.OnReconnect(w.nc, func() {
		w.mu.Lock()
		w.hb.Reconnects++
		w.mu.Unlock()
		w.beatNow()
	})()
	// A connection nats.go gives up on (credentials refused) never comes
	// back: end, so that a supervisor sees the failure and the error.
	closed := make(chan struct{}, 1)
	defer transport.OnClosed(w.nc, func() { closed <- struct{}{} })()
	if err := transport.ClosedError(w.nc); err != nil { // closed before the handler was set
		return err
	}
	go w.heartbeats(ctx)
	go w.solver.run(ctx)
	w.log.Info("worker ready", zap.String("subject", wire.WorkerSubject(w.ID)), zap.Bool("connected", w.nc.IsConnected()))
	for {
		select {
		case <-closed:
			return transport.ClosedError(w.nc)
		case <-ctx.Done():
			w.unlisten()
			w.sayGoodbye()
			return nil
		case a := <-w.cmds:
			w.solver.keepOnly(a.Job)
			w.core.Step(gotAssign{a})
		case r := <-w.loaded:
			w.core.Step(gotLoad{r})
		case p := <-w.points:
			if move := w.cfg.BetweenRounds; move != nil && p.job == w.core.job && p.round > w.core.round {
				move() // with the round's point in hand: see Config
			}
			w.core.Step(gotPoint{p})
		case m := <-w.relays:
			w.core.Step(gotRelay{m})
		}
	}
}

// ownMessages takes what comes on the worker's own subject: orders,
// probes, placed problems, and the points made for this worker alone
// (see PointMode). Every deployment already lets it read that subject,
// and a broadcast and an own point of the same round are different
// messages, put together apart.
func (w *Worker) ownMessages(ctx context.Context) nats.MsgHandler {
	var own, orders wire.Assembler
	own.MaxPending, orders.MaxPending = 4, 4
	return func(m *nats.Msg) {
		w.bytesIn.Add(int64(len(m.Data)))
		h, payload, err := wire.DecodeChunk(m.Data)
		switch {
		case err != nil:
			w.badMsg.Add(err, h.Kind)
			w.heardForeign(err)
		case h.Kind == wire.KindProbe:
			// the server answers for us if we are gone
		case h.Kind == wire.KindSolve || h.Kind == wire.KindSolveStop:
			w.solver.take(h, payload)
		case h.Kind == wire.KindPoint:
			if parts, ok := own.AddParts(h, payload); ok {
				own.Forget(h.Round)
				select {
				case w.points <- roundMsg{round: h.Round, job: h.Job, parts: parts}:
				case <-ctx.Done():
				}
			}
		case h.Kind == wire.KindAssign:
			whole, ok := orders.Add(h, payload)
			if !ok {
				return
			}
			orders.Forget(h.Round) // an earlier one whose chunks were lost is out of date
			var a wire.Assign
			if err := json.Unmarshal(whole, &a); err != nil {
				w.badMsg.Add(err, h.Kind)
				return
			}
			select {
			case w.cmds <- a:
			case <-ctx.Done():
			}
		default:
			w.badMsg.Add(nil, h.Kind)
		}
	}
}

// sayGoodbye sends the last heartbeat, Leaving, and waits for the server
// to have it, if there is a server to have it. Every later heartbeat says
// Leaving too: the heartbeat goroutine may not have stopped yet.
func (w *Worker) sayGoodbye() {
	w.mu.Lock()
	w.hb.Leaving = true
	w.mu.Unlock()
	w.sendHeartbeat()
	if !w.nc.IsConnected() {
		return // no server to tell: the coordinator misses the heartbeats
	}
	if err := w.nc.FlushTimeout(time.Second); err != nil {
		w.log.Warn("could not say goodbye", zap.Error(err))
	}
}

// sendHeartbeat announces the worker and what it holds.
func (w *Worker) sendHeartbeat() {
	w.mu.Lock()
	w.hb.Read = uint64(w.read.Load())
	w.hb.Avail, w.hb.Placed = memory.Available(), w.solver.under()
	w.hb.RSS, w.hb.Rounds = memory.Resident(), w.rounds.Load()
	w.hb.BytesIn, w.hb.BytesOut = w.bytesIn.Load(), w.bytesOut.Load()
	hb, _ := json.Marshal(w.hb)
	w.beats++
	seq := w.beats
	w.mu.Unlock()
	wire.Chunks(wire.KindHeartbeat, 0, seq, w.beatTag, hb, int(w.nc.MaxPayload()), func(b []byte) error {
		return w.bus.Publish(wire.SubjectHeartbeat, b)
	})
}

// minBeatGap spaces the heartbeats that beatNow asks for, so that a flood
// of hellos cannot make every worker flood the bus in turn.
const minBeatGap = 50 * time.Millisecond

// beatNow asks for a heartbeat before the next tick.
func (w *Worker) beatNow() {
	select {
	case w.beat <- struct{}{}:
	default:
	}
}

func (w *Worker) heartbeats(ctx context.Context) {
	t := time.NewTicker(w.cfg.Heartbeat)
	defer t.Stop()
	for {
		w.sendHeartbeat()
		sent := time.Now()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.beat:
			select {
			case <-ctx.Done():
				return
			case <-time.After(minBeatGap - time.Since(sent)):
			}
		}
	}
}

// send is workerIO's: one message up, in chunks the server takes.
func (w *Worker) send(kind wire.Kind, job, round uint64, shardID uint32, pieces ...[]byte) {
	if last := w.lastRound.Load(); round > last && w.lastRound.CompareAndSwap(last, round) {
		w.rounds.Add(1)
	}
	w.publish(wire.UpSubject(job), "up", kind, job, round, shardID, pieces)
}

// relay is workerIO's: one message to another worker.
func (w *Worker) relay(to string, kind wire.Kind, job, round uint64, id uint32, pieces ...[]byte) {
	w.publish(wire.RelaySubject(job, to), "relay", kind, job, round, id, pieces)
}

func (w *Worker) publish(subj, direction string, kind wire.Kind, job, round uint64, id uint32, pieces [][]byte) {
	err := w.chunks.SendPieces(kind, job, round, id, pieces, int(w.nc.MaxPayload()), func(b []byte) error {
		w.bytesOut.Add(int64(len(b)))
		if m := w.cfg.Metrics; m != nil {
			m.Bytes.WithLabelValues(direction).Add(float64(len(b)))
		}
		return w.bus.Publish(subj, b)
	})
	if err != nil {
		w.log.Error("publish", zap.Stringer("kind", kind), zap.Error(err))
	}
}

func (w *Worker) unlisten() {
	for _, s := range []**nats.Subscription{&w.down, &w.sums} {
		if *s != nil {
			(*s).Unsubscribe()
			*s = nil
		}
	}
}

// listen is workerIO's: the job's broadcast points, and no other's, are
// put together and queued for the core, as are the sums relayed here.
func (w *Worker) listen(job uint64) {
	w.unlisten()
	w.listenRelays(job)
	var asm wire.Assembler
	asm.MaxPending = 4
	sub, err := w.bus.Subscribe(wire.DownSubject(job), func(m *nats.Msg) {
		w.bytesIn.Add(int64(len(m.Data)))
		h, payload, err := wire.DecodeChunk(m.Data)
		if err != nil || h.Kind != wire.KindPoint || h.Job != job {
			w.badMsg.Add(err, h.Kind)
			return
		}
		if parts, ok := asm.AddParts(h, payload); ok {
			asm.Forget(h.Round)
			w.points <- roundMsg{round: h.Round, job: h.Job, parts: parts}
		}
	})
	if err != nil {
		w.log.Error("subscribe", zap.Error(err))
		return
	}
	// A large broadcast must never be dropped silently for want of room.
	sub.SetPendingLimits(-1, -1)
	w.down = sub
}

// listenRelays queues the job's sums other workers relay here.
func (w *Worker) listenRelays(job uint64) {
	var asm wire.Assembler
	asm.MaxPending = 64
	sub, err := w.bus.Subscribe(wire.RelaySubject(job, w.ID), func(m *nats.Msg) {
		w.bytesIn.Add(int64(len(m.Data)))
		h, payload, err := wire.DecodeChunk(m.Data)
		if err != nil || (h.Kind != wire.KindRelayNode && h.Kind != wire.KindRelayShard) || h.Job != job {
			w.badMsg.Add(err, h.Kind)
			return
		}
		if whole, ok := asm.Add(h, payload); ok {
			w.relays <- relayMsg{kind: h.Kind, job: h.Job, round: h.Round, id: h.Shard, payload: whole}
		}
	})
	if err != nil {
		w.log.Error("subscribe", zap.Error(err))
		return
	}
	sub.SetPendingLimits(-1, -1)
	w.sums = sub
}

// startLoad is workerIO's: the shards are read on a goroutine of their own and
// handed to the Run loop when read.
func (w *Worker) startLoad(job uint64, src wire.Source, ranges []input.Range) {
	go func() {
		start := time.Now()
		read := func() ([]*shard.Shard, int, error) { return w.readShards(src, ranges) }
		if load := w.cfg.Load; load != nil {
			plain := read
			read = func() ([]*shard.Shard, int, error) { return load(plain, &w.read) }
		}
		shards, failed, err := read()
		w.loaded <- loadResult{job: job, shards: shards, err: err, failed: failed, took: time.Since(start), ranges: ranges}
	}()
}

// holding is workerIO's: what the next heartbeats say. A load that ended
// is told at once: a moved shard changes hands at its new owner's
// heartbeat, and a status page shows the worker ready.
func (w *Worker) holding(job uint64, held, loading []int) {
	w.mu.Lock()
	loaded := len(loading) < len(w.hb.Loading)
	w.hb.Job, w.hb.Held, w.hb.Loading = job, held, loading
	w.mu.Unlock()
	if loaded {
		w.beatNow()
	}
	if m := w.cfg.Metrics; m != nil {
		m.Shards.Set(float64(len(held)))
	}
}

func (w *Worker) readShards(src wire.Source, ranges []input.Range) ([]*shard.Shard, int, error) {
	if src.Bucket == "" {
		shards, err := shard.LoadChecked(src.Path, ranges, shard.Options{Parallel: w.cfg.Parallel, Read: &w.read, Shared: w.cfg.Shared}.Compacted(w.cfg.Compact), src.File)
		return shards, 0, err
	}
	js, err := jetstream.New(w.nc)
	if err != nil {
		return nil, 0, err
	}
	ctx := context.Background()
	var store jetstream.ObjectStore
	err = transport.RetryStore(w.log, src.Bucket, func() (err error) {
		store, err = js.ObjectStore(ctx, src.Bucket)
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("object store %s: %w", src.Bucket, err)
	}
	failed := 0
	shards, err := shard.ReadEach(ranges, shard.Options{Shared: w.cfg.Shared}.Compacted(w.cfg.Compact), func(r input.Range) (*shard.Shard, error) {
		failed = r.ID
		name := src.ObjectName(r.ID)
		var obj jetstream.ObjectResult
		err := transport.RetryStore(w.log, name, func() (err error) {
			obj, err = store.Get(ctx, name)
			return transport.InBucket(err)
		})
		if err != nil {
			return nil, fmt.Errorf("object %s: %w", name, err)
		}
		defer obj.Close()
		zr, err := zstd.NewReader(input.Counted(obj, &w.read), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		return shard.Read(zr, fmt.Sprintf("%s/%s", src.Bucket, name), r.ID)
	})
	return shards, failed, err
}

// heardForeign says once that a coordinator of another release wrote to
// this worker: it refuses the worker (Cluster.refuse), which is given
// no work.
func (w *Worker) heardForeign(err error) {
	if ve := (*wire.VersionError)(nil); errors.As(err, &ve) && w.refused.CompareAndSwap(false, true) {
		w.log.Error("a coordinator of another release refuses this worker: run one release on every host",
			zap.Uint8("its_wire_version", ve.Got), zap.Uint8("wire_version", wire.Version))
	}
}
