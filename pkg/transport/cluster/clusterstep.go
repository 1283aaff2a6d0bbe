package cluster

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// ErrStopped is a round's error once Config.Stop is closed.
var ErrStopped = errors.New("stopped while the round waited on workers")

// stopGrace is how long a round may go on once Stop is closed: a round
// takes milliseconds to seconds, and docker stop kills after 10 s.
const stopGrace = 2 * time.Second

// The core's one way in: Step for what the Cluster's subscriptions hear,
// Tick for the time going by. Which of its handlers an event goes to is
// the core's to know, from its phase, so the Cluster's loop (until) is
// the same for Load and for every round.

// clusterEvent is one thing the subscriptions heard.
type clusterEvent interface{ clusterEvent() }

type (
	heardBeat      struct{ hb wire.Heartbeat }
	heardUp        struct{ m upMsg }
	heardGone      struct{ id string } // the server says nobody holds the worker's subject
	heardReconnect struct{}            // this coordinator is back on the server
	heardStop      struct{}            // Config.Stop: the round ends within stopGrace
)

func (heardBeat) clusterEvent()      {}
func (heardUp) clusterEvent()        {}
func (heardGone) clusterEvent()      {}
func (heardReconnect) clusterEvent() {}
func (heardStop) clusterEvent()      {}

// Step takes one event in the core's phase.
func (c *clusterCore) Step(ev clusterEvent) error {
	r := c.current
	switch ev := ev.(type) {
	case heardBeat:
		if r != nil {
			return r.onHeartbeat(ev.hb)
		}
		c.onHeartbeat(ev.hb)
	case heardUp:
		switch {
		case r != nil:
			return r.onUp(ev.m)
		case c.phase == waitingForWorkers:
			c.early = append(c.early, ev.m) // for shards not given out yet
			return nil
		}
		return c.onUp(ev.m, nil)
	case heardGone:
		if r != nil {
			return r.onGone(ev.id)
		}
		c.onGone(ev.id)
	case heardReconnect:
		c.soon()
	case heardStop:
		if r != nil && c.stopBy.IsZero() {
			c.stopBy = c.now().Add(stopGrace)
		}
	}
	return nil
}

// Tick checks what the core's phase waits on against the clocks.
func (c *clusterCore) Tick(now time.Time) error {
	switch c.phase {
	case waitingForWorkers:
		if now.After(c.waitReport) {
			c.log.Warn("still waiting for workers", zap.Int("min", c.cfg.MinWorkers),
				zap.Int("joined", len(c.live())), zap.Duration("waited", now.Sub(c.waitBegan).Round(time.Second)))
			c.waitReport = now.Add(c.cfg.WaitReport)
		}
	case outsideRounds:
		c.onLoadTick()
	case inRound:
		if !c.stopBy.IsZero() && now.After(c.stopBy) {
			return c.wrap(ErrStopped)
		}
		return c.current.onTick()
	}
	return nil
}

// waitForWorkers starts Load's wait for MinWorkers.
func (c *clusterCore) waitForWorkers() {
	c.phase, c.waitBegan = waitingForWorkers, c.now()
	c.waitReport = c.waitBegan.Add(c.cfg.WaitReport)
	c.log.Info("waiting for workers", zap.Int("min", c.cfg.MinWorkers))
}

// describe gives out every shard and waits for their descriptions.
func (c *clusterCore) describe() error {
	c.balance(true)
	c.phase = outsideRounds
	early := c.early
	c.early = nil
	for _, m := range early {
		if err := c.onUp(m, nil); err != nil {
			return err
		}
	}
	return nil
}

// endRound leaves the round, complete or failed.
func (c *clusterCore) endRound() {
	c.phase, c.current, c.stopBy = outsideRounds, nil, time.Time{}
}

// wrap names the round an error ended, if in one.
func (c *clusterCore) wrap(err error) error {
	if c.current == nil {
		return err
	}
	return fmt.Errorf("round %d: %w", c.round, err)
}
