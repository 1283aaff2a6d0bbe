// The pass clock: the pass at 0 and the time the passes take.

package train

import (
	"sync/atomic"
	"time"

	"github.com/osgm-svm/osgm/internal/vec"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
)

// zeroPass makes the pass at 0 that the stopping test needs, over some
// problems or all. It brings the Hessian's diagonal too (diag), for
// methods that start from it: every row is active at 0, so it is the
// data's column squares (with class weights), reduced as gradients are,
// the same bits on any backend. Problems in batches make it a batch at a
// time, so that its vectors are a batch's too.
type zeroPass struct {
	obj           osgm.Objective // for the pass over every problem
	K, n          int
	diag          bool
	warm          bool // the methods start elsewhere: the values at 0 are not theirs
	stop          *stopping
	start         time.Time
	firstGradient time.Duration // since start, at the first pass
}

// run is the pass over problems ks (nil: all) on obj; problems side by
// side make theirs at once, on forks.
func (z *zeroPass) run(obj osgm.Objective, ks []int) (st osgm.Start, err error) {
	m := len(ks)
	if ks == nil {
		m = z.K
	}
	x, f, g := vectors(m, z.n), make([]float64, m), vectors(m, z.n)
	b := &osgm.Pass{Op: osgm.OpEval, Ks: ks, X: x, F: f, G: g}
	if z.diag {
		st.Diag = vectors(m, z.n)
		b.Op, b.D = osgm.OpEvalDiag, st.Diag
	}
	if err = obj.Evaluate(b); err != nil {
		return st, err
	}
	z.stop.mu.Lock()
	defer z.stop.mu.Unlock()
	if z.firstGradient == 0 {
		z.firstGradient = time.Since(z.start)
	}
	st.GradTol = make([]float64, m)
	for i := range g {
		k := i
		if ks != nil {
			k = ks[i]
		}
		z.stop.g0norm[k] = vec.Norm(g[i])
		z.stop.set(k)
		st.GradTol[i] = z.stop.tol[k]
	}
	if !z.warm { // 0 is where the methods start
		st.F0, st.G0 = f, g
	}
	return st, nil
}

// timedObjective measures the time spent in passes over the data (on
// workers and on the bus), as opposed to the method's own arithmetic.
// Its forks add theirs to the same clock.
type timedObjective struct {
	obj   *objective.Objective
	clock *passClock
	fork  bool
}

// passClock is the time in passes of the objective, and of its forks,
// which make passes at once.
type passClock struct {
	main, side, forks atomic.Int64
}

// sideWall is the time of the forks' passes, those made at once counted
// once.
func (c *passClock) sideWall() time.Duration {
	return time.Duration(c.side.Load() / max(c.forks.Load(), 1))
}

func newTimed(obj *objective.Objective) *timedObjective {
	return &timedObjective{obj: obj, clock: &passClock{}}
}

func (t *timedObjective) Ops() osgm.Op { return t.obj.Ops() }

func (t *timedObjective) Evaluate(b *osgm.Pass) error {
	start := time.Now()
	defer func() {
		if t.fork {
			t.clock.side.Add(int64(time.Since(start)))
		} else {
			t.clock.main.Add(int64(time.Since(start)))
		}
	}()
	return t.obj.Evaluate(b)
}

// Place places problem k where the objective's backend can, its time
// counted as the forks' passes: the whole problem is one.
func (t *timedObjective) Place(k int, x0 []float64, p osgm.Problem, s osgm.Settings, h osgm.Hooks) (*osgm.Result, bool, error) {
	start := time.Now()
	defer func() { t.clock.side.Add(int64(time.Since(start))) }()
	return t.obj.Place(k, x0, p, s, h)
}

func (t *timedObjective) Fork() osgm.Objective {
	f := t.obj.Forked()
	if f == nil {
		return nil
	}
	t.clock.forks.Add(1)
	return &timedObjective{obj: f, clock: t.clock, fork: true}
}
