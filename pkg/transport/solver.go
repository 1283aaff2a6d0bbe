package transport

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/memory"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// solver is a worker's side of placed problems (wire.Solve): it runs
// the problems the coordinator places on it one at a time, beside the
// worker's rounds, over every shard of their job, which it loads once
// per job and keeps.
type solver struct {
	w     *Worker
	queue chan placed
	asm   wire.Assembler // the Solve messages' chunks, in the subscription's callback

	mu      sync.Mutex
	pending map[uint64]bool // placements queued or under way
	running uint64          // the one under way (0: none)
	stop    atomic.Bool     // asked to stop the one under way

	// The job whose shards it holds, loaded from src's ranges.
	job    uint64
	ranges []shard.Range
	shards []*shard.Shard
}

type placed struct {
	job, id uint64
	m       *wire.Solve
}

func newSolver(w *Worker) *solver {
	s := &solver{w: w, queue: make(chan placed, 64), pending: map[uint64]bool{}}
	s.asm.MaxPending = 4
	return s
}

// take is a Solve or SolveStop chunk for this worker.
func (s *solver) take(h wire.Header, payload []byte) {
	if h.Kind == wire.KindSolveStop {
		s.mu.Lock()
		if s.running == h.Round {
			s.stop.Store(true)
		}
		s.mu.Unlock()
		return
	}
	b, ok := s.asm.Add(h, payload)
	if !ok {
		return
	}
	s.asm.Forget(h.Round)
	m, err := wire.DecodeSolve(b)
	if err != nil {
		s.w.badMsg.add(err, h.Kind)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending[h.Round] {
		return // sent again while it waited or ran: it answers once
	}
	select {
	case s.queue <- placed{job: h.Job, id: h.Round, m: m}:
		s.pending[h.Round] = true
	default:
		s.w.log.Warn("placed problems queue full: dropped one; the coordinator sends it again", zap.Uint64("placement", h.Round))
	}
}

// under is what the heartbeats say: the placements queued or under way.
func (s *solver) under() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]uint64, 0, len(s.pending))
	for id := range s.pending {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// run minimises the placed problems in turn until ctx ends.
func (s *solver) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-s.queue:
			s.mu.Lock()
			s.running = p.id
			s.stop.Store(false)
			s.mu.Unlock()
			end := s.solve(p)
			s.mu.Lock()
			s.running = 0
			delete(s.pending, p.id)
			s.mu.Unlock()
			s.send(p, wire.KindSolved, end)
		}
	}
}

// solve runs one placement and says how it ended.
func (s *solver) solve(p placed) *wire.Solved {
	m := p.m
	obj, err := s.objective(p)
	if err != nil {
		s.w.log.Error("placed problem", zap.Int("problem", m.K), zap.Error(err))
		return &wire.Solved{Err: err.Error()}
	}
	set := m.Settings
	set.Trace = func(r osgm.Record) { s.send(p, wire.KindSolving, &wire.Solving{Record: &r}) }
	if m.Snapshots {
		set.Checkpoint = func(snap *osgm.Snapshot) error {
			s.send(p, wire.KindSolving, &wire.Solving{Snapshot: snap})
			return nil
		}
	}
	set.Interrupt = s.stop.Load
	r, err := osgm.Solve(obj, m.K, m.X0, m.Problem, set)
	switch {
	case errors.Is(err, osgm.ErrInterrupted):
		return &wire.Solved{Interrupted: true}
	case err != nil:
		return &wire.Solved{Err: err.Error()}
	}
	return &wire.Solved{Result: r}
}

// objective is the placement's objective over every shard of its job,
// loaded unless held: its own Local, so that no activity cache of an
// earlier problem is taken for this one's.
func (s *solver) objective(p placed) (*shard.Objective, error) {
	m := p.m
	if s.shards == nil || s.job != p.job || !slices.Equal(s.ranges, m.Ranges) {
		s.shards = nil // the old job's, before loading the new one's
		shards, _, err := s.w.readShards(m.Source, m.Ranges)
		if err != nil {
			return nil, err
		}
		s.job, s.ranges, s.shards = p.job, m.Ranges, shards
	}
	local := shard.NewLocal(s.shards, s.w.cfg.Parallel)
	if err := local.SetClasses(m.Order); err != nil {
		return nil, err
	}
	if m.Folds > 0 {
		if err := local.SetFolds(m.Folds); err != nil {
			return nil, err
		}
	}
	obj := m.Constants.Build(local)
	if obj.Dim() != len(m.X0) {
		return nil, errors.New("transport: the placed problem's objective is not the coordinator's (its dimension differs)")
	}
	return obj, nil
}

func (s *solver) send(p placed, kind wire.Kind, v any) {
	b, err := wire.EncodeGob(v)
	if err != nil {
		s.w.log.Error("encoding a placed problem's message", zap.Error(err))
		return
	}
	s.w.send(kind, p.job, p.id, uint32(p.m.K), b)
}

// avail is the heartbeat's Avail.
func avail() int64 { return memory.Available() }
