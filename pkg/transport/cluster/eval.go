package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// wireOps are the evaluations' bytes on the wire; OpEval's is the rest's.
var wireOps = map[osgm.Op]wire.Op{osgm.OpHessVec: wire.OpHessVec, osgm.OpEvalDiag: wire.OpEvalDiag, osgm.OpEvalHess: wire.OpEvalHess}

// wireOpOf is an evaluation's byte on the wire.
func wireOpOf(op osgm.Op) wire.Op {
	if w, ok := wireOps[op]; ok {
		return w
	}
	return wire.OpEval
}

// Eval runs one round: broadcast the point, gather every shard's partial.
func (c *Cluster) Eval(op osgm.Op, p, v *shard.Point, add func(*reduce.Partial) error) error {
	pt, err := c.core.point(wireOpOf(op), p)
	if err != nil {
		return err
	}
	if op == osgm.OpHessVec {
		pt.V = v.W
		c.core.withoutX(pt)
	}
	return c.round1(pt, add)
}

// Tally counts rows and correct predictions on the workers: each shard's
// partial carries rows per class in Loss and correct ones in BiasGrad.
func (c *Cluster) Tally(p *shard.Point) (shard.Tally, error) {
	pt, err := c.core.point(wire.OpCorrect, p)
	if err != nil {
		return shard.Tally{}, err
	}
	if p.Loss.Regression() {
		return c.regressionTally(pt)
	}
	t := shard.Tally{Rows: make([]int, len(c.core.order)), Correct: make([]int, len(c.core.order))}
	err = c.round1(pt, func(part *reduce.Partial) error {
		if len(part.Loss) != len(c.core.order) {
			return fmt.Errorf("shard %d: tally of %d classes, want %d", part.Shard, len(part.Loss), len(c.core.order))
		}
		for k := range part.Loss {
			t.Rows[k] += int(part.Loss[k])
			t.Correct[k] += int(part.BiasGrad[k])
		}
		return nil
	})
	return t, err
}

// regressionTally is Tally for a regression: each shard's partial
// carries its rows and then its sums in Loss.
func (c *Cluster) regressionTally(pt *wire.Point) (shard.Tally, error) {
	t := shard.Tally{Rows: []int{0}, Correct: []int{0}, Sums: make([]float64, shard.TallySums)}
	err := c.round1(pt, func(part *reduce.Partial) error {
		if len(part.Loss) != 1+shard.TallySums {
			return fmt.Errorf("shard %d: a regression's tally of %d numbers, want %d", part.Shard, len(part.Loss), 1+shard.TallySums)
		}
		t.Rows[0] += int(part.Loss[0])
		for k, v := range part.Loss[1:] {
			t.Sums[k] += v
		}
		return nil
	})
	return t, err
}

// moveWait bounds how long a round waits for the connection a move
// between rounds makes; past it, the round goes out on whatever
// connection there is, and a reconnection then resends it as usual.
const moveWait = 5 * time.Second

// round1 runs a round: it sends the point (a broadcast or own points)
// and steps the core until every shard's result is in, or the round
// fails.
func (c *Cluster) round1(pt *wire.Point, add func(*reduce.Partial) error) error {
	if move := c.core.cfg.BetweenRounds; move != nil && move() {
		select {
		case <-c.reconnected:
			c.core.sawReconnect()
		case <-time.After(moveWait):
		}
	}
	// This broadcast reaches whoever is connected now: reconnections
	// before it need no other.
	select {
	case <-c.reconnected:
		c.core.sawReconnect()
	default:
	}
	r, err := c.core.startRound(pt, add)
	if err != nil {
		return err
	}
	defer c.core.endRound()
	if err := c.until(context.Background(), r.done, c.core.cfg.Stop); err != nil {
		return err
	}
	r.finish()
	return nil
}
