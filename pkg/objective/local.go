package objective

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/osgm-svm/osgm/pkg/cols"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/shard"
)

// Local is a Backend over shards held in this process, evaluated by a
// fixed number of goroutines.
type Local struct {
	Alone    // places nothing: Fork and Release are its own
	Shards   []*shard.Shard
	Parallel int

	scratch []shard.Scratch
	// acts is each shard's rows' activity at the last stamped point.
	acts  []shard.Activity
	pool  *partials
	folds int // the fold count the shards are numbered for (0: none)
	// whole, when Summed found it pays, adds the shards up the tree in
	// dense vectors; emit is the pass's add, which gets its node sums.
	whole *reduce.Adder
	emit  func(*reduce.Partial) error
}

// partials are partials handed back for reuse. A list, not a
// sync.Pool: a pool is emptied by every collection, and on wide
// multi-class data each partial lost was megabytes to allocate and zero
// again (news20.t). It never holds more partials than were out at once
// from the Locals that share it.
type partials struct {
	mu   sync.Mutex
	free []*reduce.Partial
}

// NewLocal evaluates shards with parallel goroutines.
func NewLocal(shards []*shard.Shard, parallel int) *Local {
	return &Local{Shards: shards, Parallel: max(parallel, 1), pool: &partials{}}
}

// Sub evaluates some of l's shards (a worker's resend, or its shards
// loaded so far) with l's partials: whoever releases them releases them
// to l (a worker's sums do), so a Local of its own would hand its new
// partials to l's list at every such pass, which kept them all.
func (l *Local) Sub(shards []*shard.Shard) *Local {
	return &Local{Shards: shards, Parallel: l.Parallel, pool: l.pool, folds: l.folds}
}

// Summed makes Eval add the shards up the reduction tree itself, in
// dense vectors (reduce.DenseSum), and hand add the sums of the highest
// nodes it holds whole rather than a partial per shard, as a worker
// holding the shards does: the same additions in the same order, so the
// same bits. The shards must be the tree's, in order, and the dense
// vectors must take less memory than the Reducer's column maps and sums
// (DenseSum.Pays: wide data whose shards touch most columns); otherwise
// nothing changes. A worker keeps it off: it sums its shards itself,
// and sends its nodes' sums on.
func (l *Local) Summed() *Local {
	lists := make(map[int]cols.List, len(l.Shards))
	for i, s := range l.Shards {
		if s.ID != i {
			return l
		}
		lists[i] = s.Cols
	}
	if d := reduce.NewDenseSum(len(l.Shards), lists); d != nil && d.Pays() {
		d.Emit = func(_ reduce.NodeID, p *reduce.Partial) error { return l.emit(p) }
		d.Release = l.Release
		l.whole = d.Adder
	}
	return l
}

// Meta describes the shards; the descriptions share their column maps
// and labels.
func (l *Local) Meta() []shard.Meta {
	out := make([]shard.Meta, len(l.Shards))
	for i, s := range l.Shards {
		out[i] = shard.MetaOf(s)
	}
	return out
}

// scratches is a scratch memory for each of the goroutines, kept from
// pass to pass.
func (l *Local) scratches() []shard.Scratch {
	if len(l.scratch) < l.Parallel {
		l.scratch = make([]shard.Scratch, l.Parallel)
	}
	return l.scratch
}

func (l *Local) SetClasses(order []float64) error {
	for _, s := range l.Shards {
		s.SetClasses(order)
	}
	return nil
}

// Release hands a partial back for reuse once it has been added.
func (l *Local) Release(p *reduce.Partial) {
	l.pool.mu.Lock()
	l.pool.free = append(l.pool.free, p)
	l.pool.mu.Unlock()
}

// reuse is a released partial, or a new one.
func (l *Local) reuse() *reduce.Partial {
	pool := l.pool
	pool.mu.Lock()
	defer pool.mu.Unlock()
	n := len(pool.free)
	if n == 0 {
		return new(reduce.Partial)
	}
	p := pool.free[n-1]
	pool.free[n-1] = nil
	pool.free = pool.free[:n-1]
	return p
}

func (l *Local) Eval(op osgm.Op, p, v *shard.Point, add func(*reduce.Partial) error) error {
	if err := l.check(p); err != nil {
		return err
	}
	if len(l.acts) != len(l.Shards) {
		l.acts = make([]shard.Activity, len(l.Shards))
	}
	if l.whole != nil {
		add = l.sumWhole(add)
	}
	var (
		mu  sync.Mutex
		err error
	)
	l.eachShard(func(i int, sc *shard.Scratch) {
		part := l.evalShard(op, i, p, v, sc)
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			err = add(part)
		}
	})
	return err
}

// check refuses a point whose folds or live columns are not the shards'.
func (l *Local) check(p *shard.Point) error {
	if err := checkFolds(l.Shards, p); err != nil {
		return err
	}
	return shard.CheckLive(l.Shards, p.Live)
}

// eachShard calls do for every shard, Parallel at once, each goroutine
// with its own scratch; with one (a fork's, or one core's) there is no
// goroutine a pass.
func (l *Local) eachShard(do func(i int, sc *shard.Scratch)) {
	scratch := l.scratches()
	if l.Parallel == 1 {
		for i := range l.Shards {
			do(i, &scratch[0])
		}
		return
	}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for w := 0; w < l.Parallel; w++ {
		wg.Add(1)
		go func(sc *shard.Scratch) {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(l.Shards) {
					return
				}
				do(i, sc)
			}
		}(&scratch[w])
	}
	wg.Wait()
}

// sumWhole is add behind the dense sums: shard partials go into them,
// and add gets the nodes' sums as they complete.
func (l *Local) sumWhole(add func(*reduce.Partial) error) func(*reduce.Partial) error {
	l.whole.Reset()
	l.emit = add
	return func(p *reduce.Partial) error {
		held, _, err := l.whole.Add(p, len(p.Loss), len(p.Hess))
		if err == nil && !held {
			return add(p)
		}
		return err
	}
}

// evalShard is shard i's partial of op at p (and v).
func (l *Local) evalShard(op osgm.Op, i int, p, v *shard.Point, sc *shard.Scratch) *reduce.Partial {
	part := l.reuse()
	l.Shards[i].Pass(passKind(op), p, v, sc, &l.acts[i], part)
	return part
}

// passKind is the shard pass that computes op.
func passKind(op osgm.Op) shard.PassKind {
	switch op {
	case osgm.OpEval:
		return shard.PassEval
	case osgm.OpHessVec:
		return shard.PassHessVec
	case osgm.OpEvalDiag:
		return shard.PassEvalDiag
	case osgm.OpEvalHess:
		return shard.PassEvalHess
	}
	panic(fmt.Sprintf("objective: no shard pass computes op %d", op))
}

// Fork is a backend over the same shards for another goroutine, which
// evaluates them one after the other: forks evaluate side by side, each
// with its own scratch memory and activity caches, and only read the
// shards. live is the coordinates the fork's points carry, readied here,
// before any fork runs, as Eval would at its first pass.
func (l *Local) Fork(live *cols.LiveMap) (Backend, error) {
	if err := shard.CheckLive(l.Shards, live); err != nil {
		return nil, err
	}
	f := &Local{Shards: l.Shards, Parallel: 1, folds: l.folds, pool: &partials{}}
	if l.whole != nil {
		f.Summed()
	}
	return f, nil
}

// SetFolds numbers every row's fold over the shards in order, as if the
// rows were one file.
func (l *Local) SetFolds(n int) error {
	if n == l.folds {
		return nil // numbered already (a C search sets them once per C)
	}
	m := 0
	for _, s := range l.Shards {
		m += s.Rows()
	}
	fold, err := Folds(m, n)
	if err != nil {
		return err
	}
	for _, s := range l.Shards {
		if err := s.SetFolds(fold[:s.Rows():s.Rows()]); err != nil {
			return err
		}
		fold = fold[s.Rows():]
	}
	l.folds = n
	return nil
}

func (l *Local) Tally(p *shard.Point) (shard.Tally, error) {
	if err := l.check(p); err != nil {
		return shard.Tally{}, err
	}
	tallies := make([]shard.Tally, len(l.Shards))
	l.eachShard(func(i int, sc *shard.Scratch) { tallies[i] = l.Shards[i].Tally(p, sc) })
	var t shard.Tally
	for _, s := range tallies {
		t.Add(s)
	}
	return t, nil
}
