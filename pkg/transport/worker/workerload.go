package worker

import (
	"encoding/json"
	"slices"

	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/cols"
	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// A worker holds the shards the coordinator assigns it, loading those it
// lacks on the loop's goroutines; a new job keeps the shards it shares
// with the last one.

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
	w.io.startLoad(a.Job, a.Source, todo)
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
	// vectors (reduce.DenseSum); the rest in the groups' and nodes' own
	// columns. Either way it is one Adder, whose Add leaves a shard under
	// no node held whole to go up alone.
	lists := make(map[int]cols.List, len(ids))
	for _, id := range ids {
		lists[id] = w.shards[id].Cols
	}
	if d := reduce.NewDenseSum(w.total, lists); d != nil && d.Pays() {
		d.Emit, d.Release = w.sendNode, w.local.Release
		w.adder = d.Adder
		return
	}
	groups := reduce.HeldGroups(w.total, lists)
	comb := reduce.NewCombiner(w.total, reduce.BuildNodes(w.total, groups), w.sendNode)
	w.adder = reduce.NewAdder(w.total, func(g int) *reduce.Group { return groups[g] }, comb, w.local.Release)
}
