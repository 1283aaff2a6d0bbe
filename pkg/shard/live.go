package shard

import (
	"fmt"

	"github.com/osgm-svm/osgm/pkg/cols"
)

// CheckLive makes every shard ready for points that carry m's
// coordinates: each builds its column map into them, once per map. A
// shard with a column m does not carry cannot be evaluated at such points.
func CheckLive(shards []*Shard, m *cols.LiveMap) error {
	if m == nil {
		return nil
	}
	for _, s := range shards {
		if err := s.useLive(m); err != nil {
			return err
		}
	}
	return nil
}

// View is a shard over s's rows for a reader other than s's owner: it
// shares the rows, read only, and numbers them its own way, its classes,
// folds and map into live coordinates being its own (unset). An
// in-process worker sets those of its shards lazily, from the points it
// gets; the coordinator's forks over the same rows set their views'.
func (s *Shard) View() *Shard {
	v := *s
	v.Class, v.classes, v.Fold, v.tracked = nil, 0, nil, false
	v.liveCols, v.liveOf = cols.List{}, nil
	return &v
}

// Reuse readies the shard for another job over the same data: what it
// holds from the last job's points (the folds and the column map into
// live coordinates) does not hold for the next.
func (s *Shard) Reuse() {
	s.Fold = nil
	s.liveCols, s.liveOf = cols.List{}, nil
}

func (s *Shard) useLive(m *cols.LiveMap) error {
	if s.liveOf == m {
		return nil
	}
	ids := s.Cols.Append(nil)
	for l, g := range ids {
		r, ok := m.Rank(g)
		if !ok {
			return fmt.Errorf("shard %d: feature %d is not among the point's %d coordinates", s.ID, g+1, m.Len())
		}
		ids[l] = r
	}
	s.liveCols, s.liveOf = cols.NewList(ids), m
	return nil
}

// colsFor is the column map into p's vectors.
func (s *Shard) colsFor(p *Point) cols.List {
	if p.Live == nil {
		return s.Cols
	}
	if s.liveOf != p.Live {
		panic(fmt.Sprintf("shard %d: a point with live coordinates before CheckLive", s.ID))
	}
	return s.liveCols
}
