package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/osgm-svm/osgm/pkg/cols"
	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/s3"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/transport"
	"github.com/osgm-svm/osgm/pkg/transport/cluster"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
	"github.com/osgm-svm/osgm/pkg/transport/worker"
)

// built is the backend openBackend made, with the concrete pieces behind
// it that the command reads (the bus's counters, the live workers, the
// job, the shards in this process): the command keeps what it built
// rather than find them in Backend by type assertion.
type built struct {
	Backend objective.Backend // what the methods evaluate on
	cluster *cluster.Cluster  // the workers; nil: -local
	local   *objective.Local  // the shards in this process (-local, or the embedded workers'); nil: on other hosts
}

// openBackend puts the shards where they will be evaluated: in this
// process (-local), on in-process workers behind an embedded NATS server
// (the default), or on external workers (-nats).
func openBackend(ctx context.Context, train string, opt *backendOptions, ranges []input.Range, shared *shard.Shared, log *zap.Logger) (*built, *nats.Conn, func(), error) {
	id, err := input.Identify(train)
	if err != nil {
		return nil, nil, nil, err
	}
	if opt.local {
		l, err := loadLocal(ctx, train, opt, ranges, id, shared)
		if err != nil {
			return nil, nil, nil, err
		}
		return &built{Backend: l, local: l}, nil, func() {}, nil
	}
	var cs closers
	c, nc, err := openCluster(ctx, train, opt, ranges, id, shared, log, &cs)
	if err != nil {
		cs.close()
		return nil, nil, nil, err
	}
	b := &built{Backend: c, cluster: c}
	if opt.natsURL == "" {
		if shards := shared.Loaded(train, id, len(ranges)); shards != nil {
			b.local = objective.NewLocal(shards, opt.workers).Summed()
			if err := c.ShareMeta(b.local.Meta()); err != nil {
				cs.close()
				return nil, nil, nil, err
			}
			b.Backend = &inProcess{Cluster: c, local: b.local}
		}
	} else if opt.cluster.Place != cluster.PlaceRows {
		p, err := placeOn(ctx, c, opt, log)
		if err != nil {
			cs.close()
			return nil, nil, nil, err
		}
		if p != nil {
			cs.add(p.Placer.Close)
			b.Backend, opt.placeSlots = p, p.Slots
		}
	}
	return b, nc, func() {
		st := c.Stats()
		log.Info("bus", zap.Int("rounds", st.Rounds), zap.Int("rounds_without_x", st.WithoutX), zap.Int64("bytes_down", st.BytesDown), zap.Int64("bytes_to_workers", st.BytesToWorkers), zap.Int64("bytes_up", st.BytesUp),
			zap.Int("tree_rounds", st.TreeRounds), zap.Int("tree_hops", st.Hops), zap.Int("resends", st.Resends), zap.Int("reassignments", st.Reassignments), zap.Int("late_results", c.Late()), zap.Any("dropped", c.Dropped()))
		cs.close()
	}, nil
}

// inProcess is the embedded cluster, whose workers' shards are in this
// process: the workers load them, and passes read them in place, without
// a round on the bus, to the same bits (a round would copy the point and
// the sums through the embedded server: a fifth of a pass on wide data).
// Problems that train side by side do so on forks over those shards.
type inProcess struct {
	*cluster.Cluster
	local *objective.Local
}

func (b *inProcess) Eval(op osgm.Op, p, v *shard.Point, add func(*reduce.Partial) error) error {
	return b.local.Eval(op, p, v, add)
}

func (b *inProcess) Tally(p *shard.Point) (shard.Tally, error)          { return b.local.Tally(p) }
func (b *inProcess) Release(p *reduce.Partial)                          { b.local.Release(p) }
func (b *inProcess) Fork(live *cols.LiveMap) (objective.Backend, error) { return b.local.Fork(live) }

// SetClasses and SetFolds number the forks' views of the shards now:
// the workers number their own from the first point that says how.
func (b *inProcess) SetClasses(order []float64) error {
	if err := b.Cluster.SetClasses(order); err != nil {
		return err
	}
	return b.local.SetClasses(order)
}

func (b *inProcess) SetFolds(n int) error {
	if err := b.Cluster.SetFolds(n); err != nil {
		return err
	}
	return b.local.SetFolds(n)
}

// placeOn places one-vs-rest problems whole on c's workers where -place
// says so: always with classes, and with auto when every worker has
// memory for every shard. Its decision waits for every live worker's
// heartbeat, which the placer's hello brings at once; nil: rows.
func placeOn(ctx context.Context, c *cluster.Cluster, opt *backendOptions, log *zap.Logger) (*cluster.Placed, error) {
	pl, err := cluster.NewPlacer(c)
	if err != nil {
		return nil, err
	}
	need := 2 * cluster.DataBytes(c.Meta())
	n, fits := 0, false
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(20 * time.Millisecond) {
		if n, fits = pl.Fits(need); n >= c.Live() {
			break
		}
	}
	if n < 2 || opt.cluster.Place == cluster.PlaceAuto && !fits {
		pl.Close()
		log.Info("classes train over the workers' shards", zap.Int("slots", n), zap.Bool("data_fits", fits), zap.Int64("bytes_each", need))
		return nil, nil
	}
	log.Info("classes train whole on workers", zap.Int("slots", n), zap.Int64("bytes_each", need))
	return &cluster.Placed{Cluster: c, Placer: pl, Slots: n}, nil
}

// closers are what a backend opened, to be closed in reverse order.
type closers []func()

func (cs *closers) add(f func()) { *cs = append(*cs, f) }

func (cs closers) close() {
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// loadLocal loads the shards into this process. The load does not watch
// ctx; a signal ends the wait for it (the process exits after), so
// Ctrl-C does not wait out the load of a large file.
func loadLocal(ctx context.Context, train string, opt *backendOptions, ranges []input.Range, id input.FileID, shared *shard.Shared) (*objective.Local, error) {
	type loaded struct {
		shards []*shard.Shard
		err    error
	}
	done := make(chan loaded, 1)
	go func() {
		shards, err := shard.LoadChecked(train, ranges, shard.Options{Parallel: opt.workers, Shared: shared}.Compacted(opt.compact), id)
		done <- loaded{shards, err}
	}()
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("loading %s: %w", train, ctx.Err())
	case l := <-done:
		if l.err != nil {
			return nil, l.err
		}
		return objective.NewLocal(l.shards, opt.workers).Summed(), nil
	}
}

// openCluster connects to the NATS server (the embedded one, with
// in-process workers, without -nats), waits for the workers and has them
// load their shards. What it opens is added to cs, closed by the caller.
func openCluster(ctx context.Context, train string, opt *backendOptions, ranges []input.Range, id input.FileID, shared *shard.Shared, log *zap.Logger, cs *closers) (*cluster.Cluster, *nats.Conn, error) {
	url, cfg := opt.natsURL, opt.cluster
	var inProcess []nats.Option
	if url == "" {
		var err error
		if url, inProcess, err = embedded(opt, log, cs); err != nil {
			return nil, nil, err
		}
		cfg.MinWorkers = 1
	}
	auth, err := opt.auth.FromEnv()
	if err != nil {
		return nil, nil, err
	}
	nc, between, err := transport.ConnectNear(ctx, url, opt.near, "coordinator", auth, log, inProcess...)
	if err != nil {
		return nil, nil, err
	}
	cs.add(nc.Close)
	if err := transport.WaitConnected(ctx, nc, 30*time.Second); err != nil {
		return nil, nil, err
	}
	abs := train // an s3:// URL reads the same from every host
	if !s3.IsURL(abs) {
		if abs, err = filepath.Abs(train); err != nil {
			return nil, nil, err
		}
	}
	cfg.Ranges, cfg.Stop, cfg.Log, cfg.BetweenRounds = ranges, ctx.Done(), log, between
	c, err := cluster.New(nc, cfg)
	if err != nil {
		return nil, nil, err
	}
	cs.add(c.Close)
	if opt.natsURL == "" {
		// In-process workers speak the same protocol over the embedded
		// server: one code path for a laptop and a cluster.
		stopWorkers, err := startWorker(ctx, url, opt.workers, opt.compact, shared, inProcess, log)
		if err != nil {
			return nil, nil, err
		}
		cs.add(stopWorkers)
	}
	src := wire.Source{Path: abs, File: id}
	if opt.objectStore {
		if src, err = publish(ctx, train, nc, c.Job(), ranges, opt.storeReplicas, log, cs); err != nil {
			return nil, nil, err
		}
	}
	c.SetSource(src)
	if err := c.Load(ctx); err != nil {
		return nil, nil, err
	}
	return c, nc, nil
}

// embedded starts the NATS server in this process, with JetStream only
// for -objstore, and returns its URL and the clients' in-process option:
// they talk to it through memory, not the loopback device.
func embedded(opt *backendOptions, log *zap.Logger, cs *closers) (string, []nats.Option, error) {
	dir := ""
	if opt.objectStore {
		var err error
		if dir, err = os.MkdirTemp("", "osgm-nats-*"); err != nil {
			return "", nil, err
		}
		cs.add(func() { os.RemoveAll(dir) })
	}
	srv, err := transport.Embedded(dir)
	if err != nil {
		return "", nil, err
	}
	cs.add(srv.Shutdown)
	log.Info("embedded NATS server", zap.String("url", srv.ClientURL()), zap.Int("goroutines", opt.workers))
	return srv.ClientURL(), []nats.Option{nats.InProcessServer(srv)}, nil
}

// publish puts the shards' text in the object store under the job's
// prefix, to be deleted when the backend closes.
func publish(ctx context.Context, train string, nc *nats.Conn, job uint64, ranges []input.Range, replicas int, log *zap.Logger, cs *closers) (wire.Source, error) {
	src := wire.Source{Bucket: wire.ShardBucket, Prefix: objectPrefix(job)}
	start := time.Now()
	n, err := transport.PublishShards(ctx, nc, src, train, ranges, replicas, log)
	if transport.NoJetStream(err) {
		return src, fmt.Errorf("-objstore needs JetStream on the NATS server (nats-server -js, or a jetstream block in its configuration): %w", err)
	}
	if err != nil {
		transport.DeleteShards(context.Background(), nc, src, ranges) // those put before it failed
		return src, err
	}
	cs.add(func() { transport.DeleteShards(context.Background(), nc, src, ranges) })
	log.Info("shards published to the object store", zap.String("bucket", src.Bucket), zap.String("prefix", src.Prefix),
		zap.Int64("bytes", n), zap.Duration("took", time.Since(start)))
	return src, nil
}

// startWorker starts the worker in this process, with parallel
// goroutines evaluating its shards, on the embedded server at url.
//
// One worker with every core, not one per core: its goroutines share the
// shards, so none waits on a slower sibling's static share, and a
// worker's sums are one dense vector per level of its tree whatever its
// shards (on a 1 M-feature file, two workers held 90 MB more than one,
// and sent the coordinator two sums to add instead of one). Goroutines
// beyond the cores preempt each other mid-shard, and the partials after a
// preempted shard wait for it (a worker sums in shard order), so parallel
// is the cores by default.
func startWorker(ctx context.Context, url string, parallel int, compact shard.Compaction, shared *shard.Shared, opts []nats.Option, log *zap.Logger) (stop func(), err error) {
	nc, err := transport.Connect(url, "worker-0", transport.Auth{}, zap.NewNop(), opts...)
	if err != nil {
		return nil, err
	}
	// Its warnings and errors go to the coordinator's log: a message it
	// drops would otherwise leave the round's "see their logs" with no
	// logs to see. A log already quieter than that (-q) keeps its level:
	// zap refuses to lower one, and says so on stderr.
	wlog := log.Named("local0")
	if zapcore.LevelOf(log.Core()) < zap.WarnLevel {
		wlog = wlog.WithOptions(zap.IncreaseLevel(zap.WarnLevel))
	}
	w := worker.New(nc, worker.Config{Name: "local0", Parallel: parallel, Compact: compact, Shared: shared, Log: wlog})
	// The worker outlives a SIGINT or SIGTERM, which ends ctx: the round
	// under way completes and the state after it is saved, then stop ends
	// it.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		w.Run(wctx)
		nc.Close()
		close(done)
	}()
	return func() { cancel(); <-done }, nil
}

// objectPrefix is where a job's shards go in the object store.
func objectPrefix(job uint64) string { return fmt.Sprintf("%016x", job) }
