// Command worker holds shards of a training job and evaluates them for a
// coordinator over NATS:
//
//	worker [-nats URL] [-name NAME] [-parallel N] [-memprofile FILE]
//
// The coordinator tells it which byte ranges of which file to load (the
// file must be at the same path on every host) or which objects of a
// JetStream object store to read.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"

	"go.uber.org/zap"

	"github.com/nats-io/nats.go"
	"github.com/osgm-svm/osgm/internal/cli"
	"github.com/osgm-svm/osgm/pkg/logging"
	"github.com/osgm-svm/osgm/pkg/memory"
	"github.com/osgm-svm/osgm/pkg/metrics"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/transport"
	"github.com/osgm-svm/osgm/pkg/transport/worker"
)

func main() {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	url := fs.String("nats", envOr("NATS_URL", "nats://127.0.0.1:4222"), "NATS server URL, or a cluster's URLs comma-separated (or NATS_URL)")
	near := fs.String("near", os.Getenv("NATS_NEAR"), "with a cluster's URLs, connect first to the server on this host, the one named NAME@HOST, as deploy/stack.cluster.yaml names them (or NATS_NEAR)")
	name := fs.String("name", envOr("WORKER_NAME", hostname()), "worker name, shown in the coordinator's log")
	parallel := fs.Int("parallel", runtime.NumCPU(), "goroutines evaluating shards")
	quiet := fs.Bool("q", false, "quiet: only errors")
	var compact shard.Compaction
	fs.Var(&compact, "compact", "store values as 1- or 2-byte codes where a shard has few distinct ones, and wide shards' column ids in 3 bytes: less memory, passes 10-30% slower, the same results (true, false, or auto: when plain shards would take more than 2/3 of the free memory, or more than 1 GiB)")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus metrics at this address; off by default")
	check := fs.Bool("check", false, "connect, check that the server accepts the credentials, and exit (compose runs this before the workers)")
	memProfile := fs.String("memprofile", "", "write a heap profile (pprof) to this file on SIGUSR1 (a worker keeps the last job's shards until a job over another file comes)")
	var auth transport.Auth
	auth.Flags(fs)
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: worker [options]\n\nOptions:\n")
		fs.VisitAll(func(f *flag.Flag) { cli.PrintFlag(w, f) })
		fmt.Fprintf(w, "\nSecrets come from the environment: NATS_USER, NATS_PASSWORD, NATS_TOKEN,\n"+
			"or from files: NATS_PASSWORD_FILE, NATS_TOKEN_FILE (Docker's secrets).\n"+
			"Example: NATS_URL=nats://nats:4222 worker -name w1\n")
	}
	if err := cli.Parse(fs, os.Args[1:], usage); err != nil {
		cli.Exit("worker", err)
	}
	if fs.NArg() > 0 {
		cli.Exit("worker", fmt.Errorf("unexpected argument %q (the coordinator says what to load)", fs.Arg(0)))
	}
	if *parallel < 1 {
		cli.Exit("worker", errors.New("-parallel must be at least 1"))
	}
	memory.TuneGC()
	log := logging.New(*quiet)
	defer log.Sync()
	// A secret's file that cannot be read is the deployment's fault, not
	// the command line's: logged as any failure to start, no usage hint.
	secrets, err := auth.FromEnv()
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		os.Exit(1)
	}
	if *check {
		if err := transport.CheckConnect(*url, "worker check "+*name, secrets, log); err != nil {
			log.Error("check failed", zap.Error(err))
			os.Exit(1)
		}
		log.Info("check passed", zap.String("nats", *url))
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nc, between, err := transport.ConnectNear(ctx, *url, *near, "worker "+*name, secrets, log)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		os.Exit(1)
	}
	defer nc.Close()
	cfg := worker.Config{Name: *name, Parallel: *parallel, Compact: compact, Log: log, BetweenRounds: between}
	if *metricsAddr != "" {
		cfg.Metrics = metrics.NewWorker()
		defer serveMetrics(*metricsAddr, cfg.Metrics, nc, log)()
	}
	if *memProfile != "" {
		profileOnSignal(*memProfile, log)
	}
	w := worker.New(nc, cfg)
	if err := w.Run(ctx); err != nil {
		log.Error("worker stopped", zap.Error(err))
		os.Exit(1)
	}
}

// serveMetrics serves m and /healthz at addr, or exits; it returns the
// server's stop. The worker is ready while connected to NATS: an
// orchestrator's readiness probe then says when it is cut off.
func serveMetrics(addr string, m *metrics.Worker, nc *nats.Conn, log *zap.Logger) func() {
	bound, stop, err := metrics.Serve(addr, m.Registry, func() error {
		if !nc.IsConnected() {
			return fmt.Errorf("not connected to NATS (%s)", nc.Status())
		}
		return nil
	})
	if err != nil {
		log.Error("cannot serve metrics", zap.Error(err))
		os.Exit(1)
	}
	log.Info("metrics", zap.String("url", "http://"+bound+"/metrics"))
	return stop
}

// profileOnSignal writes a heap profile to path at every SIGUSR1.
func profileOnSignal(path string, log *zap.Logger) {
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			writeHeapProfile(path, log)
		}
	}()
}

// writeHeapProfile records what is live: during a job, the shards and
// every feature-sized buffer the rounds keep.
func writeHeapProfile(path string, log *zap.Logger) {
	f, err := os.Create(path)
	if err == nil {
		runtime.GC()
		err = errors.Join(pprof.WriteHeapProfile(f), f.Close())
	}
	if err != nil {
		log.Error("cannot write the heap profile", zap.Error(err))
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}
