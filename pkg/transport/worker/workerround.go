package worker

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/cols"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// onPoint takes a point the coordinator broadcast, or sent this worker
// alone. A new round's has the shards evaluated there, and each shard's
// partial sent up, or the sums of the tree's nodes held whole, or added
// along the workers' tree; one of the round in hand asks for what went
// missing.
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
	pt.Terms, pt.Stamp, pt.Live = p.Terms, p.Stamp, live
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

// evalOf is the evaluation a point's op asks for (OpHessVecAt's once
// the worker has put its x back: a Hessian-vector product).
func evalOf(op wire.Op) osgm.Op {
	return [...]osgm.Op{wire.OpEval: osgm.OpEval, wire.OpHessVec: osgm.OpHessVec, wire.OpEvalDiag: osgm.OpEvalDiag,
		wire.OpEvalHess: osgm.OpEvalHess, wire.OpHessVecAt: osgm.OpHessVec}[op]
}

var errNoX = errors.New("transport: a Hessian-vector point at an x this worker does not hold (waiting for the round with x)")

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
