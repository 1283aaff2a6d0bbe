package cluster

import (
	"errors"
	"math/bits"
	"slices"

	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/cols"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// A broadcast point reaches every worker whole: the server sends W copies
// of what the coordinator sent once. On text-like data a worker's shards
// touch only part of the columns, and a smaller part the more workers
// share the data (README, BENCHMARKS.md). A worker can instead be
// sent its own point, on its own subject, with the values of those
// columns alone, in the layout that leaves out dead features (Point.Live,
// a bitmap over every coordinate): the server then takes in and sends on
// the sum of the workers' fractions of a point where a broadcast makes it
// take in one point and send W. Workers evaluate own points as any other: a shard
// reads the same values at the same columns, so no bit of the result
// changes.
//
// Own points cost the coordinator a gather per worker and a message per
// worker instead of one, so they go out only when the workers' fractions
// add up to at most half their number (W/2 points instead of W). A round that goes out again (a
// resend, a reconnection, a worker that asks, shards that change hands)
// is broadcast whole: it serves every worker, whatever it holds by then.

// layoutFor is the layout of pt's round, worked out again when the
// shards' owners or the point's coordinates change.
func (c *clusterCore) layoutFor(pt *wire.Point) *pointLayout {
	switch {
	case c.cfg.Points == PointsBroadcast || pt.Op == wire.OpEvalHess:
		return nil // a Hessian over the point's dimension needs all of it
	case c.cfg.Points == PointsAuto && c.treePays(pt.Dim()):
		// The tree's sums are laid out over the broadcast's coordinates,
		// and a broadcast leaves the coordinator once, where own points
		// leave it once per worker.
		return nil
	}
	full, dim := fullOf(pt), pt.Dim()
	if c.layoutOf == nil || !slices.Equal(c.layoutOf, c.owner) || c.layoutFull != full || c.layoutDim != dim {
		c.layout = c.newLayout(pt, full, dim)
		c.layoutOf, c.layoutFull, c.layoutDim = slices.Clone(c.owner), full, dim
	}
	return c.layout
}

// newLayout works out each owner's coordinates, or returns nil when a
// broadcast serves better or some owner does not take own points.
func (c *clusterCore) newLayout(pt *wire.Point, full, dim int) *pointLayout {
	held := map[string][]int{}
	for s, id := range c.owner {
		if id == "" || !c.haveMet[s] {
			return nil // its columns are not known yet
		}
		held[id] = append(held[id], s)
	}
	ids := make([]string, 0, len(held))
	for id := range held {
		p := c.workers[id]
		if p == nil || !p.ownPoints {
			return nil
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	l := &pointLayout{}
	// A point that leaves out dead features carries coordinate j at its
	// rank among the live ones.
	var live *cols.LiveMap
	if len(pt.Live) > 0 {
		var err error
		if live, err = cols.NewLiveMap(pt.Live, full); err != nil {
			return nil
		}
	}
	carried := 0
	for _, id := range ids {
		o := &ownPoint{worker: id, bits: make([]uint64, (full+63)/64)}
		for _, s := range held[id] {
			for j := range c.metas[s].Cols.All() {
				o.bits[j/64] |= 1 << (j % 64)
			}
		}
		if pt.Bias >= 0 {
			o.bits[(full-1)/64] |= 1 << ((full - 1) % 64)
		}
		for i, w := range o.bits {
			for ; w != 0; w &= w - 1 {
				j := uint32(64*i + bits.TrailingZeros64(w))
				if live != nil {
					r, ok := live.Rank(j)
					if !ok { // a coordinate the point does not carry
						o.bits[i] &^= 1 << (j % 64)
						continue
					}
					j = r
				}
				o.pos = append(o.pos, int32(j))
			}
		}
		carried += len(o.pos)
		l.own = append(l.own, o)
	}
	if c.cfg.Points == PointsAuto && 2*carried > len(ids)*dim {
		return nil
	}
	return l
}

// point is pt restricted to the worker's coordinates, gathered into its
// memory.
func (o *ownPoint) point(pt *wire.Point) *wire.Point {
	gather := func(dst *[][]float64, src [][]float64) [][]float64 {
		if len(*dst) != len(src) {
			*dst = make([][]float64, len(src))
		}
		for k, x := range src {
			g := slices.Grow((*dst)[k][:0], len(o.pos))[:len(o.pos)]
			for i, j := range o.pos {
				g[i] = x[j]
			}
			(*dst)[k] = g
		}
		return *dst
	}
	own := *pt
	own.Full, own.Live = uint32(fullOf(pt)), o.bits
	own.X, own.V = nil, nil
	if pt.Op != wire.OpHessVecAt {
		own.X = gather(&o.x, pt.X)
	}
	if pt.Op == wire.OpHessVec || pt.Op == wire.OpHessVecAt {
		own.V = gather(&o.v, pt.V)
	}
	return &own
}

// fullOf is the length of pt's vectors with every coordinate.
func fullOf(pt *wire.Point) int {
	if pt.Full != 0 {
		return int(pt.Full)
	}
	return pt.Dim()
}

// sendOwn publishes each worker's own point of the round.
func (c *clusterCore) sendOwn(l *pointLayout, pt *wire.Point) error {
	for _, o := range l.own {
		own := o.point(pt)
		pieces := wire.PointPieces(o.head, own)
		o.head = pieces[0]
		if err := c.publishPoint(wire.WorkerSubject(o.worker), pieces, 0, 1); err != nil {
			return err
		}
	}
	return nil
}

// publishPoint sends a point's payload on subj, which reaches copies
// workers.
func (c *clusterCore) publishPoint(subj string, payload [][]byte, version uint32, copies int) error {
	sent, err := c.io.sendPoint(subj, c.round, version, payload)
	c.stats.count(func(s *Stats) {
		s.BytesDown += sent
		s.BytesToWorkers += sent * int64(copies)
	})
	if errors.Is(err, errPointBuffered) {
		// Cut off from NATS, with its buffer full: the point goes out
		// again once reconnected, so the round need not fail.
		c.log.Warn("NATS unreachable: the point will go out on reconnection", zap.Uint64("round", c.round))
		return nil
	}
	return err
}
