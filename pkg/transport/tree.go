package transport

import (
	"fmt"
	"slices"

	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// ReduceMode says who adds the workers' sums of a round.
type ReduceMode int

const (
	// ReduceTree has the workers add the reduction tree among themselves
	// and send the coordinator the root alone (see reduce.Relay): its
	// intake stays one sum a round however many workers there are.
	ReduceTree ReduceMode = iota
	// ReduceStar has every worker send its own sums to the coordinator,
	// which adds them: one sum per worker a round.
	ReduceStar
)

var reduceModes = []string{"tree", "star"}

func (m ReduceMode) String() string {
	if int(m) < len(reduceModes) {
		return reduceModes[m]
	}
	return fmt.Sprintf("ReduceMode(%d)", int(m))
}

// ParseReduceMode reads tree or star.
func ParseReduceMode(s string) (ReduceMode, error) {
	if i := slices.Index(reduceModes, s); i >= 0 {
		return ReduceMode(i), nil
	}
	return 0, fmt.Errorf("reduce %q: want tree or star", s)
}

// plan has the workers add this round's tree among themselves when they
// can: the point is a broadcast of an evaluation (a tally's counts are
// added here, in any order) and every shard has an owner. The point names
// each shard's owner; a node's adder is its first shard's. The bits are
// the same either way (reduce.Relay).
func (r *roundState) plan(pt *wire.Point) {
	c := r.c
	pt.Relays, pt.Owners = nil, nil
	if c.cfg.Reduce != ReduceTree || r.layout != nil || pt.Op == wire.OpCorrect || len(c.owner) == 0 {
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

// Set is flag.Value's.
func (m *ReduceMode) Set(s string) error {
	v, err := ParseReduceMode(s)
	if err == nil {
		*m = v
	}
	return err
}
