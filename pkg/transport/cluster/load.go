package cluster

import (
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"
)

// Load assigns the shards once MinWorkers are alive, and waits until
// every shard's holder has described it: descriptions go missing with
// workers that die, hang or lose messages, and are asked for again.

// enoughWorkers reports whether MinWorkers are alive: what Load waits
// for before it assigns the shards.
func (c *clusterCore) enoughWorkers() bool { return len(c.live()) >= c.cfg.MinWorkers }

// onLoadTick checks on the workers while Load waits for descriptions:
// shards of lost workers move, descriptions long missing are asked for
// again, and the workers owing some are probed.
func (c *clusterCore) onLoadTick() {
	c.checkWorkers(false)
	c.askAgain()
	var owing []string
	for s, ok := range c.haveMet {
		if !ok {
			owing = append(owing, c.target(s))
		}
	}
	c.probe(owing)
}

// askAgain asks workers for the descriptions of shards they hold but
// whose descriptions have not come for ResendAfter, or at once after a
// reconnection (resendAt). Descriptions are sent once, and a server
// that cuts off a slow consumer (all of a large job's column maps
// arriving at once) or restarts drops what it had queued: Load would
// wait for ever.
func (c *clusterCore) askAgain() {
	if c.heldSince == nil {
		c.heldSince = map[int]time.Time{}
	}
	now := c.now()
	all := c.due(now)
	ask := map[string][]int{}
	for s, ok := range c.haveMet {
		id := c.target(s)
		p := c.workers[id]
		if ok || p == nil || p.dead || !inSorted(p.held, s) {
			continue
		}
		if since, seen := c.heldSince[s]; !all && (!seen || now.Sub(since) < c.cfg.ResendAfter) {
			if !seen {
				c.heldSince[s] = now
			}
			continue
		}
		c.heldSince[s] = now // again after another ResendAfter
		ask[id] = append(ask[id], s)
	}
	if c.asked == nil {
		c.asked = map[workerShard]int{}
	}
	var stuck []string
	for _, id := range slices.Sorted(maps.Keys(ask)) {
		shards := ask[id]
		unanswered := 0
		for _, s := range shards {
			if !all { // one ask each ResendAfter; not the ask at a reconnection
				c.asked[workerShard{id, s}]++
			}
			unanswered = max(unanswered, c.asked[workerShard{id, s}])
		}
		if unanswered > stuckResends && len(c.live()) > 1 {
			stuck = append(stuck, id)
			continue
		}
		c.log.Warn("shard descriptions missing; asking again", zap.String("worker", id), zap.Ints("shards", shards))
		c.sendAssign(id, shards...)
	}
	c.unstickDescriptions(stuck)
}

// unstickDescriptions takes workers for stuck, as unstick does, when they
// hold shards the job waits for and have left stuckResends asks for their
// descriptions unanswered: a worker whose loop hangs once its load is
// over heartbeats on, and its load has ended, so unstickLoads cannot tell.
func (c *clusterCore) unstickDescriptions(ids []string) {
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids)
	for _, id := range ids {
		if len(c.live()) < 2 {
			break
		}
		c.takeStuck(id, "it holds shards but does not describe them", zap.Int("asks unanswered", stuckResends+1))
	}
	c.balance(false)
}
