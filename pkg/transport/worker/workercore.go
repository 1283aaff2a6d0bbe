package worker

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/cols"
	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
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
	adder    adder                             // adds the shards under nodes held whole (nil: none)
	started  time.Time                         // when this round's evaluation began
	local    *objective.Local
	tree     *treeRound                 // this round's tree among the workers (nil: sums go to the coordinator)
	lastTree *treeRound                 // the last round's, reused while its owners and width stay
	early    []relayMsg                 // sums relayed for a round whose point has not come
	colsAt   map[reduce.NodeID][]uint32 // see pointCols

}

// workerEvent is one thing a worker's loop hands its core: an
// assignment, a finished load, a point, or a sum another worker relayed.
type workerEvent interface{ workerEvent() }

type (
	gotAssign struct{ a wire.Assign }
	gotLoad   struct{ r loadResult }
	gotPoint  struct{ m roundMsg }
	gotRelay  struct{ m relayMsg }
)

func (gotAssign) workerEvent() {}
func (gotLoad) workerEvent()   {}
func (gotPoint) workerEvent()  {}
func (gotRelay) workerEvent()  {}

// Step is the core's one way in: the worker's protocol has no clock of
// its own (the coordinator's decides when a round goes out again).
func (w *workerCore) Step(ev workerEvent) {
	switch ev := ev.(type) {
	case gotAssign:
		w.assign(ev.a)
	case gotLoad:
		w.finishLoad(ev.r)
	case gotPoint:
		w.onPoint(ev.m)
	case gotRelay:
		w.onRelay(ev.m)
	}
}

var errNoX = errors.New("transport: a Hessian-vector point at an x this worker does not hold (waiting for the round with x)")

// workerIO is what a worker's core asks of the world around it.
type workerIO interface {
	// send sends one message up to the coordinator, whole (the NATS loop
	// cuts it into chunks). The pieces are kept for resends: they must
	// not be written to.
	send(kind wire.Kind, job, round uint64, shardID uint32, pieces ...[]byte)
	// listen makes the job's broadcast points come to the core, and no
	// other job's.
	listen(job uint64)
	// load reads the ranges of src and, later, steps the core with the
	// result (finishLoad).
	load(job uint64, src wire.Source, ranges []input.Range)
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

// evalOf is the evaluation a point's op asks for (OpHessVecAt's once
// the worker has put its x back: a Hessian-vector product).
func evalOf(op wire.Op) osgm.Op {
	return [...]osgm.Op{wire.OpEval: osgm.OpEval, wire.OpHessVec: osgm.OpHessVec, wire.OpEvalDiag: osgm.OpEvalDiag,
		wire.OpEvalHess: osgm.OpEvalHess, wire.OpHessVecAt: osgm.OpHessVec}[op]
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

// assign makes the held shards match the coordinator's list.
func (w *workerCore) assign(a wire.Assign) {
	describe := a.Describe
	if a.Job != w.job {
		// The new coordinator knows nothing of the shards kept.
		describe = append(w.switchJob(a), describe...)
	}
	w.source, w.total = a.Source, a.Total
	w.want = map[int]input.Range{}
	for _, r := range a.Shards {
		w.want[r.ID] = r
	}
	for id := range w.shards {
		if _, ok := w.want[id]; !ok {
			delete(w.shards, id)
			w.log.Info("dropped shard", zap.Int("shard", id))
		}
	}
	var todo []input.Range
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
	w.io.load(a.Job, a.Source, todo)
}

// switchJob leaves the last job for a's. Shards of the same file, cut at
// the same bytes, stay: a coordinator resumed from a checkpoint, or the
// next training of the same file (another C, say), finds them loaded
// instead of waiting for every worker to read the file again. It returns
// the ids of the shards kept.
func (w *workerCore) switchJob(a wire.Assign) []int {
	job := a.Job
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
	w.tree, w.lastTree, w.early, w.colsAt = nil, nil, nil, nil
	w.shards = kept
	clear(w.loading)
	w.io.listen(job)
	return ids
}

func (w *workerCore) finishLoad(r loadResult) {
	if r.job != w.job {
		return
	}
	if r.err != nil {
		// A warning: the coordinator ends the job with this error and
		// reports it, so -q's one line of trouble stays one line.
		w.log.Warn("load failed; the coordinator is told", zap.Error(r.err))
		body, _ := json.Marshal(wire.LoadError{Worker: w.id, Shard: r.failed, Err: r.err.Error()})
		w.publishUp(wire.KindError, 0, uint32(r.failed), body)
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
			w.bad.Add(err, wire.KindPoint)
			return
		}
		w.evaluate(fresh, false)
	}
}

// setFolds numbers the rows' cross-validation folds as the current point
// describes them. The numbering of all rows is computed once per (folds,
// rows) and kept, for shards that arrive later.
func (w *workerCore) setFolds(shards []*shard.Shard) error {
	p := w.point
	if p.Folds == 0 {
		return nil
	}
	if w.foldN != p.Folds || uint64(len(w.foldIDs)) != p.Rows {
		if p.Rows > 1<<31-1 {
			return fmt.Errorf("point: %d rows in folds", p.Rows)
		}
		ids, err := objective.Folds(int(p.Rows), int(p.Folds))
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
func (w *workerCore) describe(s *shard.Shard) {
	meta := shard.MetaOf(s)
	w.publishUp(wire.KindMeta, 0, uint32(s.ID), wire.EncodeMeta(w.id, &meta))
}

func (w *workerCore) rebuildLocal() {
	ids := make([]int, 0, len(w.shards))
	for id := range w.shards {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	list := make([]*shard.Shard, len(ids))
	for i, id := range ids {
		list[i] = w.shards[id]
	}
	w.local = objective.NewLocal(list, w.cfg.Parallel)
	w.adder, w.colsAt = nil, nil
	if w.total == 0 {
		return
	}
	// The groups held whole, and above them the highest nodes held whole,
	// go up as one sum each: with shards given out in contiguous blocks
	// that is a few messages per worker, whatever the number of shards.
	// Wide data whose shards touch most columns is summed in dense
	// vectors; the rest in the groups' and nodes' own columns.
	lists := make(map[int]cols.List, len(ids))
	for _, id := range ids {
		lists[id] = w.shards[id].Cols
	}
	if d := reduce.NewDenseSum(w.total, lists); d != nil && d.Pays() {
		d.Emit, d.Release = w.sendNode, w.local.Release
		w.adder = d
		return
	}
	groups := reduce.HeldGroups(w.total, lists)
	comb := reduce.NewCombiner(w.total, reduce.BuildNodes(w.total, groups), w.sendNode)
	w.adder = reduce.NewAdder(w.total, func(g int) *reduce.Group { return groups[g] }, comb, w.local.Release)
}

// adder is how a worker adds the partials of its shards under the tree's
// nodes it holds whole, which then go up as one sum each: in dense
// vectors on wide data (reduce.DenseSum), else in the groups' and nodes'
// own columns (reduce.Adder). Add's held is false for a shard under no
// node held whole: its partial goes up alone.
type adder interface {
	Reset() // a round begins
	Add(p *reduce.Partial, K, hess int) (held, took bool, err error)
}

func (w *workerCore) sendNode(id reduce.NodeID, sum *reduce.Partial) error {
	sum.Seconds = w.now().Sub(w.started).Seconds()
	w.sums[id] = sum
	if w.tree != nil && id != reduce.Root(w.total) {
		return w.tree.addNode(id, sum, w.pointCols(id))
	}
	// The whole tree's sum, from this worker alone, goes up as it is.
	w.publishSum(id, sum)
	return nil
}

// publishSum sends a node's sum up. The sum's memory is not written
// again before the next round, so the message goes as views of it (a
// resend encodes it again); or, when its gradient goes sparse, laid out
// in memory of its own that serves again from the next round on.
func (w *workerCore) publishSum(id reduce.NodeID, sum *reduce.Partial) {
	var buf []byte
	if n := len(w.spare); n > 0 {
		buf, w.spare = w.spare[n-1], w.spare[:n-1]
	}
	pieces := wire.PartialPieces(sum, buf, false)
	if len(pieces) == 1 {
		w.laidOut = append(w.laidOut, pieces[0])
	}
	w.publishUp(wire.KindGroup, w.round, id.Wire(), pieces...)
}

// sent reports whether a node sum sent this round covers shard s.
func (w *workerCore) sent(s int) bool {
	for id := range w.sums {
		if first, end := id.Shards(w.total); s >= first && s < end {
			return true
		}
	}
	return false
}

func (w *workerCore) onPoint(m roundMsg) {
	if m.job != w.job || m.round < w.round {
		return
	}
	if m.round == w.round && w.point != nil {
		// The coordinator is missing results of this round: send again
		// what was computed, compute what was not, to the coordinator
		// even in a round whose tree the workers were adding. A resend
		// in another layout (the whole point, after an own point that
		// lacked the columns of shards loaded since) replaces the point
		// in hand.
		w.tree = nil
		if p, err := w.decodePoint(m.parts, nil); err == nil && !sameLayout(w.live, p) {
			if err := w.setPoint(p); err != nil {
				w.bad.Add(err, wire.KindPoint)
				return
			}
		}
		for _, id := range slices.SortedFunc(maps.Keys(w.sums), func(a, b reduce.NodeID) int { return cmp.Compare(a.Wire(), b.Wire()) }) {
			w.publishSum(id, w.sums[id])
		}
		var todo []*shard.Shard
		for _, s := range w.local.Shards {
			if b, ok := w.answered[s.ID]; ok {
				w.publishUp(wire.KindPartial, w.round, uint32(s.ID), b)
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
		w.publishUp(wire.KindNeedX, m.round, 0, []byte(w.id))
	}
	if err == nil {
		err = w.setPoint(p)
	}
	if err != nil {
		w.bad.Add(err, wire.KindPoint)
		w.point, w.live = nil, nil
		return
	}
	w.round, w.answered, w.sums = m.round, map[int][]byte{}, map[reduce.NodeID]*reduce.Partial{}
	w.spare, w.laidOut = append(w.spare, w.laidOut...), w.laidOut[:0]
	if !slices.Equal(p.Labels, w.order) {
		w.order = p.Labels
		for _, s := range w.shards {
			s.SetClasses(w.order)
		}
	}
	if err := w.setFolds(w.local.Shards); err != nil {
		w.bad.Add(err, wire.KindPoint)
		w.point, w.live = nil, nil
		return
	}
	w.startTree(p)
	w.evaluate(w.local.Shards, true)
}

// decodePoint decodes a point into into's memory (nil: its own). A
// Hessian-vector point without x takes x from the point in hand, which
// must be the one it names, in the same layout; errNoX otherwise.
func (w *workerCore) decodePoint(parts [][]byte, into *wire.Point) (*wire.Point, error) {
	held := w.point
	p, err := wire.DecodePointParts(parts, into)
	if err != nil {
		return nil, err
	}
	if p.Op != wire.OpHessVecAt {
		return p, nil
	}
	if held == nil || p.Stamp == 0 || held.Stamp != p.Stamp || len(held.X) != len(p.V) || !sameLayout(w.live, p) || len(p.V[0]) != len(held.X[0]) {
		return nil, errNoX
	}
	p.Op, p.X = wire.OpHessVec, held.X
	return p, nil
}

// setPoint makes p the point in hand, with the map of the coordinates it
// carries (nil: all).
func (w *workerCore) setPoint(p *wire.Point) error {
	if !sameLayout(w.live, p) {
		w.colsAt = nil // numbered for the other layout
	}
	if len(p.Live) == 0 {
		w.point, w.live = p, nil
		return nil
	}
	if !sameLayout(w.live, p) {
		// Shards build their column maps into a map once, so the map
		// stays while points bring the same bitmap.
		m, err := cols.NewLiveMap(slices.Clone(p.Live), int(p.Full))
		if err != nil {
			return err
		}
		w.live = m
	}
	w.point = p
	return nil
}

// sameLayout reports whether p carries the coordinates m does (nil: all).
func sameLayout(m *cols.LiveMap, p *wire.Point) bool {
	if len(p.Live) == 0 {
		return m == nil
	}
	return m != nil && m.Full == int(p.Full) && slices.Equal(m.Bits, p.Live)
}

// evaluate computes and publishes the partials of the given shards at the
// current point; with grouped set, the groups it holds whole go up as one
// sum each.
func (w *workerCore) evaluate(shards []*shard.Shard, grouped bool) {
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
		local = w.local.Sub(shards)
	}
	start := w.now()
	if p.Op == wire.OpCorrect {
		w.tally(shards, pt, start)
		return
	}
	var vp *shard.Point
	if p.Op == wire.OpHessVec {
		vp = shard.NewPoint(p.V, p.Bias, at)
		vp.Live = w.live
	}
	hess := 0
	if p.Op == wire.OpEvalHess {
		hess = shard.HessLen(len(p.X[0]))
	}
	w.started = start
	if grouped && w.adder != nil {
		w.adder.Reset()
	}
	if m := w.cfg.Metrics; m != nil {
		defer func(start time.Time) { m.Eval.Observe(w.now().Sub(start).Seconds()) }(w.now())
	}
	local.Eval(evalOf(p.Op), pt, vp, func(part *reduce.Partial) error {
		if grouped && w.adder != nil {
			if held, _, err := w.adder.Add(part, len(part.Loss), hess); held || err != nil {
				return err
			}
		}
		part.Seconds = w.now().Sub(start).Seconds()
		w.answer(part)
		local.Release(part)
		return nil
	})
}

// shardPoint is the round's point as the shards' kernels take it, and at
// is where its vectors hold the bias weight: last, whether they carry
// every coordinate or the live ones. Not ok when it does not serve these
// shards: then it has logged why, or asked for the whole point.
func (w *workerCore) shardPoint(shards []*shard.Shard) (pt *shard.Point, at int, ok bool) {
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
	pt.Holdout, pt.Stamp, pt.Live, pt.Loss, pt.Epsilon = int(p.Holdout), p.Stamp, live, shard.Loss(p.Loss), p.Epsilon
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
			w.publishUp(wire.KindNeedX, w.round, 0, []byte(w.id))
			return nil, 0, false
		}
		w.log.Error("point's live coordinates", zap.Error(err))
		return nil, 0, false
	}
	return pt, at, true
}

// tally answers a round that counts each shard's correct predictions, in
// a partial's loss (rows by class) and bias gradient (correct by class).
func (w *workerCore) tally(shards []*shard.Shard, pt *shard.Point, start time.Time) {
	var sc shard.Scratch
	for _, s := range shards {
		t := s.Tally(pt, &sc)
		if t.Sums != nil { // a regression's: its rows, then its sums (and a partial's zero bias gradients)
			loss := append([]float64{float64(t.Rows[0])}, t.Sums...)
			part := &reduce.Partial{Shard: s.ID, Loss: loss, BiasGrad: make([]float64, len(loss))}
			part.Seconds = w.now().Sub(start).Seconds()
			w.answer(part)
			continue
		}
		part := &reduce.Partial{Shard: s.ID, Loss: make([]float64, len(t.Rows)), BiasGrad: make([]float64, len(t.Rows))}
		for k := range t.Rows {
			part.Loss[k], part.BiasGrad[k] = float64(t.Rows[k]), float64(t.Correct[k])
		}
		part.Seconds = w.now().Sub(start).Seconds()
		w.answer(part)
	}
}

func (w *workerCore) answer(part *reduce.Partial) {
	b := wire.AppendPartial(nil, part)
	w.answered[part.Shard] = b
	if w.tree != nil {
		if err := w.tree.addShard(part, w.pointCols(reduce.NodeID{Level: -1, Index: part.Shard})); err != nil {
			w.bad.Add(err, wire.KindPartial)
		}
		return
	}
	w.publishUp(wire.KindPartial, w.round, uint32(part.Shard), b)
}

func (w *workerCore) publishUp(kind wire.Kind, round uint64, shardID uint32, payload ...[]byte) {
	w.io.send(kind, w.job, round, shardID, payload...)
}

// startTree sets the round's tree from point p: nil when p has each
// worker send its sums to the coordinator.
func (w *workerCore) startTree(p *wire.Point) {
	w.tree = nil
	if len(p.Owners) == 0 || len(p.Owners) != w.total {
		return
	}
	owners := make([]string, len(p.Owners))
	for s, o := range p.Owners {
		owners[s] = p.Relays[o]
	}
	width := len(p.X[0])
	if p.Bias >= 0 {
		width--
	}
	t := w.lastTree
	if t == nil || t.relay.Width() != width || !slices.Equal(t.owners, owners) {
		t = newTreeRound(w.total, owners, width, w.id)
		w.lastTree = t
	}
	t.begin(func(to string, kind wire.Kind, id uint32, pieces ...[]byte) {
		if to == "" {
			w.publishUp(kind, w.round, id, pieces...)
			return
		}
		w.io.relay(to, kind, w.job, w.round, id, pieces...)
	})
	w.tree = t
	early := w.early
	w.early = nil
	for _, m := range early {
		w.onRelay(m)
	}
}

// onRelay takes a sum another worker relayed here: kept when its round's
// point has not come yet, added when it is this round's.
func (w *workerCore) onRelay(m relayMsg) {
	switch {
	case m.job != w.job || m.round < w.round:
		return
	case m.round > w.round || w.point == nil:
		if len(w.early) < maxEarly {
			w.early = append(w.early, m)
		}
		return
	case w.tree == nil:
		return // the round went out again, sums to the coordinator
	}
	if err := w.tree.add(m); err != nil {
		w.bad.Add(err, m.kind)
	}
}

// pointCols are the point's coordinates of a node's (or, at level -1, a
// shard's) columns: its shards' columns, numbered as the point numbers
// them. They stay while the shards held and the point's layout do.
func (w *workerCore) pointCols(id reduce.NodeID) []uint32 {
	if c, ok := w.colsAt[id]; ok {
		return c
	}
	first, end := id.Index, id.Index+1
	if id.Level >= 0 {
		first, end = id.Shards(w.total)
	}
	var c []uint32
	for s := first; s < end; s++ {
		if sh := w.shards[s]; sh != nil {
			c = sh.Cols.Append(c)
		}
	}
	slices.Sort(c)
	c = slices.Compact(c)
	if w.live != nil {
		for l, j := range c {
			c[l], _ = w.live.Rank(j)
		}
	}
	if w.colsAt == nil {
		w.colsAt = map[reduce.NodeID][]uint32{}
	}
	w.colsAt[id] = c
	return c
}
