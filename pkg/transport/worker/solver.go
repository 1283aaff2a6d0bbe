package worker

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/transport"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// solver is a worker's side of placed problems (wire.Solve): it runs
// the problems the coordinator places on it, Parallel at once (its
// slots), beside the worker's rounds, over every shard of their job,
// which it loads once per job and keeps.
type solver struct {
	io       solverIO
	parallel int // its slots
	log      *zap.Logger
	bad      *transport.Counter // messages dropped
	queue    chan task
	asm      wire.Assembler // the Solve messages' chunks, in the subscription's callback

	mu      sync.Mutex
	pending map[uint64]*atomic.Bool // placements queued or under way, and whether asked to stop

	// sent numbers the Solving and Solved messages (their chunks'
	// Shard): the coordinator puts together chunks of one key, and a
	// placement's messages differ. It starts at random, so that a copy
	// of the placement on another worker is unlikely to number alike.
	sent atomic.Uint32

	// held is the job whose shards it holds and the objective last built
	// over views of them; each placement runs on a fork of it (its own
	// activity caches: no earlier problem's is taken for its own).
	data sync.Mutex
	held *heldJob
}

type heldJob struct {
	job    uint64
	ranges []input.Range
	shards []*shard.Shard
	key    objectiveKey
	obj    *objective.Objective
	idle   []osgm.Objective // forks of obj between placements
}

// objectiveKey is what makes an objective over the shards.
type objectiveKey struct {
	order     []float64
	folds     int
	constants objective.Constants
}

// task is a placement as this worker runs it: the Solve, and whether
// the coordinator asked it to stop.
type task struct {
	job, id uint64
	m       *wire.Solve
	stop    *atomic.Bool
}

// solverIO is what the solver asks of its worker: shards read, and its
// messages sent (the worker's loop is it, as workerIO is the core's).
type solverIO interface {
	readShards(src wire.Source, ranges []input.Range) ([]*shard.Shard, int, error)
	send(kind wire.Kind, job, round uint64, shardID uint32, pieces ...[]byte)
}

func newSolver(io solverIO, parallel int, log *zap.Logger, bad *transport.Counter) *solver {
	s := &solver{io: io, parallel: parallel, log: log, bad: bad, queue: make(chan task, 64), pending: map[uint64]*atomic.Bool{}}
	s.sent.Store(rand.Uint32())
	s.asm.MaxPending = 4
	return s
}

// slots is how many placements the worker runs at once.
func (s *solver) slots() int { return s.parallel }

// take is a Solve or SolveStop chunk for this worker.
func (s *solver) take(h wire.Header, payload []byte) {
	if h.Kind == wire.KindSolveStop {
		s.mu.Lock()
		if stop := s.pending[h.Round]; stop != nil {
			stop.Store(true)
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
		s.bad.Add(err, h.Kind)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending[h.Round] != nil {
		return // sent again while it waited or ran: it answers once
	}
	p := task{job: h.Job, id: h.Round, m: m, stop: new(atomic.Bool)}
	select {
	case s.queue <- p:
		s.pending[h.Round] = p.stop
	default:
		s.log.Warn("placed problems queue full: dropped one; the coordinator sends it again", zap.Uint64("placement", h.Round))
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

// run minimises the placed problems, slots at a time, until ctx ends.
func (s *solver) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range s.slots() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case p := <-s.queue:
					end := s.solve(p)
					s.mu.Lock()
					delete(s.pending, p.id)
					s.mu.Unlock()
					s.send(p, wire.KindSolved, end)
				}
			}
		}()
	}
	wg.Wait()
}

// solve runs one placement and says how it ended.
func (s *solver) solve(p task) *wire.Solved {
	m := p.m
	obj, base, err := s.objective(p)
	if err == nil {
		defer s.release(base, obj)
	}
	if err == nil && m.Pass != nil {
		return s.pass(obj, m.Pass)
	}
	if err != nil {
		s.log.Error("placed problem", zap.Int("problem", m.K), zap.Error(err))
		return &wire.Solved{Err: err.Error()}
	}
	h := osgm.Hooks{Interrupt: p.stop.Load}
	h.Trace = func(r osgm.Record) { s.send(p, wire.KindSolving, &wire.Solving{Record: &r}) }
	if m.Snapshots {
		h.Checkpoint = func(snap *osgm.Snapshot) error {
			s.send(p, wire.KindSolving, &wire.Solving{Snapshot: snap})
			return nil
		}
	}
	r, err := osgm.Solve(obj, m.K, m.X0, m.Problem, m.Settings, h)
	switch {
	case errors.Is(err, osgm.ErrInterrupted):
		return &wire.Solved{Interrupted: true}
	case err != nil:
		return &wire.Solved{Err: err.Error()}
	}
	return &wire.Solved{Result: r}
}

// pass makes a placed pass: its values, gradients and diagonals.
func (s *solver) pass(obj osgm.Objective, in *osgm.Pass) *wire.Solved {
	n, dim := len(in.Ks), len(in.X[0])
	b := &osgm.Pass{Op: in.Op, Ks: in.Ks, X: in.X, At: in.At, F: make([]float64, n), G: vectorsOf(n, dim)}
	if in.Op == osgm.OpEvalDiag {
		b.D = vectorsOf(n, dim)
	}
	if err := obj.Evaluate(b); err != nil {
		return &wire.Solved{Err: err.Error()}
	}
	return &wire.Solved{Pass: &osgm.Pass{F: b.F, G: b.G, D: b.D}}
}

func vectorsOf(n, dim int) [][]float64 {
	out := make([][]float64, n)
	for i := range out {
		out[i] = make([]float64, dim)
	}
	return out
}

// objective is a fork of the objective over every shard of the
// placement's job, loaded and built unless held. Forks are kept from
// placement to placement (a fork's reduction tree costs as much as a
// small class): a fork's stamps never repeat, so a problem never takes
// an earlier one's activity cache for its own.
// It also returns the objective forked, which release is given back.
func (s *solver) objective(p task) (fork osgm.Objective, base *objective.Objective, err error) {
	s.data.Lock()
	defer s.data.Unlock()
	m := p.m
	h := s.held
	if h == nil || h.job != p.job || !slices.Equal(h.ranges, m.Ranges) {
		s.held = nil // the old job's, before loading the new one's
		shards, _, err := s.io.readShards(m.Source, m.Ranges)
		if err != nil {
			return nil, nil, err
		}
		h = &heldJob{job: p.job, ranges: m.Ranges, shards: shards}
		s.held = h
	}
	key := objectiveKey{order: m.Order, folds: m.Folds, constants: m.Constants}
	if h.obj == nil || !reflect.DeepEqual(h.key, key) {
		obj, err := build(h.shards, m)
		if err != nil {
			return nil, nil, err
		}
		h.obj, h.key, h.idle = obj, key, nil
	}
	dim := len(m.X0)
	if m.Pass != nil {
		dim = len(m.Pass.X[0])
	}
	if h.obj.Dim() != dim {
		return nil, nil, errors.New("transport: the placed problem's objective is not the coordinator's (its dimension differs)")
	}
	if n := len(h.idle); n > 0 {
		fork = h.idle[n-1]
		h.idle = h.idle[:n-1]
		return fork, h.obj, nil
	}
	if fork = h.obj.Fork(); fork == nil {
		return nil, nil, errors.New("transport: the shards do not take the objective's live coordinates")
	}
	return fork, h.obj, nil
}

// build is m's objective over views of the shards: forks of an earlier
// objective may still run on theirs, whose classes, folds and live
// columns this one's must not overwrite.
func build(shards []*shard.Shard, m *wire.Solve) (*objective.Objective, error) {
	views := make([]*shard.Shard, len(shards))
	for i, sh := range shards {
		views[i] = sh.View()
	}
	local := objective.NewLocal(views, 1)
	if err := local.SetClasses(m.Order); err != nil {
		return nil, err
	}
	if m.Folds > 0 {
		if err := local.SetFolds(m.Folds); err != nil {
			return nil, err
		}
	}
	return m.Constants.Build(local), nil
}

// release keeps a placement's fork for the next, if the objective it
// forked is still the one held.
func (s *solver) release(base *objective.Objective, fork osgm.Objective) {
	s.data.Lock()
	defer s.data.Unlock()
	if h := s.held; h != nil && h.obj == base {
		h.idle = append(h.idle, fork)
	}
}

func (s *solver) send(p task, kind wire.Kind, v wire.SolveMessage) {
	b, err := wire.EncodeSolve(v)
	if err != nil {
		s.log.Error("encoding a placed problem's message", zap.Error(err))
		return
	}
	s.io.send(kind, p.job, p.id, s.sent.Add(1), b)
}

// keepOnly lets go of the shards of any job but job: a worker assigned
// to a new job holds no copy of an old one's data. Placements still
// running keep what they use until they end.
func (s *solver) keepOnly(job uint64) {
	s.data.Lock()
	defer s.data.Unlock()
	if s.held != nil && s.held.job != job {
		s.held = nil
	}
}
