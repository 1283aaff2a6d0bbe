package main

import (
	"context"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/logging"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/status"
	"github.com/osgm-svm/osgm/pkg/train"
	"github.com/osgm-svm/osgm/pkg/transport"
	"github.com/osgm-svm/osgm/pkg/transport/cluster"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// statusPage is -http's live page: the board the run writes to as it
// goes. Its methods do nothing on nil, a run without -http.
type statusPage struct {
	board  *status.Board
	stop   func()
	linger time.Duration
	log    *zap.Logger
}

// openStatus serves the status page when -http asks for it, and returns
// the logger whose events (workers joined and lost, shards moved, rounds
// sent again, reconnections, checkpoints) the page lists.
func openStatus(o *options, log *zap.Logger) (*statusPage, *zap.Logger, error) {
	if o.httpAddr == "" {
		return nil, log, nil
	}
	addr, err := status.Addr(o.httpAddr)
	if err != nil {
		return nil, log, err
	}
	b := status.NewBoard(time.Now)
	bound, stop, err := b.Serve(addr)
	if err != nil {
		return nil, log, err
	}
	if !status.Loopback(bound) {
		log.Warn("the status page is served beyond this host: whoever reaches this address sees the job's file, workers' names and hosts, and progress (read-only; no credentials)",
			zap.String("addr", bound))
	}
	log.Info("status page", zap.String("url", "http://"+bound+"/"))
	return &statusPage{board: b, stop: stop, linger: o.httpLinger, log: log}, logging.WithEvents(log, b.Event), nil
}

// loaded says what the run trains once the shards are in, and where the
// page finds the workers.
func (p *statusPage) loaded(o *options, be *built) {
	if p == nil {
		return
	}
	sum := shard.Summarize(be.Backend.Meta(), o.cfg.Loss)
	labels := []string{"model"}
	if len(sum.Labels) > 2 {
		labels = labels[:0]
		for _, l := range shard.LabelOrder(sum.Labels) {
			labels = append(labels, strconv.FormatFloat(l, 'g', -1, 64))
		}
	}
	p.board.SetJob(status.Job{File: o.train, Rows: sum.Rows, NNZ: sum.NNZ, Features: int(sum.MaxIndex),
		Classes: len(sum.Labels), Problems: len(labels), Method: o.cfg.Method, C: o.cfg.C, Eps: o.cfg.Eps}, labels)
	if c := be.cluster; c != nil {
		p.board.SetWorkers(func() []status.Worker { return workerRows(c.Workers()) })
	}
	p.board.SetPhase(status.PhaseTraining)
}

// reportStores says how many copies each object store bucket of the run
// keeps (its shards', its checkpoints'), in the log and on the page: how
// many servers its data outlives, less one.
func reportStores(log *zap.Logger, nc *nats.Conn, o *options, ck *checkpoints, p *statusPage) {
	var buckets []string
	if o.backend.objectStore {
		buckets = append(buckets, wire.ShardBucket)
	}
	if ck != nil && ck.store != nil {
		buckets = append(buckets, checkpointBucket)
	}
	for _, b := range buckets {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		n, err := transport.StoreReplicas(ctx, nc, b)
		cancel()
		if err != nil {
			log.Warn("object store: its copies are not known", zap.String("bucket", b), zap.Error(err))
			continue
		}
		log.Info("object store", zap.String("bucket", b), zap.Int("copies", n))
		if p != nil {
			p.board.SetStore(b, n)
		}
	}
}

// workerRows is the cluster's view of its workers as the page lists them.
func workerRows(vs []cluster.WorkerView) []status.Worker {
	out := make([]status.Worker, len(vs))
	for i, v := range vs {
		out[i] = status.Worker{Name: v.ID, Host: v.Host, State: v.State, Shards: v.Shards, Incoming: v.Incoming,
			Rows: v.Rows, Passes: v.Rounds, BytesIn: v.BytesIn, BytesOut: v.BytesOut, Memory: v.RSS, LastSeen: v.LastSeen}
	}
	return out
}

// started corrects the job's method (auto resolved) and problem count.
func (p *statusPage) started(plan train.Plan) {
	if p == nil {
		return
	}
	p.board.SetMethod(plan.Method, plan.Problems)
}

func (p *statusPage) record(r osgm.Record) {
	if p == nil {
		return
	}
	p.board.Record(status.Record{Problem: r.Problem, Passes: r.Evals, F: r.F, GradNorm: r.GradNorm, GradTol: r.GradTol, Converged: r.Converged})
}

func (p *statusPage) phase(phase string) {
	if p != nil {
		p.board.SetPhase(phase)
	}
}

// finish shows how the run ended (err: it failed) and keeps the page up
// for -http-linger, or until a signal, before it stops serving.
func (p *statusPage) finish(end status.End, err error) {
	if p == nil {
		return
	}
	if err != nil {
		end.Error = err.Error()
	}
	p.board.Finish(end)
	if p.linger > 0 {
		p.log.Info("the status page stays up", zap.Duration("for", p.linger))
		ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		select {
		case <-ctx.Done():
		case <-time.After(p.linger):
		}
		cancel()
	}
	p.stop()
}
