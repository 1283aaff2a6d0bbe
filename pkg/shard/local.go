package shard

import (
	"sync"
	"sync/atomic"
)

// Local is a Backend over shards held in this process, evaluated by a
// fixed number of goroutines.
type Local struct {
	Shards   []*Shard
	Parallel int

	scratch []Scratch
	free    sync.Pool
	colSq   []float64
}

// NewLocal evaluates shards with parallel goroutines.
func NewLocal(shards []*Shard, parallel int) *Local {
	return &Local{Shards: shards, Parallel: max(parallel, 1)}
}

func (l *Local) Meta() []Meta {
	out := make([]Meta, len(l.Shards))
	for i, s := range l.Shards {
		out[i] = MetaOf(s)
	}
	return out
}

func (l *Local) SetClasses(order []float64) error {
	for _, s := range l.Shards {
		s.SetClasses(order)
	}
	return nil
}

// Release hands a partial back for reuse once it has been added.
func (l *Local) Release(p *Partial) { l.free.Put(p) }

func (l *Local) Eval(op Op, p, v *Point, add func(*Partial) error) error {
	if len(l.scratch) < l.Parallel {
		l.scratch = make([]Scratch, l.Parallel)
	}
	var (
		next atomic.Int64
		mu   sync.Mutex
		err  error
		wg   sync.WaitGroup
	)
	for w := 0; w < l.Parallel; w++ {
		wg.Add(1)
		go func(sc *Scratch) {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(l.Shards) {
					return
				}
				part, _ := l.free.Get().(*Partial)
				if part == nil {
					part = new(Partial)
				}
				if op == OpEval {
					l.Shards[i].Eval(p, sc, part)
				} else {
					l.Shards[i].HessVec(p, v, sc, part)
				}
				mu.Lock()
				if err == nil {
					err = add(part)
				}
				mu.Unlock()
			}
		}(&l.scratch[w])
	}
	wg.Wait()
	return err
}

func (l *Local) Correct(p *Point) (int, error) {
	var total atomic.Int64
	var wg sync.WaitGroup
	var next atomic.Int64
	for w := 0; w < l.Parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(l.Shards) {
					return
				}
				total.Add(int64(l.Shards[i].Predictions(p)))
			}
		}()
	}
	wg.Wait()
	return int(total.Load()), nil
}

// ColumnSquares sums the shards' column squares once, then frees the
// per-shard copies.
func (l *Local) ColumnSquares() []float64 {
	if l.colSq == nil {
		l.colSq = ColumnSquares(l.Meta())
		for _, s := range l.Shards {
			s.ColSq = nil
		}
	}
	return l.colSq
}
