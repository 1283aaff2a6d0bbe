package cluster

import (
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/logging"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// The core's members: heartbeats and probes say who is alive, and
// balance decides who answers for which shard; the members' own methods
// (target, assigned, load, live) only read that state.

func (c *clusterCore) onHeartbeat(hb wire.Heartbeat) {
	defer c.publishView()
	p := c.workers[hb.ID]
	if hb.Leaving {
		// Its shards move at the next check (checkWorkers).
		if p != nil && !p.dead {
			p.dead, p.left = true, true
			c.log.Info("worker left", logging.Event("left"), zap.String("worker", hb.ID))
		}
		return
	}
	if p == nil {
		p = &peer{id: hb.ID, name: hb.Name, reconnects: hb.Reconnects}
		c.workers[hb.ID] = p
		c.log.Info("worker joined", logging.Event("joined"), zap.String("worker", hb.ID))
	}
	if p.stuck {
		return // alive, but not to be given shards again in this job
	}
	if p.dead {
		// Back after an outage: it counts again and gets shards at the
		// next round boundary.
		p.dead, p.left = false, false
		c.log.Info("worker back", logging.Event("joined"), zap.String("worker", hb.ID))
	}
	p.lastSeen, p.noSub = c.now(), time.Time{}
	hb.Held, hb.Loading = sortedIDs(hb.Held), sortedIDs(hb.Loading)
	if len(hb.Loading) == 0 || hb.Read != p.read || !slices.Equal(hb.Loading, p.loading) {
		p.progress = p.lastSeen
	}
	p.read, p.held, p.loading, p.ownPoints = hb.Read, hb.Held, hb.Loading, hb.OwnPoints
	p.host, p.rss, p.rounds, p.bytesIn, p.bytesOut = hb.Host, hb.RSS, hb.Rounds, hb.BytesIn, hb.BytesOut
	if hb.Reconnects > p.reconnects {
		c.log.Info("worker reconnected to NATS", logging.Event("reconnect"), zap.String("worker", hb.ID))
		p.reconnects = hb.Reconnects
		c.soon()
	}
	// In shard order, as everything the core sends: the same messages
	// in the same order for the same steps.
	for _, s := range slices.Sorted(maps.Keys(c.incoming)) {
		if to := c.incoming[s]; to == hb.ID && inSorted(hb.Held, s) {
			// The new owner has it: the old one may let go.
			from := c.owner[s]
			c.owner[s] = to
			delete(c.incoming, s)
			c.log.Info("shard moved", logging.Event("moved"), zap.Int("shard", s), zap.String("from", from), zap.String("to", to))
			if from != "" && !c.workers[from].dead {
				c.sendAssign(from)
			}
		}
	}
	want := c.assigned(hb.ID)
	switch {
	case hb.Job != c.cfg.Job && len(want) > 0:
		c.sendAssign(hb.ID) // it lost our assignment (a restart): say it again
	case !p.assigned.IsZero() && lacks(hb, want) && p.lastSeen.Sub(p.assigned) > c.cfg.HeartbeatTimeout:
		// The assignment went out on a connection that broke before it
		// was delivered (a cut link is found dead only by pings): the
		// worker would never load the shards a round waits on. Only
		// missing shards call for it: one that holds more than its share
		// (back after it was taken for lost) keeps them until a balance
		// moves shards, for a copy in memory may be the only one left
		// when the store is cut off too. One not yet assigned anything
		// keeps what it holds (a last job's shards) for the first
		// assignment.
		c.log.Info("worker lacks shards assigned to it: saying them again", logging.Event("resent"), zap.String("worker", hb.ID),
			zap.Ints("held", hb.Held), zap.Ints("loading", hb.Loading), zap.Ints("assigned", want))
		c.sendAssign(hb.ID)
	}
}

// lacks reports whether a heartbeat shows its worker neither holding nor
// loading some shard in want (its lists sorted).
func lacks(hb wire.Heartbeat, want []int) bool {
	for _, s := range want {
		if !inSorted(hb.Held, s) && !inSorted(hb.Loading, s) {
			return true
		}
	}
	return false
}

// sortedIDs is ids in increasing order, for has. A worker sends its
// lists sorted; one that did not is sorted here. Looked up one by one, a
// worker of 16,384 shards took the coordinator seconds a heartbeat.
func sortedIDs(ids []int) []int {
	if slices.IsSorted(ids) {
		return ids
	}
	s := slices.Clone(ids)
	slices.Sort(s)
	return s
}

// noResponders is the status the server gives a message with a reply
// subject that no subscription takes.
const noResponders = "503"

// probeConfirm is how long probes must find nobody on a worker's subject
// before it is lost: a worker whose connection broke, reconnecting to a
// server that is up, is absent for a few milliseconds.
const probeConfirm = 500 * time.Millisecond

// probe asks the server whether these workers are still connected (see
// clusterIO.probeSubject and onGone). At most one probe per worker goes
// out per call.
func (c *clusterCore) probe(ids []string) {
	if !c.io.connected() {
		return // the answers would come of the outage (see onGone)
	}
	slices.Sort(ids)
	now := c.now()
	for _, id := range slices.Compact(ids) {
		p := c.workers[id]
		if p == nil || p.dead {
			continue
		}
		p.probed = now
		if err := c.io.probeSubject(id); err != nil {
			c.log.Debug("probe", zap.String("worker", id), zap.Error(err))
		}
	}
}

// onGone handles the server's answer that nobody holds worker id's
// subject, and reports whether the worker is now lost (its shards move).
// It is lost once probes have found it gone for probeConfirm with no
// heartbeat in between. Answers that a heartbeat since the probe
// contradicts do not count, nor do those of an outage: after a server
// restart workers come back over seconds, and until HeartbeatTimeout has
// passed since a reconnection (see sawReconnect) only heartbeats tell.
func (c *clusterCore) onGone(id string) bool {
	p := c.workers[id]
	now := c.now()
	switch {
	case p == nil || p.dead:
		return false
	case !c.deafSince.IsZero() || now.Before(c.probeQuiet) || p.lastSeen.After(p.probed):
		p.noSub = time.Time{}
		return false
	case p.noSub.IsZero():
		p.noSub = now
		return false
	case now.Sub(p.noSub) < probeConfirm:
		return false
	}
	p.dead = true
	c.log.Warn("worker lost", logging.Event("lost"), zap.String("worker", id), zap.String("why", "its connection closed"),
		zap.Duration("silent", now.Sub(p.lastSeen)))
	c.balance(false)
	c.publishView()
	return true
}

// target is where a shard is going: its incoming owner, else its owner.
func (c *members) target(s int) string {
	if to, ok := c.incoming[s]; ok {
		return to
	}
	return c.owner[s]
}

func (c *members) load(id string) int {
	n := 0
	for s := range c.owner {
		if c.target(s) == id {
			n++
		}
	}
	return n
}

// checkWorkers declares silent workers dead and gives their shards away.
// With moves set (between rounds), it also evens out the load, which is
// how a worker that joined gets shards.
func (c *clusterCore) checkWorkers(moves bool) {
	now := c.now()
	if !c.io.connected() {
		if c.deafSince.IsZero() {
			c.deafSince = now
		}
		return
	}
	if !c.deafSince.IsZero() {
		// Heartbeats could not reach us: count silence, and loads that
		// read nothing, from now.
		c.log.Info("back on NATS", logging.Event("reconnect"), zap.Duration("cut off", now.Sub(c.deafSince)))
		c.deafSince = time.Time{}
		c.sawReconnect()
		for _, p := range c.workers {
			p.lastSeen, p.progress = now, now
		}
	}
	for _, id := range c.live() {
		p := c.workers[id]
		if now.Sub(p.lastSeen) > c.cfg.HeartbeatTimeout {
			p.dead = true
			c.log.Warn("worker lost", logging.Event("lost"), zap.String("worker", id), zap.Duration("silent", now.Sub(p.lastSeen)))
		}
	}
	c.unstickLoads(now)
	c.balance(moves)
	c.publishView()
}

// unstickLoads takes a worker for stuck, as unstick does, when a load of
// shards the job needs from it has read nothing for LoadStall: a load
// from a hung network mount never ends, and heartbeats that say Loading
// would keep the job waiting on it for ever. Another live worker must be
// there to take the shards.
func (c *clusterCore) unstickLoads(now time.Time) {
	for _, id := range c.live() {
		p := c.workers[id]
		if now.Sub(p.progress) < c.cfg.LoadStall || len(c.live()) < 2 {
			continue
		}
		var needed []int
		for _, s := range p.loading {
			if c.target(s) == id {
				needed = append(needed, s)
			}
		}
		if len(needed) == 0 {
			continue
		}
		c.takeStuck(id, "its load has read nothing", zap.Ints("loading", needed), zap.Duration("still for", now.Sub(p.progress)))
	}
}

// takeStuck takes worker id for lost for the rest of the job though it
// is alive (its heartbeats no longer bring it back), says why, and tells
// it to let go of its shards; the caller gives them out.
func (c *clusterCore) takeStuck(id, why string, fields ...zap.Field) {
	p := c.workers[id]
	p.dead, p.stuck = true, true
	c.log.Warn("worker stuck: "+why+"; its shards move for the rest of the job",
		append([]zap.Field{logging.Event("lost"), zap.String("worker", id)}, fields...)...)
	c.sendAssign(id)
	c.publishView()
}

// balance gives out shards whose worker is gone and, with moves, moves
// shards until loads differ by at most one. The first assignment hands out
// contiguous blocks. A moved shard stays with its old owner until the new
// one holds it, so no round waits on a load that a move caused.
func (c *clusterCore) balance(moves bool) {
	live := c.live()
	if len(live) == 0 {
		return // nobody to give shards to: keep waiting for someone
	}
	changed := map[string]bool{}
	if !slices.ContainsFunc(c.owner, func(o string) bool { return o != "" }) {
		c.firstOwners(live)
		for _, id := range live {
			changed[id] = true
		}
	}
	moved := c.reassignLost(live, changed)
	if moves {
		moved += c.evenOut(live, changed)
	}
	c.stats.count(func(s *Stats) { s.Reassignments += moved })
	for _, id := range live {
		if changed[id] {
			c.sendAssign(id)
		}
	}
}

// firstOwners hands out contiguous blocks, of whole groups when there
// are enough of them: a worker holding a block of groups sends a few
// node sums up (see reduce.Combiner), not a partial per shard of a split
// group.
func (c *members) firstOwners(live []string) {
	n, G, W := len(c.owner), reduce.NumGroups(len(c.owner)), len(live)
	for s := range c.owner {
		if G >= 2*W {
			c.owner[s] = live[reduce.GroupOf(s)*W/G]
		} else {
			c.owner[s] = live[s*W/n]
		}
	}
}

// reassignLost gives the shards of workers no longer live to their
// incoming owners, else to the least loaded, and forgets moves to
// workers no longer live; it marks the new owners changed and returns
// how many shards it gave.
func (c *clusterCore) reassignLost(live []string, changed map[string]bool) (moved int) {
	isLive := map[string]bool{}
	for _, id := range live {
		isLive[id] = true
	}
	for s := range c.owner {
		if to, ok := c.incoming[s]; ok && !isLive[to] {
			delete(c.incoming, s)
		}
		if !isLive[c.owner[s]] {
			to, ok := c.incoming[s]
			if !ok {
				to = c.leastLoaded(live)
			}
			c.log.Info("shard reassigned", logging.Event("moved"), zap.Int("shard", s), zap.String("from", c.owner[s]), zap.String("to", to))
			c.owner[s] = to
			delete(c.incoming, s)
			changed[to] = true
			moved++
		}
	}
	return moved
}

// evenOut moves shards from the most to the least loaded worker while a
// move narrows the gap: in whole groups when there are enough groups (a
// split group costs a partial per shard on the bus), in shards
// otherwise. It marks the receivers changed and returns how many shards
// it moved.
func (c *members) evenOut(live []string, changed map[string]bool) (moved int) {
	byGroup := reduce.NumGroups(len(c.owner)) >= 2*len(live)
	for {
		hi, lo := c.mostLoaded(live), c.leastLoaded(live)
		var batch []int // hi's last shard, or the shards of its last group it has
		for s := len(c.owner) - 1; s >= 0; s-- {
			if c.target(s) != hi {
				continue
			}
			if len(batch) > 0 && (!byGroup || reduce.GroupOf(s) != reduce.GroupOf(batch[0])) {
				break
			}
			batch = append(batch, s)
		}
		if len(batch) == 0 || c.load(hi)-c.load(lo) <= len(batch) {
			return moved
		}
		for _, s := range batch {
			if c.owner[s] == lo {
				delete(c.incoming, s)
			} else {
				c.incoming[s] = lo
			}
			moved++
		}
		changed[lo] = true
	}
}

func (c *members) leastLoaded(live []string) string {
	best := live[0]
	for _, id := range live[1:] {
		if c.load(id) < c.load(best) {
			best = id
		}
	}
	return best
}

func (c *members) mostLoaded(live []string) string {
	best := live[0]
	for _, id := range live[1:] {
		if c.load(id) > c.load(best) {
			best = id
		}
	}
	return best
}

// sendAssign tells worker id its shards, and to describe again those of
// them listed in describe. A stuck worker has none, though it still owns
// its shards until the caller gives them out.
func (c *clusterCore) sendAssign(id string, describe ...int) {
	a := wire.Assign{Job: c.cfg.Job, Source: c.cfg.Source, Shards: []input.Range{}, Total: len(c.owner), Describe: describe}
	if p := c.workers[id]; p == nil || !p.stuck {
		for _, s := range c.assigned(id) {
			a.Shards = append(a.Shards, c.cfg.Ranges[s])
		}
	}
	if p := c.workers[id]; p != nil {
		p.assigned = c.now()
	}
	if err := c.io.assign(id, a); err != nil {
		c.log.Error("assign", zap.String("worker", id), zap.Error(err))
	}
}

// live are the workers not lost, in order.
func (c *members) live() []string {
	var ids []string
	for id, p := range c.workers {
		if !p.dead {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
