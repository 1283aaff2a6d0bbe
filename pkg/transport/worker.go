package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/metrics"
	"github.com/osgm-svm/osgm/pkg/shard"

	"github.com/osgm-svm/osgm/pkg/osgm"
)

// Defaults of the protocol's timing, shared by coordinator and workers.
const (
	DefaultHeartbeat        = 500 * time.Millisecond
	DefaultHeartbeatTimeout = 3 * time.Second
	DefaultResendAfter      = 3 * time.Second
	// DefaultLoadStall is how long a worker's load may read nothing
	// before the coordinator takes it for hung: a healthy load reads all
	// the time, and what it does after reading (building, compacting)
	// takes seconds.
	DefaultLoadStall = time.Minute
	upQueue          = 4096
)

// wireOp is a point's operation as its byte on the wire: osgm's four
// evaluations, and two kinds only the protocol has.
type wireOp uint8

const (
	pointEval wireOp = iota
	pointHessVec
	pointEvalDiag
	pointEvalHess
	// pointCorrect asks workers to tally rows and correct predictions
	// per class (shard.Tally) instead of evaluating: rows come back as
	// the partial's Loss, correct ones as its BiasGrad.
	pointCorrect
	pointHessVecAt // see below
)

// wireOpOf is an evaluation's byte on the wire.
func wireOpOf(op osgm.Op) wireOp {
	switch op {
	case osgm.OpHessVec:
		return pointHessVec
	case osgm.OpEvalDiag:
		return pointEvalDiag
	case osgm.OpEvalHess:
		return pointEvalHess
	}
	return pointEval
}

// eval is the evaluation a point's op asks for (pointHessVecAt's once
// the worker has put its x back: a Hessian-vector product).
func (w wireOp) eval() osgm.Op {
	return [...]osgm.Op{pointEval: osgm.OpEval, pointHessVec: osgm.OpHessVec, pointEvalDiag: osgm.OpEvalDiag,
		pointEvalHess: osgm.OpEvalHess, pointHessVecAt: osgm.OpHessVec}[w]
}

// pointHessVecAt is a Hessian-vector product at the point the worker last
// received, named by the stamp: the message carries V alone. Newton's CG
// steps multiply at the x of the round before (the trial point just
// accepted, or the step before), so their points are half the bytes (8 MB
// a worker at 1 M features, not 16). A worker that does not hold that
// point (it missed the round before) says so (KindNeedX) and answers the
// broadcast with x that the coordinator sends at once.

var errNoX = errors.New("transport: a Hessian-vector point at an x this worker does not hold (waiting for the round with x)")

// WorkerConfig configures a worker.
type WorkerConfig struct {
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

	// wholeGradients sends every gradient whole, never as a bitmap and
	// its values; sparseSums sums whole nodes in their own columns even
	// where dense vectors would pay (tests compare each pair).
	wholeGradients, sparseSums bool
}

// Worker holds shards for a coordinator and evaluates them on request. All
// protocol state is owned by the Run goroutine; NATS callbacks only
// decode, reassemble and queue.
type Worker struct {
	ID  string
	cfg WorkerConfig
	nc  *nats.Conn // the connection's state: connected, payload limit, reconnections
	bus bus        // its messages: nc, or in tests one that loses some
	log *zap.Logger

	cmds   chan Assign
	points chan roundMsg
	loaded chan loadResult

	// Run goroutine state.
	job      uint64
	source   Source
	down     *nats.Subscription
	shards   map[int]*shard.Shard
	want     map[int]shard.Range
	loading  map[int]bool
	order    []float64
	foldN    uint32   // the folds foldIDs numbers (0: none yet)
	foldIDs  []uint16 // every row's fold, for the current point's folds
	point    *Point
	live     *shard.LiveMap // the coordinates point carries (nil: all)
	askedFor uint64         // the last round this worker asked for the whole point
	round    uint64
	answered map[int][]byte            // this round's encoded partials, for resends
	sums     map[shard.NodeID][][]byte // this round's node sums as sent, for resends
	laidOut  [][]byte                  // memory of this round's sums sent sparse
	spare    [][]byte                  // and of the last rounds', free again
	total    int                       // shards in the job
	groups   map[int]*shard.Group
	comb     *shard.Combiner // sums the tree's nodes this worker holds whole
	dense    *shard.DenseSum // or, on wide data, this does
	started  time.Time       // when this round's evaluation began
	local    *shard.Local

	// The one chunk buffer kept from round to round for what goes up.
	// Points come down as chunks decoded in place (the next point goes
	// into the last one's memory), and node sums go up from the memory
	// they were added in: no vector crosses the bus through a copy of
	// its own.
	chunks chunker

	// forgetPoints, set by tests, forgets the last point that many times
	// when a point without x comes, as a worker that missed a round does.
	forgetPoints int
	// hangLoads, set by tests, makes loads wait for it to close before
	// they read, as a load from a hung network mount does.
	hangLoads chan struct{}

	read   atomic.Int64 // bytes its loads have read (shard.Options.Read)
	mu     sync.Mutex   // guards hb, read by the heartbeat goroutine
	hb     Heartbeat
	beat   chan struct{} // a heartbeat now, not at the next tick
	badMsg counter
}

// bus is what a worker sends and receives its messages through: the NATS
// connection, or in tests one that loses messages on the way (a cut
// connection, a server that drops what a slow reader had queued, a hung
// evaluation that hears no more points).
type bus interface {
	Publish(subject string, data []byte) error
	Subscribe(subject string, cb nats.MsgHandler) (*nats.Subscription, error)
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
	ranges []shard.Range
}

// NewWorker prepares a worker on an open connection.
func NewWorker(nc *nats.Conn, cfg WorkerConfig) *Worker {
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Parallel < 1 {
		cfg.Parallel = 1
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	id := nuid.Next()
	if cfg.Name != "" {
		id = cfg.Name + "-" + id
	}
	w := &Worker{ID: id, cfg: cfg, nc: nc, bus: nc, log: cfg.Log.With(zap.String("worker", id)),
		cmds: make(chan Assign, 16), points: make(chan roundMsg, 64), loaded: make(chan loadResult, 4),
		shards: map[int]*shard.Shard{}, want: map[int]shard.Range{}, loading: map[int]bool{}, beat: make(chan struct{}, 1)}
	w.badMsg.log = w.log
	w.hb = Heartbeat{ID: id, Name: cfg.Name, OwnPoints: true}
	return w
}

// Run serves until ctx ends.
func (w *Worker) Run(ctx context.Context) error {
	// Points made for this worker alone (see PointMode) come on its own
	// subject, which every deployment already lets it read: a broadcast
	// and an own point of the same round are different messages, put
	// together apart.
	var own Assembler
	own.MaxPending = 4
	sub, err := w.bus.Subscribe(WorkerSubject(w.ID), func(m *nats.Msg) {
		h, payload, err := DecodeChunk(m.Data)
		if err == nil && h.Kind == KindProbe {
			return // the server answers for us if we are gone
		}
		if err == nil && h.Kind == KindPoint {
			if parts, ok := own.AddParts(h, payload); ok {
				own.Forget(h.Round)
				select {
				case w.points <- roundMsg{round: h.Round, job: h.Job, parts: parts}:
				case <-ctx.Done():
				}
			}
			return
		}
		if err != nil || h.Kind != KindAssign {
			w.badMsg.add(err, h.Kind)
			return
		}
		var a Assign
		if err := json.Unmarshal(payload, &a); err != nil {
			w.badMsg.add(err, h.Kind)
			return
		}
		select {
		case w.cmds <- a:
		case <-ctx.Done():
		}
	})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	hello, err := w.bus.Subscribe(SubjectHello, func(*nats.Msg) { w.beatNow() })
	if err != nil {
		return err
	}
	defer hello.Unsubscribe()
	defer onReconnect(w.nc, func() {
		w.mu.Lock()
		w.hb.Reconnects++
		w.mu.Unlock()
		w.beatNow()
	})()
	// A connection nats.go gives up on (credentials refused) never comes
	// back: end, so that a supervisor sees the failure and the error.
	closed := make(chan struct{}, 1)
	defer onClosed(w.nc, func() { closed <- struct{}{} })()
	if err := closedError(w.nc); err != nil { // closed before the handler was set
		return err
	}
	go w.heartbeats(ctx)
	w.log.Info("worker ready", zap.String("subject", WorkerSubject(w.ID)), zap.Bool("connected", w.nc.IsConnected()))
	for {
		select {
		case <-closed:
			return closedError(w.nc)
		case <-ctx.Done():
			if w.down != nil {
				w.down.Unsubscribe()
			}
			w.sayGoodbye()
			return nil
		case a := <-w.cmds:
			w.assign(a)
		case r := <-w.loaded:
			w.finishLoad(r)
		case p := <-w.points:
			w.onPoint(p)
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
	hb, _ := json.Marshal(w.hb)
	w.mu.Unlock()
	Chunks(KindHeartbeat, 0, 0, 0, hb, int(w.nc.MaxPayload()), func(b []byte) error {
		return w.bus.Publish(SubjectHeartbeat, b)
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

func (w *Worker) publishState() {
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
	w.mu.Lock()
	w.hb.Job, w.hb.Held, w.hb.Loading = w.job, held, loading
	w.mu.Unlock()
	if m := w.cfg.Metrics; m != nil {
		m.Shards.Set(float64(len(held)))
	}
}

// assign makes the held shards match the coordinator's list.
func (w *Worker) assign(a Assign) {
	describe := a.Describe
	if a.Job != w.job {
		// The new coordinator knows nothing of the shards kept.
		describe = append(w.switchJob(a), describe...)
	}
	w.source, w.total = a.Source, a.Total
	w.want = map[int]shard.Range{}
	for _, r := range a.Shards {
		w.want[r.ID] = r
	}
	for id := range w.shards {
		if _, ok := w.want[id]; !ok {
			delete(w.shards, id)
			w.log.Info("dropped shard", zap.Int("shard", id))
		}
	}
	var todo []shard.Range
	for _, r := range a.Shards {
		if w.shards[r.ID] == nil && !w.loading[r.ID] {
			todo = append(todo, r)
			w.loading[r.ID] = true
		}
	}
	w.rebuildLocal()
	w.publishState()
	for _, id := range describe {
		if s := w.shards[id]; s != nil {
			w.describe(s)
		}
	}
	if len(todo) == 0 {
		return
	}
	w.log.Info("loading shards", zap.Int("count", len(todo)), zap.String("path", a.Source.Path), zap.String("bucket", a.Source.Bucket))
	go func(job uint64, src Source) {
		start := time.Now()
		shards, failed, err := w.load(src, todo)
		w.loaded <- loadResult{job: job, shards: shards, err: err, failed: failed, took: time.Since(start), ranges: todo}
	}(a.Job, a.Source)
}

// switchJob leaves the last job for a's. Shards of the same file, cut at
// the same bytes, stay: a coordinator resumed from a checkpoint, or the
// next training of the same file (another C, say), finds them loaded
// instead of waiting for every worker to read the file again. It returns
// the ids of the shards kept.
func (w *Worker) switchJob(a Assign) []int {
	job := a.Job
	if w.down != nil {
		w.down.Unsubscribe()
	}
	kept, ids := map[int]*shard.Shard{}, []int{}
	if a.Source.Bucket == "" && w.source.Bucket == "" && a.Source.Path == w.source.Path && a.Source.File == w.source.File {
		for _, r := range a.Shards {
			if s := w.shards[r.ID]; s != nil && w.want[r.ID] == r {
				s.Reuse()
				kept[r.ID] = s
				ids = append(ids, r.ID)
			}
		}
	}
	if len(kept) > 0 {
		w.log.Info("shards kept for the new job", zap.Int("count", len(kept)), zap.String("path", a.Source.Path))
	}
	w.job, w.round, w.point, w.answered, w.sums, w.order = job, 0, nil, nil, nil, nil
	w.live, w.askedFor, w.foldN, w.foldIDs = nil, 0, 0, nil
	w.shards = kept
	clear(w.loading)
	var asm Assembler
	asm.MaxPending = 4
	sub, err := w.bus.Subscribe(DownSubject(job), func(m *nats.Msg) {
		h, payload, err := DecodeChunk(m.Data)
		if err != nil || h.Kind != KindPoint || h.Job != job {
			w.badMsg.add(err, h.Kind)
			return
		}
		if parts, ok := asm.AddParts(h, payload); ok {
			asm.Forget(h.Round)
			w.points <- roundMsg{round: h.Round, job: h.Job, parts: parts}
		}
	})
	if err != nil {
		w.log.Error("subscribe", zap.Error(err))
		return ids
	}
	// A large broadcast must never be dropped silently for want of room.
	sub.SetPendingLimits(-1, -1)
	w.down = sub
	return ids
}

func (w *Worker) load(src Source, ranges []shard.Range) ([]*shard.Shard, int, error) {
	if w.hangLoads != nil {
		<-w.hangLoads
	}
	if src.Bucket == "" {
		shards, err := shard.LoadChecked(src.Path, ranges, w.cfg.Compact.Options(shard.Options{Parallel: w.cfg.Parallel, Read: &w.read, Shared: w.cfg.Shared}), src.File)
		return shards, 0, err
	}
	js, err := jetstream.New(w.nc)
	if err != nil {
		return nil, 0, err
	}
	ctx := context.Background()
	var store jetstream.ObjectStore
	err = RetryStore(w.log, src.Bucket, func() (err error) {
		store, err = js.ObjectStore(ctx, src.Bucket)
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("object store %s: %w", src.Bucket, err)
	}
	failed := 0
	shards, err := shard.ReadEach(ranges, w.cfg.Compact.Options(shard.Options{Shared: w.cfg.Shared}), func(r shard.Range) (*shard.Shard, error) {
		failed = r.ID
		name := src.ObjectName(r.ID)
		var obj jetstream.ObjectResult
		err := RetryStore(w.log, name, func() (err error) {
			obj, err = store.Get(ctx, name)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("object %s: %w", name, err)
		}
		defer obj.Close()
		zr, err := zstd.NewReader(shard.Counted(obj, &w.read), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		return shard.Read(zr, fmt.Sprintf("%s/%s", src.Bucket, name), r.ID)
	})
	return shards, failed, err
}

func (w *Worker) finishLoad(r loadResult) {
	if r.job != w.job {
		return
	}
	if r.err != nil {
		// A warning: the coordinator ends the job with this error and
		// reports it, so -q's one line of trouble stays one line.
		w.log.Warn("load failed; the coordinator is told", zap.Error(r.err))
		body, _ := json.Marshal(LoadError{Worker: w.ID, Shard: r.failed, Err: r.err.Error()})
		w.publishUp(KindError, 0, uint32(r.failed), body)
		for id := range w.loading {
			delete(w.loading, id)
		}
		w.publishState()
		return
	}
	var fresh []*shard.Shard
	for _, s := range r.shards {
		delete(w.loading, s.ID)
		if _, ok := w.want[s.ID]; !ok {
			continue // unassigned while loading
		}
		if w.order != nil {
			s.SetClasses(w.order)
		}
		w.shards[s.ID] = s
		fresh = append(fresh, s)
		w.describe(s)
	}
	w.rebuildLocal()
	w.publishState()
	rows, bytes, held, compact := 0, int64(0), 0, 0
	for _, s := range fresh {
		rows += s.Rows()
		held += s.Bytes()
		if s.Compacted() {
			compact++
		}
	}
	for _, rg := range r.ranges {
		bytes += rg.End - rg.Start
	}
	secs := r.took.Seconds()
	w.log.Info("loaded shards", zap.Int("count", len(fresh)), zap.Int("held", len(w.shards)), zap.Int("rows", rows),
		zap.Int64("bytes", bytes), zap.Int("shard_bytes", held), zap.Int("compact", compact), zap.Duration("took", r.took),
		zap.Float64("rows_per_s", float64(rows)/secs), zap.Float64("mb_per_s", float64(bytes)/secs/1e6))
	if w.point != nil && len(fresh) > 0 {
		if err := w.setFolds(fresh); err != nil {
			w.badMsg.add(err, KindPoint)
			return
		}
		w.evaluate(fresh, false)
	}
}

// setFolds numbers the rows' cross-validation folds as the current point
// describes them. The numbering of all rows is computed once per (folds,
// rows) and kept, for shards that arrive later.
func (w *Worker) setFolds(shards []*shard.Shard) error {
	p := w.point
	if p.Folds == 0 {
		return nil
	}
	if w.foldN != p.Folds || uint64(len(w.foldIDs)) != p.Rows {
		if p.Rows > 1<<31-1 {
			return fmt.Errorf("point: %d rows in folds", p.Rows)
		}
		ids, err := shard.Folds(int(p.Rows), int(p.Folds))
		if err != nil {
			return err
		}
		w.foldN, w.foldIDs = p.Folds, ids
		for _, s := range w.shards {
			s.Fold = nil // numbered for other folds
		}
	}
	for _, s := range shards {
		if s.Fold != nil {
			continue
		}
		if s.ID >= len(p.Starts) || p.Starts[s.ID] > p.Rows || uint64(s.Rows()) > p.Rows-p.Starts[s.ID] {
			return fmt.Errorf("point: shard %d's rows are not within the %d rows of the folds", s.ID, p.Rows)
		}
		start := p.Starts[s.ID]
		if err := s.SetFolds(w.foldIDs[start : start+uint64(s.Rows())]); err != nil {
			return err
		}
	}
	return nil
}

// describe sends a shard's description to the coordinator.
func (w *Worker) describe(s *shard.Shard) {
	meta := shard.MetaOf(s)
	w.publishUp(KindMeta, 0, uint32(s.ID), EncodeMeta(w.ID, &meta))
}

func (w *Worker) rebuildLocal() {
	ids := make([]int, 0, len(w.shards))
	for id := range w.shards {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	list := make([]*shard.Shard, len(ids))
	for i, id := range ids {
		list[i] = w.shards[id]
	}
	w.local = shard.NewLocal(list, w.cfg.Parallel)
	w.groups, w.comb, w.dense = map[int]*shard.Group{}, nil, nil
	if w.total == 0 {
		return
	}
	// The groups held whole, and above them the highest nodes held whole,
	// go up as one sum each: with shards given out in contiguous blocks
	// that is a few messages per worker, whatever the number of shards.
	// Wide data whose shards touch most columns is summed in dense
	// vectors; the rest in the groups' and nodes' own columns.
	cols := make(map[int]shard.Columns, len(ids))
	for _, id := range ids {
		cols[id] = w.shards[id].Cols
	}
	if d := shard.NewDenseSum(w.total, cols); d != nil && d.Pays() && !w.cfg.sparseSums {
		d.Emit, d.Release = w.sendNode, w.local.Release
		w.dense = d
		return
	}
	for _, id := range ids {
		g := shard.GroupOf(id)
		if w.groups[g] != nil {
			continue
		}
		first, end := shard.GroupShards(g, w.total)
		var gc [][]uint32
		for s := first; s < end; s++ {
			c, ok := cols[s]
			if !ok {
				gc = nil
				break
			}
			gc = append(gc, c.Slice())
		}
		if gc != nil {
			w.groups[g] = shard.NewGroup(g, gc)
		}
	}
	w.comb = shard.NewCombiner(w.total, shard.BuildNodes(w.total, w.groups), w.sendNode)
}

func (w *Worker) sendNode(id shard.NodeID, sum *shard.Partial) error {
	sum.Seconds = time.Since(w.started).Seconds()
	// The sum's memory is not written again before the next round, so
	// the message is sent, and kept for resends, as views of it; or, when
	// its gradient goes sparse, laid out in memory of its own that serves
	// again from the next round on.
	var buf []byte
	if n := len(w.spare); n > 0 {
		buf, w.spare = w.spare[n-1], w.spare[:n-1]
	}
	pieces := partialPieces(sum, buf, w.cfg.wholeGradients)
	if len(pieces) == 1 {
		w.laidOut = append(w.laidOut, pieces[0])
	}
	w.sums[id] = pieces
	w.publishUp(KindGroup, w.round, id.Wire(), pieces...)
	return nil
}

// sent reports whether a node sum sent this round covers shard s.
func (w *Worker) sent(s int) bool {
	for id := range w.sums {
		if first, end := id.Shards(w.total); s >= first && s < end {
			return true
		}
	}
	return false
}

func (w *Worker) onPoint(m roundMsg) {
	if m.job != w.job || m.round < w.round {
		return
	}
	if m.round == w.round && w.point != nil {
		// The coordinator is missing results of this round: send again
		// what was computed, compute what was not. A resend in another
		// layout (the whole point, after an own point that lacked the
		// columns of shards loaded since) replaces the point in hand.
		if p, err := w.decodePoint(m.parts, nil); err == nil && !sameLayout(w.live, p) {
			if err := w.setPoint(p); err != nil {
				w.badMsg.add(err, KindPoint)
				return
			}
		}
		for id, pieces := range w.sums {
			w.publishUp(KindGroup, w.round, id.Wire(), pieces...)
		}
		var todo []*shard.Shard
		for _, s := range w.local.Shards {
			if b, ok := w.answered[s.ID]; ok {
				w.publishUp(KindPartial, w.round, uint32(s.ID), b)
			} else if !w.sent(s.ID) {
				todo = append(todo, s)
			}
		}
		w.evaluate(todo, false)
		return
	}
	// A new round: the last point is done with, and the new one is
	// decoded into its memory (a 1 M-feature Hessian-vector point is 16
	// MB). Decoding checks every size before it writes a vector; should
	// it fail all the same, no point is kept.
	p, err := w.decodePoint(m.parts, w.point)
	if err == errNoX {
		w.log.Info("a point without x at an x this worker does not hold: asking for x", zap.Uint64("round", m.round))
		w.publishUp(KindNeedX, m.round, 0, []byte(w.ID))
	}
	if err == nil {
		err = w.setPoint(p)
	}
	if err != nil {
		w.badMsg.add(err, KindPoint)
		w.point, w.live = nil, nil
		return
	}
	w.round, w.answered, w.sums = m.round, map[int][]byte{}, map[shard.NodeID][][]byte{}
	w.spare, w.laidOut = append(w.spare, w.laidOut...), w.laidOut[:0]
	if !slices.Equal(p.Labels, w.order) {
		w.order = p.Labels
		for _, s := range w.shards {
			s.SetClasses(w.order)
		}
	}
	if err := w.setFolds(w.local.Shards); err != nil {
		w.badMsg.add(err, KindPoint)
		w.point, w.live = nil, nil
		return
	}
	w.evaluate(w.local.Shards, true)
}

// decodePoint decodes a point into into's memory (nil: its own). A
// Hessian-vector point without x takes x from the point in hand, which
// must be the one it names, in the same layout; errNoX otherwise.
func (w *Worker) decodePoint(parts [][]byte, into *Point) (*Point, error) {
	held := w.point
	p, err := DecodePointParts(parts, into)
	if err != nil {
		return nil, err
	}
	if p.Op != pointHessVecAt {
		return p, nil
	}
	if w.forgetPoints > 0 {
		w.forgetPoints--
		held = nil
	}
	if held == nil || p.Stamp == 0 || held.Stamp != p.Stamp || len(held.X) != len(p.V) || !sameLayout(w.live, p) || len(p.V[0]) != len(held.X[0]) {
		return nil, errNoX
	}
	p.Op, p.X = pointHessVec, held.X
	return p, nil
}

// setPoint makes p the point in hand, with the map of the coordinates it
// carries (nil: all).
func (w *Worker) setPoint(p *Point) error {
	if len(p.Live) == 0 {
		w.point, w.live = p, nil
		return nil
	}
	if !sameLayout(w.live, p) {
		// Shards build their column maps into a map once, so the map
		// stays while points bring the same bitmap.
		m, err := shard.NewLiveMap(slices.Clone(p.Live), int(p.Full))
		if err != nil {
			return err
		}
		w.live = m
	}
	w.point = p
	return nil
}

// sameLayout reports whether p carries the coordinates m does (nil: all).
func sameLayout(m *shard.LiveMap, p *Point) bool {
	if len(p.Live) == 0 {
		return m == nil
	}
	return m != nil && m.Full == int(p.Full) && slices.Equal(m.Bits, p.Live)
}

// evaluate computes and publishes the partials of the given shards at the
// current point; with grouped set, the groups it holds whole go up as one
// sum each.
func (w *Worker) evaluate(shards []*shard.Shard, grouped bool) {
	if len(shards) == 0 {
		return
	}
	p := w.point
	pt, at, ok := w.shardPoint(shards)
	if !ok {
		return
	}
	// The full set reuses the worker's backend and its scratch memory;
	// only a resend or a late load evaluates a subset.
	local := w.local
	if len(shards) != len(w.local.Shards) {
		local = shard.NewLocal(shards, w.cfg.Parallel)
	}
	start := time.Now()
	if p.Op == pointCorrect {
		w.tally(shards, pt, start)
		return
	}
	var vp *shard.Point
	if p.Op == pointHessVec {
		vp = shard.NewPoint(p.V, p.Bias, at)
		vp.Live = w.live
	}
	sums := map[int]*shard.GroupSum{}
	hess := 0
	if p.Op == pointEvalHess {
		hess = shard.HessLen(len(p.X[0]))
	}
	w.started = start
	if grouped && w.comb != nil {
		w.comb.Reset()
	}
	if grouped && w.dense != nil {
		w.dense.Reset()
	}
	if m := w.cfg.Metrics; m != nil {
		defer func(start time.Time) { m.Eval.Observe(time.Since(start).Seconds()) }(time.Now())
	}
	local.Eval(p.Op.eval(), pt, vp, func(part *shard.Partial) error {
		if grouped && w.dense != nil && w.dense.Holds(part.Shard) {
			_, err := w.dense.Add(part)
			return err
		}
		g := shard.GroupOf(part.Shard)
		gr := w.groups[g]
		if !grouped || gr == nil {
			part.Seconds = time.Since(start).Seconds()
			w.answer(part)
			local.Release(part)
			return nil
		}
		gs := sums[g]
		if gs == nil {
			gs = shard.NewGroupSum(gr, w.total, len(part.Loss), hess, local.Release, nil)
			sums[g] = gs
		}
		if _, err := gs.Add(part); err != nil {
			return err
		}
		if gs.Complete() {
			_, err := w.comb.Add(shard.NodeID{Level: 0, Index: g}, gs.Sum())
			return err
		}
		return nil
	})
}

// shardPoint is the round's point as the shards' kernels take it, and at
// is where its vectors hold the bias weight: last, whether they carry
// every coordinate or the live ones. Not ok when it does not serve these
// shards: then it has logged why, or asked for the whole point.
func (w *Worker) shardPoint(shards []*shard.Shard) (pt *shard.Point, at int, ok bool) {
	p, live := w.point, w.live
	at, features := len(p.X[0]), len(p.X[0])
	if live != nil {
		features = live.Full
	}
	if p.Bias >= 0 {
		at--
		features--
	}
	pt = shard.NewPoint(p.X, p.Bias, at)
	pt.Holdout, pt.Stamp, pt.Live = int(p.Holdout), p.Stamp, live
	if len(p.Weights) > 0 {
		pt.Weights = p.Weights
	}
	if len(p.Classes) > 0 {
		pt.Classes = make([]int32, len(p.Classes))
		for k, c := range p.Classes {
			pt.Classes[k] = int32(c)
		}
	}
	for _, s := range shards {
		if int(s.MaxIndex) > features {
			w.log.Error("point is shorter than the shard's features", zap.Int("shard", s.ID))
			return nil, 0, false
		}
	}
	if err := shard.CheckLive(shards, live); err != nil {
		// An own point, made before this worker held some shard (loaded
		// since, or the coordinator's view of what it holds was behind):
		// the whole point serves it.
		if w.askedFor != w.round {
			w.askedFor = w.round
			w.log.Info("the point lacks columns of shards this worker holds: asking for the whole point",
				zap.Uint64("round", w.round), zap.Error(err))
			w.publishUp(KindNeedX, w.round, 0, []byte(w.ID))
			return nil, 0, false
		}
		w.log.Error("point's live coordinates", zap.Error(err))
		return nil, 0, false
	}
	return pt, at, true
}

// tally answers a round that counts each shard's correct predictions, in
// a partial's loss (rows by class) and bias gradient (correct by class).
func (w *Worker) tally(shards []*shard.Shard, pt *shard.Point, start time.Time) {
	for _, s := range shards {
		t := s.Tally(pt)
		part := &shard.Partial{Shard: s.ID, Loss: make([]float64, len(t.Rows)), BiasGrad: make([]float64, len(t.Rows))}
		for k := range t.Rows {
			part.Loss[k], part.BiasGrad[k] = float64(t.Rows[k]), float64(t.Correct[k])
		}
		part.Seconds = time.Since(start).Seconds()
		w.answer(part)
	}
}

func (w *Worker) answer(part *shard.Partial) {
	b := appendPartialAs(nil, part, w.cfg.wholeGradients)
	w.answered[part.Shard] = b
	w.publishUp(KindPartial, w.round, uint32(part.Shard), b)
}

func (w *Worker) publishUp(kind Kind, round uint64, shardID uint32, payload ...[]byte) {
	subj := UpSubject(w.job)
	err := w.chunks.sendPieces(kind, w.job, round, shardID, payload, int(w.nc.MaxPayload()), func(b []byte) error {
		if m := w.cfg.Metrics; m != nil {
			m.Bytes.WithLabelValues("up").Add(float64(len(b)))
		}
		return w.bus.Publish(subj, b)
	})
	if err != nil {
		w.log.Error("publish", zap.Stringer("kind", kind), zap.Error(err))
	}
}

// counter counts dropped messages and logs the first of each kind.
type counter struct {
	mu     sync.Mutex
	log    *zap.Logger
	counts map[string]int
}

func (c *counter) add(err error, kind Kind) {
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
		c.log.Warn("dropped a bad message (logged once per kind)", zap.Error(err))
	}
}

// Dropped returns how many messages were dropped, by reason.
func (c *counter) Dropped() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := maps.Clone(c.counts)
	if out == nil {
		out = map[string]int{}
	}
	return out
}
