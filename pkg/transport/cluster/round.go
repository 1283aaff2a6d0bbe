package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/logging"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// ErrNoWorkers is a round's error after NoWorkerTimeout without one.
var ErrNoWorkers = errors.New("no live worker")

// maxResends bounds the broadcasts of one round that bring nothing back
// while workers are alive.
const maxResends = 20

// onUp handles one result; add receives partials of the current round.
func (c *clusterCore) onUp(m upMsg, add func(*reduce.Partial) error) error {
	// The payload goes back to the Assembler now, unless a partial's
	// vectors view it: then when the next round starts.
	viewed := false
	defer func() {
		if viewed {
			c.viewed = append(c.viewed, m.payload)
		} else {
			c.io.recycle(m.payload)
		}
	}()
	switch m.kind {
	case wire.KindError:
		var le wire.LoadError
		json.Unmarshal(m.payload, &le)
		// The file, line and problem first: they are what a user fixes.
		return fmt.Errorf("%s (read by worker %s)", le.Err, le.Worker)
	case wire.KindMeta:
		worker, meta, err := wire.DecodeMeta(m.shard, m.payload)
		if err != nil {
			c.bad.Add(err, m.kind)
			return nil
		}
		if c.owner[m.shard] != worker && c.incoming[m.shard] != worker {
			c.bad.Add(errors.New("description of a shard from a worker that was not given it"), m.kind)
			return nil
		}
		if c.haveMet[m.shard] {
			if !sameMeta(&c.metas[m.shard], meta) {
				return fmt.Errorf("shard %d reloaded by %s differs from before: did %s change during training?",
					m.shard, worker, c.cfg.Source.Path)
			}
			return nil
		}
		c.metas[m.shard], c.haveMet[m.shard] = *meta, true
		delete(c.asked, workerShard{worker, m.shard})
	case wire.KindPartial, wire.KindGroup, wire.KindRelayNode:
		if m.round != c.round || add == nil {
			if m.round < c.round {
				c.bad.LateResult(m.kind)
			}
			return nil
		}
		p, err := c.decodeResult(m)
		if err != nil {
			c.bad.Add(err, m.kind)
			return nil
		}
		viewed = true
		return add(p)
	}
	return nil
}

// decodeResult decodes a shard's partial, a node's sum or the root as
// the workers added it, into memory kept from round to round.
func (c *clusterCore) decodeResult(m upMsg) (*reduce.Partial, error) {
	id := m.shard
	var node reduce.NodeID
	if m.kind != wire.KindPartial {
		node, _ = reduce.NodeFromWire(uint32(m.shard), len(c.owner)) // checked on arrival
		id = node.Index
	}
	var into *decodedPartial
	if n := len(c.reuse); n > 0 {
		into, c.reuse = c.reuse[n-1], c.reuse[:n-1]
	} else {
		into = new(decodedPartial)
	}
	c.decoded = append(c.decoded, into)
	var p *reduce.Partial
	var err error
	hops := 0
	if m.kind == wire.KindRelayNode {
		hops, p, err = wire.DecodeRelay(id, m.payload, &into.Partial, &into.grad)
	} else {
		p, err = wire.DecodePartialInto(id, m.payload, &into.Partial, &into.grad)
	}
	if err != nil {
		return nil, err
	}
	p.Group, p.Level, p.Dense = m.kind != wire.KindPartial, node.Level, m.kind == wire.KindRelayNode
	c.stats.count(func(s *Stats) {
		s.ResultsUp++
		if p.Dense {
			s.TreeRounds++
			s.Hops = hops
		}
	})
	return p, nil
}

func sameMeta(a, b *shard.Meta) bool {
	return a.Rows == b.Rows && a.NNZ == b.NNZ && a.NormSq == b.NormSq && a.MaxNormSq == b.MaxNormSq && a.MaxIndex == b.MaxIndex &&
		a.Cols.Equal(b.Cols) && slices.Equal(a.Labels, b.Labels)
}

// setFolds makes every later point carry what workers need to number
// their rows' folds themselves: the fold count, the rows and where each
// shard's rows start.
func (c *clusterCore) setFolds(n int) error {
	if _, err := objective.Folds(2, n); err != nil { // the count's bounds
		return err
	}
	c.folds = uint32(n)
	c.starts = make([]uint64, len(c.metas))
	c.rows = 0
	for i, m := range c.metas {
		c.starts[i] = c.rows
		c.rows += uint64(m.Rows)
	}
	return nil
}

// point is the wire form of a request at p.
func (c *clusterCore) point(op wire.Op, p *shard.Point) (*wire.Point, error) {
	if p.Holdout > 0 && c.folds == 0 {
		return nil, errors.New("a fold is held out but SetFolds was not called")
	}
	// The vectors already hold the bias weight last, as workers expect.
	pt := &wire.Point{Op: op, Terms: p.Terms, Labels: c.order, Stamp: p.Stamp, X: p.W}
	for _, k := range p.Classes {
		pt.Classes = append(pt.Classes, uint32(k))
	}
	if p.Live != nil {
		pt.Live, pt.Full = p.Live.Bits, uint32(p.Live.Full)
	}
	if c.folds > 0 {
		pt.Folds, pt.Rows, pt.Starts = c.folds, c.rows, c.starts
	}
	return pt, nil
}

// withoutX makes a Hessian-vector point at the last round's x go without
// it: only while every worker holds that point in the layout this one
// goes out in.
func (c *clusterCore) withoutX(pt *wire.Point) {
	if pt.Stamp != 0 && pt.Stamp == c.lastStamp && slices.Equal(c.live(), c.lastLive) && c.layoutFor(pt) == c.lastLayout {
		pt.Op = wire.OpHessVecAt
		c.stats.count(func(s *Stats) { s.WithoutX++ })
	}
}

// startRound begins the next round: shards of lost workers move, the
// memory of the last round's results is free again, and the point goes
// out.
func (c *clusterCore) startRound(pt *wire.Point, add func(*reduce.Partial) error) (*roundState, error) {
	c.checkWorkers(true)
	c.round++
	c.reuse, c.decoded = append(c.reuse, c.decoded...), c.decoded[:0]
	for _, b := range c.viewed {
		c.io.recycle(b)
	}
	clear(c.viewed)
	c.viewed = c.viewed[:0]
	r := &roundState{c: c, pt: pt, add: add, layout: c.layoutFor(pt), got: make([]bool, len(c.owner)), left: len(c.owner)}
	r.plan(pt)
	r.payload = wire.PointPieces(c.pointBuf, pt)
	c.pointBuf = r.payload[0]
	c.lastStamp, c.lastLive, c.lastLayout = pt.Stamp, c.live(), r.layout
	c.resendAt = time.Time{}
	if r.layout != nil {
		if err := c.sendOwn(r.layout, pt); err != nil {
			return nil, err
		}
	} else if err := c.broadcast(r.payload, r.version); err != nil {
		return nil, err
	}
	r.began = c.now()
	r.lastProgress = r.began
	c.phase, c.current = inRound, r
	return r, nil
}

// done reports whether every shard's result is in.
func (r *roundState) done() bool { return r.left == 0 }

// finish records a complete round's time and counts.
func (r *roundState) finish() {
	c := r.c
	c.took[c.tookPos%len(c.took)] = c.now().Sub(r.began)
	c.tookPos++
	c.stats.count(func(s *Stats) {
		s.Rounds++
		s.Compute += time.Duration(r.compute * float64(time.Second))
	})
}

// onHeartbeat takes a worker's heartbeat during the round: a shard it now
// holds may change hands.
func (r *roundState) onHeartbeat(hb wire.Heartbeat) error {
	r.c.onHeartbeat(hb)
	return r.wholeIfMoved()
}

// onGone takes the server's word that a worker's subject is not held.
func (r *roundState) onGone(id string) error {
	if r.c.onGone(id) {
		r.lastProgress = r.c.now() // its shards are loading elsewhere
	}
	return r.wholeIfMoved()
}

// accept takes a shard's partial or a node's sum, unless a resend or a
// moved shard brought it already.
func (r *roundState) accept(part *reduce.Partial) error {
	r.compute = max(r.compute, part.Seconds)
	first, end := part.Shard, part.Shard+1
	if part.Group {
		first, end = reduce.NodeID{Level: part.Level, Index: part.Shard}.Shards(len(r.got))
	}
	fresh := false
	for s := first; s < end; s++ {
		if !r.got[s] {
			r.got[s], fresh = true, true
			r.left--
		}
	}
	if !fresh {
		return nil
	}
	return r.add(part)
}

// again broadcasts the round whole, for every worker.
func (r *roundState) again() error {
	c := r.c
	c.stats.count(func(s *Stats) { s.Resends++ })
	if r.layout != nil {
		// After own points some workers hold this round in their own
		// layout and some in the whole one: the next point goes with x.
		c.lastStamp = 0
	}
	r.layout, c.lastLayout = nil, nil
	changed := r.tree != nil || r.pt.Op == wire.OpHessVecAt
	if r.tree != nil {
		// A worker on the way up may be gone or hung: every worker now
		// sends its own sums here.
		r.tree, r.pt.Relays, r.pt.Owners = nil, nil, nil
	}
	if r.pt.Op == wire.OpHessVecAt {
		// Some worker may not hold x: send it again too.
		r.pt.Op = wire.OpHessVec
	}
	if changed {
		r.repack()
	}
	err := c.broadcast(r.payload, r.version)
	r.lastProgress = c.now()
	return err
}

// wholeIfMoved broadcasts the round whole once shards change hands in a
// round of own points, which were made for the owners it started with: a
// shard's new owner may hold no point of this round (it held no shard
// when the round went out) or one without the shard's columns.
//
// A round whose tree the workers add goes out again for the same reason:
// sums on their way to a worker that lost its shards may never go on.
func (r *roundState) wholeIfMoved() error {
	switch {
	case r.layout != nil && !slices.Equal(r.c.layoutOf, r.c.owner):
		r.c.log.Info("broadcasting the point whole", logging.Event("resent"), zap.Uint64("round", r.c.round), zap.String("why", "shards changed hands"))
	case r.tree != nil && !slices.Equal(r.tree, r.c.owner):
		r.c.log.Info("broadcasting the point again, sums to come here", logging.Event("resent"), zap.Uint64("round", r.c.round), zap.String("why", "shards changed hands"))
	default:
		return nil
	}
	return r.again()
}

func (r *roundState) onUp(m upMsg) error {
	c := r.c
	if m.kind == wire.KindNeedX {
		// A worker without x, or whose own point lacks the columns of
		// shards it has loaded since: the whole point serves it.
		if m.round == c.round && (r.pt.Op == wire.OpHessVecAt || r.layout != nil) {
			why := "a worker lacks x"
			if r.pt.Op != wire.OpHessVecAt {
				why = "a worker's own point lacks columns of its shards"
			}
			c.log.Info("broadcasting the point whole", logging.Event("resent"), zap.Uint64("round", c.round), zap.String("why", why), zap.String("worker", string(m.payload)))
			if err := r.again(); err != nil {
				return err
			}
		}
		c.io.recycle(m.payload)
		return nil
	}
	before := r.left
	if err := c.onUp(m, r.accept); err != nil {
		return err
	}
	if r.left < before {
		r.lastProgress, r.resends = c.now(), 0
	}
	return nil
}

// onTick checks the workers, the connection and the round's progress:
// shards of lost workers move, a round cut off from NATS goes out again
// once back, and a round that stops coming back goes out again, loses
// its stuck workers, or fails.
func (r *roundState) onTick() error {
	c := r.c
	owners := slices.Clone(c.owner)
	c.checkWorkers(false)
	switch {
	case len(c.live()) > 0 && c.io.connected():
		r.alone = time.Time{}
	case r.alone.IsZero():
		r.alone = c.now()
	case c.cfg.NoWorkerTimeout > 0 && c.now().Sub(r.alone) > c.cfg.NoWorkerTimeout:
		return fmt.Errorf("round %d: %w for %v", c.round, ErrNoWorkers, c.cfg.NoWorkerTimeout)
	}
	if !slices.Equal(owners, c.owner) {
		r.lastProgress = c.now() // moved shards are loading
	}
	if err := r.wholeIfMoved(); err != nil {
		return err
	}
	var owing []string
	for s, ok := range r.got {
		if !ok {
			owing = append(owing, c.owner[s])
		}
	}
	c.probe(owing)
	if !c.io.connected() {
		// Nothing can be heard or sent; reconnecting sends the round
		// again, and only then does silence count.
		r.lastProgress = c.now()
		return nil
	}
	if c.due(c.now()) {
		// Broadcasts that went out on a link found dead since were not
		// heard: workers' silence counts from this one.
		c.log.Info("back on NATS after an outage: broadcasting the point again", logging.Event("resent"), zap.Uint64("round", c.round))
		r.resends = 0
		return r.again()
	}
	if !c.resendAt.IsZero() || c.now().Sub(r.lastProgress) <= r.resendAfter() {
		return nil // a reconnection's broadcast is coming, or it is not yet time
	}
	r.resends++
	if r.resends >= stuckResends && c.unstick(r.got, c.now().Sub(r.began), r.lastProgress) {
		r.lastProgress, r.resends = c.now(), 0
		return nil
	}
	if r.resends > maxResends && len(c.live()) > 0 {
		// Workers are alive but nothing comes back: they are refusing
		// the point. Waiting longer will not help.
		return fmt.Errorf("round %d: no results after %d broadcasts to %d live workers (see their logs)",
			c.round, r.resends, len(c.live()))
	}
	var missing []int
	for s, ok := range r.got {
		if !ok {
			missing = append(missing, s)
		}
	}
	c.log.Warn("round waiting on shards; broadcasting the point again", logging.Event("resent"),
		zap.Uint64("round", c.round), zap.Ints("shards", missing))
	return r.again()
}

// A worker is stuck when it heartbeats (since the last broadcast, sent),
// holds its subject and the shards it owes, and yet sends nothing for a
// round that has gone out stuckResends times since the last reconnection
// and taken stuckFactor times the longest of the last rounds: a hung
// evaluation. Waiting would fail the round after
// maxResends. One still loading a shard it owes (moved to it from a lost
// worker) is not stuck: large shards take seconds to read.
const (
	stuckResends = 3
	stuckFactor  = 10
)

// unstick moves the shards of the round's missing results away from
// their owners if they are stuck and another worker is live, and reports
// whether it did. A stuck worker is lost for the rest of the job (its
// heartbeats no longer revive it) and is told to let go of its shards. A
// round that has no history to compare with, or that every live worker
// owes, is left to its resends: that is a slow round, or a point every
// worker refuses.
func (c *clusterCore) unstick(got []bool, waited time.Duration, sent time.Time) bool {
	longest := slices.Max(c.took[:])
	if longest == 0 || waited < stuckFactor*longest {
		return false
	}
	// Only a heartbeat heard since the last broadcast says a worker is
	// alive and silent: when this coordinator's own link is cut and it
	// does not know it yet, every worker is silent, and none is stuck.
	var owing []string
	for s, ok := range got {
		if p := c.workers[c.owner[s]]; !ok && p != nil && !p.dead && inSorted(p.held, s) && p.lastSeen.After(sent) {
			owing = append(owing, p.id)
		}
	}
	slices.Sort(owing)
	owing = slices.Compact(owing)
	if len(owing) == 0 || len(owing) == len(c.live()) {
		return false
	}
	for _, id := range owing {
		c.takeStuck(id, "it heartbeats but sends no results",
			zap.Uint64("round", c.round), zap.Duration("waited", waited), zap.Duration("longest recent round", longest))
	}
	c.balance(false)
	return true
}

// repack lays out the round's point again, changed: a new version, whose
// chunks a worker must not put together with the last one's.
func (r *roundState) repack() {
	r.payload = wire.PointPieces(r.c.pointBuf, r.pt)
	r.c.pointBuf = r.payload[0]
	r.version++
}

// broadcast sends version of the round's point to every worker.
func (c *clusterCore) broadcast(payload [][]byte, version uint32) error {
	return c.publishPoint(wire.DownSubject(c.cfg.Job), payload, version, len(c.live()))
}

// plan has the workers add this round's tree among themselves when they
// can: the point is a broadcast of an evaluation (a tally's counts are
// added here, in any order) and every shard has an owner. The point names
// each shard's owner; a node's adder is its first shard's. The bits are
// the same either way (reduce.Relay).
func (r *roundState) plan(pt *wire.Point) {
	c := r.c
	pt.Relays, pt.Owners = nil, nil
	if r.layout != nil || pt.Op == wire.OpCorrect || len(c.owner) == 0 || !c.treePays(pt.Dim()) {
		return
	}
	index := map[string]uint32{}
	owners := make([]uint32, len(c.owner))
	for s, id := range c.owner {
		if p := c.workers[id]; p == nil || p.dead {
			return
		}
		i, ok := index[id]
		if !ok {
			i = uint32(len(pt.Relays))
			index[id] = i
			pt.Relays = append(pt.Relays, id)
		}
		owners[s] = i
	}
	pt.Owners = owners
	r.tree = slices.Clone(c.owner)
}

// resendAfter is how long the round may bring nothing back before it
// goes out again. Along the workers' tree nothing comes before the root
// does, so such a round waits ResendAfter beyond twice the longest recent
// round (at most ten ResendAfters), and the job's first, with no history
// and workers warming up, three ResendAfters.
func (r *roundState) resendAfter() time.Duration {
	wait := r.c.cfg.ResendAfter
	if r.tree == nil {
		return wait
	}
	longest := slices.Max(r.c.took[:])
	if longest == 0 {
		return 3 * wait
	}
	return min(wait+2*longest, 10*wait)
}
