package cluster

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/cols"
	"github.com/osgm-svm/osgm/pkg/logging"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// Placer is the NATS loop around a placerCore: it places whole problems
// of a Cluster's job on its workers (see Placed). The Cluster's
// subscriptions hand it the heartbeats, the probes' answers and the
// workers' Solving and Solved, which it decodes and queues; one
// goroutine steps the core and does what it hands back.
type Placer struct {
	c   *Cluster
	log *zap.Logger

	in   chan placerInput // stepped by loop, in order
	quit chan struct{}
	done chan struct{}
	asm  wire.Assembler // the workers' Solving and Solved
	core *placerCore

	chunks wire.Chunker
	unhook func() // from the Cluster's messages
}

// stopGraceSolve bounds the wait for a stopped placement's last state.
const stopGraceSolve = 10 * time.Second

// NewPlacer starts placing problems of c's job on its workers.
func NewPlacer(c *Cluster) (*Placer, error) {
	pl := &Placer{c: c, log: c.core.log, in: make(chan placerInput, 256), quit: make(chan struct{}), done: make(chan struct{})}
	pl.asm.MaxPending = 64
	pl.core = newPlacerCore(c.core.cfg.HeartbeatTimeout)
	pl.unhook = c.hookPlaced(pl)
	go pl.loop()
	// Workers running already answer the hello with their heartbeat.
	if err := c.nc.Publish(wire.SubjectHello, nil); err != nil {
		pl.Close()
		return nil, err
	}
	return pl, nil
}

// Close stops the loop.
func (pl *Placer) Close() {
	pl.unhook()
	close(pl.quit)
	<-pl.done
}

func (pl *Placer) loop() {
	defer close(pl.done)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-pl.quit:
			return
		case in := <-pl.in:
			if q := in.fits; q != nil {
				q.slots, q.ok = pl.core.fits(q.bytes)
				q.res <- *q
				continue
			}
			pl.do(pl.core.Step(in.msg, time.Now()))
		case now := <-t.C:
			pl.do(pl.core.Tick(now))
		}
	}
}

// do sends what a step of the core hands back, then tells the
// placements' callers what they hear.
func (pl *Placer) do(rd placerReady) {
	for _, o := range rd.out {
		switch o.kind {
		case outSend:
			pl.send(o.worker, o.p)
		case outStop:
			pl.publish(o.worker, wire.KindSolveStop, o.p, nil)
		case outProbe:
			pl.c.probeSubject(o.worker)
		}
	}
	for _, h := range rd.heard {
		h.p.events <- h.ev
	}
}

// placerInput is a message for the core, or a question: one queue keeps
// them in order, so that Fits, asked after the workers' hello, counts
// the heartbeats that answered it.
type placerInput struct {
	msg  placerMsg
	fits *fitsQuery
}

// step queues m for the loop, or drops it once the loop has stopped.
func (pl *Placer) step(m placerMsg) { pl.queue(placerInput{msg: m}) }

func (pl *Placer) queue(in placerInput) bool {
	select {
	case pl.in <- in:
		return true
	case <-pl.quit:
		return false
	}
}

// fitsQuery asks the loop for the core's fits, and carries the answer.
type fitsQuery struct {
	bytes int64
	slots int
	ok    bool
	res   chan fitsQuery
}

// Fits reports whether every worker that solves has memory for bytes
// more, and how many problems they run at once.
func (pl *Placer) Fits(bytes int64) (slots int, ok bool) {
	q := fitsQuery{bytes: bytes, res: make(chan fitsQuery, 1)}
	if !pl.queue(placerInput{fits: &q}) {
		return 0, false
	}
	select {
	case q = <-q.res:
		return q.slots, q.ok
	case <-pl.quit:
		return 0, false
	}
}

// heartbeat and gone take what the Cluster's subscriptions decoded: a
// worker's heartbeat, and the server's word that nobody holds a worker's
// subject.
func (pl *Placer) heartbeat(hb wire.Heartbeat) {
	pl.step(placerBeat{hb})
}

func (pl *Placer) gone(id string) { pl.step(placerGone{id}) }

// receive takes a chunk of a worker's Solving or Solved (the Cluster's
// up subscription hands them over).
func (pl *Placer) receive(h wire.Header, payload []byte) {
	b, ok := pl.asm.Add(h, payload)
	if !ok {
		return
	}
	id := h.Round
	if h.Kind == wire.KindSolving {
		m, err := wire.DecodeSolving(b)
		if err != nil {
			pl.c.core.bad.Add(err, h.Kind)
			return
		}
		pl.step(placerSolving{id, m})
		return
	}
	pl.asm.Drop(id) // the rest of a placement that ended, from a copy
	m, err := wire.DecodeSolved(b)
	if err != nil {
		pl.c.core.bad.Add(err, h.Kind)
		return
	}
	pl.step(placerSolved{id, m})
}

// send gives placement p to worker id.
func (pl *Placer) send(id string, p *placement) error {
	b, err := wire.EncodeSolve(p.req)
	if err == nil {
		err = pl.publish(id, wire.KindSolve, p, b)
	}
	if err != nil {
		pl.log.Warn("placing a problem", zap.String("worker", id), zap.Int("problem", p.req.K), zap.Error(err))
		return err
	}
	if p.req.Pass != nil {
		pl.log.Debug("pass placed", zap.String("worker", id), zap.Ints("problems", p.req.Pass.Ks))
		return nil
	}
	pl.log.Info("problem placed", logging.Event("placed"), zap.String("worker", id), zap.Int("problem", p.req.K), zap.Bool("resumed", p.req.Settings.Resume != nil))
	return nil
}

func (pl *Placer) publish(id string, kind wire.Kind, p *placement, b []byte) error {
	subj := wire.WorkerSubject(id)
	return pl.chunks.SendPieces(kind, pl.c.core.cfg.Job, p.id, uint32(p.req.K), [][]byte{b}, int(pl.c.nc.MaxPayload()), func(chunk []byte) error {
		return pl.c.nc.Publish(subj, chunk)
	})
}

// Place minimises problem k of the objective of constants c on a worker
// (objective.Backend's Place) with settings s, calling h's hooks here
// with what the worker sends.
func (pl *Placer) Place(c objective.Constants, order []float64, folds, k int, x0 []float64, p osgm.Problem, s osgm.Settings, h osgm.Hooks) (*osgm.Result, bool, error) {
	req := pl.request(c, order, folds)
	req.K, req.X0, req.Problem, req.Settings, req.Snapshots = k, x0, p, s, h.Checkpoint != nil
	m, err := pl.await(req, h)
	if err != nil {
		return nil, true, err
	}
	return ended(m, k)
}

// PlacePass makes pass b of the objective of constants c on a worker
// (objective.Backend's PlacePass): the pass that starts a placed problem, OpEval or
// OpEvalDiag (ok false for another).
func (pl *Placer) PlacePass(c objective.Constants, order []float64, folds int, b *osgm.Pass) (bool, error) {
	if b.Op != osgm.OpEval && b.Op != osgm.OpEvalDiag || len(b.X) == 0 {
		return false, nil
	}
	ks := b.Ks
	if ks == nil {
		ks = make([]int, len(b.X))
		for i := range ks {
			ks[i] = i
		}
	}
	req := pl.request(c, order, folds)
	req.K, req.Pass = ks[0], &osgm.Pass{Op: b.Op, Ks: ks, X: b.X, At: b.At}
	m, err := pl.await(req, osgm.Hooks{})
	if err != nil {
		return true, err
	}
	if m.Err != "" || m.Pass == nil {
		return true, fmt.Errorf("a pass on a worker: %s", m.Err)
	}
	got := m.Pass
	if len(got.F) != len(b.F) || b.D != nil && len(got.D) != len(b.D) {
		return true, errors.New("transport: a worker's pass has another number of problems")
	}
	copy(b.F, got.F)
	for i := range b.G {
		if len(got.G[i]) != len(b.G[i]) || b.D != nil && len(got.D[i]) != len(b.D[i]) {
			return true, errors.New("transport: a worker's pass has vectors of another length")
		}
		copy(b.G[i], got.G[i])
		if b.D != nil {
			copy(b.D[i], got.D[i])
		}
	}
	return true, nil
}

// request is a Solve over the job's data and an objective of
// constants c, classes order and folds.
func (pl *Placer) request(c objective.Constants, order []float64, folds int) *wire.Solve {
	return &wire.Solve{Source: pl.c.core.cfg.Source, Ranges: pl.c.core.cfg.Ranges, Order: order, Folds: folds, Constants: c}
}

// await places req and waits for its end, calling s's callbacks with
// its progress and stopping it once h.Interrupt says so.
func (pl *Placer) await(req *wire.Solve, h osgm.Hooks) (*wire.Solved, error) {
	pd := &placement{req: req, events: make(chan placerEvent, 256)}
	pl.step(placerSubmit{pd})
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	var stopped time.Time
	for {
		select {
		case ev := <-pd.events:
			switch {
			case ev.record != nil && h.Trace != nil:
				h.Trace(*ev.record)
			case ev.snap != nil && h.Checkpoint != nil:
				if err := h.Checkpoint(ev.snap); err != nil {
					pl.step(placerStop{pd})
					pl.step(placerForget{pd})
					return nil, err
				}
			case ev.end != nil:
				return ev.end, nil
			}
		case <-t.C:
			switch {
			case stopped.IsZero() && h.Interrupt != nil && h.Interrupt():
				stopped = time.Now()
				pl.step(placerStop{pd})
			case !stopped.IsZero() && time.Since(stopped) > stopGraceSolve:
				pl.step(placerForget{pd})
				return nil, osgm.ErrInterrupted // its last state is what was saved
			}
		case <-pl.quit:
			return nil, errors.New("transport: the placer closed with a problem under way")
		}
	}
}

func ended(m *wire.Solved, k int) (*osgm.Result, bool, error) {
	switch {
	case m.Interrupted:
		return nil, true, osgm.ErrInterrupted
	case m.Err != "":
		return nil, true, fmt.Errorf("problem %d on a worker: %s", k, m.Err)
	}
	return m.Result, true, nil
}

// Placed is a Cluster whose one-vs-rest problems go whole to workers
// that hold every shard (its Fork): each fork places its problems,
// and the pass that starts each, through the Placer. Any other pass a
// fork makes is a round on the cluster, one fork at a time.
type Placed struct {
	*Cluster
	Placer *Placer
	// Slots is how many problems the workers run at once: as many forks
	// as train side by side (train.Config.Parallel).
	Slots int

	mu sync.Mutex // one round at a time on the cluster
}

// Fork is a fork that places problems.
func (b *Placed) Fork(live *cols.LiveMap) (objective.Backend, error) {
	return &placedFork{Placed: b, order: b.core.order, folds: int(b.core.folds)}, nil
}

type placedFork struct {
	*Placed
	order []float64
	folds int
}

func (f *placedFork) Eval(op osgm.Op, p, v *shard.Point, add func(*reduce.Partial) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Cluster.Eval(op, p, v, add)
}

func (f *placedFork) Place(c objective.Constants, k int, x0 []float64, p osgm.Problem, s osgm.Settings, h osgm.Hooks) (*osgm.Result, bool, error) {
	return f.Placer.Place(c, f.order, f.folds, k, x0, p, s, h)
}

// PlacePass makes the pass that starts a problem on a worker, not as a
// round that every worker stops for.
func (f *placedFork) PlacePass(c objective.Constants, b *osgm.Pass) (bool, error) {
	return f.Placer.PlacePass(c, f.order, f.folds, b)
}

// DataBytes bounds the memory a worker takes to hold every shard the
// metas describe, plain: 12 bytes a nonzero (column id and value), a
// row's offset, class and label, and the column maps; Place's auto mode
// wants twice this free on every worker.
func DataBytes(metas []shard.Meta) int64 {
	var b int64
	for _, m := range metas {
		b += 12*int64(m.NNZ) + 16*int64(m.Rows) + 8*int64(m.Cols.Len())
	}
	return b
}
