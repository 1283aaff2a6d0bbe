package cluster

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/nats-io/nats.go"

	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/train"
	"github.com/osgm-svm/osgm/pkg/transport/worker"
)

// bandedData writes rows whose features lie in a band that moves with
// the row, as text sorted by topic does: row i of rows draws from the 80
// features after 4(i·80/rows), one time in four. With step 2 only even
// features occur, so half the coordinates are dead.
func bandedData(t testing.TB, rows, classes, step int) string {
	rng := rand.New(rand.NewPCG(11, uint64(classes*step)))
	var b strings.Builder
	for i := range rows {
		fmt.Fprintf(&b, "%d", 1+rng.IntN(classes))
		base := 4 * (i * 80 / rows)
		for j := base + step; j <= base+80; j += step {
			if rng.Float64() < 0.25 {
				fmt.Fprintf(&b, " %d:%.3f", j, rng.NormFloat64())
			}
		}
		b.WriteString("\n")
	}
	path := filepath.Join(t.TempDir(), "banded")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestOwnPointsKeepTheBits: workers sent only the columns their shards
// touch train the model trained without a bus, to the bit, for every kind
// of round: Newton's Hessian-vector rounds without x (also when a worker
// lost the point they refer to), newton-full's rounds that bring the
// whole Hessian (which go out whole), multi-class rounds over live
// coordinates. A worker that stops in the middle hands its shards to
// the others, whose own points lack their columns: the round goes out
// whole, once the shards change hands or a worker asks. The server sends
// on fewer bytes than a broadcast would.
func TestOwnPointsKeepTheBits(t *testing.T) {
	for _, c := range []struct {
		classes, step, workers int
		method                 string
		forget                 int
		stop                   bool
	}{
		{2, 1, 4, "newton", 0, false},
		{2, 1, 4, "newton", 1, false},
		{2, 2, 4, "newton-full", 0, false},
		{3, 2, 4, "lbfgs", 0, false},
		{3, 1, 3, "lbfgs", 0, true},
		{2, 2, 3, "newton", 0, true},
	} {
		name := fmt.Sprintf("%d classes step %d %d workers %s forget=%d stop=%v", c.classes, c.step, c.workers, c.method, c.forget, c.stop)
		t.Run(name, func(t *testing.T) {
			path := bandedData(t, 4000, c.classes, c.step)
			cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: c.method, MaxIter: 300}, Eps: 1e-3}}
			want := localModel(t, path, 16, cfg)
			first := true
			core, logs := observer.New(zap.InfoLevel)
			stop := make(chan struct{})
			defer time.AfterFunc(20*time.Second, func() { close(stop) }).Stop()
			cl, _, stops := startCluster(t, path, c.workers, 16, clusterOptions{parallel: 1, config: func(cfg *Config) {
				// A round that waited for a resend would stop.
				cfg.Points, cfg.ResendAfter, cfg.Stop, cfg.Log = PointsOwn, time.Hour, stop, zap.New(core)
			}}, func(nc *nats.Conn, wc *worker.Config) {
				if first {
					wc.Bus, first = &forgetfulBus{Conn: nc, n: c.forget}, false
				}
			})
			if c.stop {
				cfg.Trace = stopAt(2, stops[1])
			}
			res, err := train.Train(cl, cfg)
			if err != nil {
				t.Fatal(err)
			}
			sameModel(t, res, want)
			st := cl.Stats()
			if c.method == "newton" && st.WithoutX == 0 {
				t.Fatal("no Hessian-vector round went without x")
			}
			whole := logs.FilterMessage("broadcasting the point whole").Len()
			if c.stop && (st.Reassignments == 0 || whole == 0) {
				t.Fatalf("%d reassignments, %d whole points", st.Reassignments, whole)
			}
			if !c.stop && (whole != c.forget || st.Resends != c.forget) {
				t.Fatalf("%d whole points, %d broadcasts again after %d forgotten points", whole, st.Resends, c.forget)
			}
			if st.BytesToWorkers >= int64(c.workers)*st.BytesDown*3/4 {
				t.Fatalf("%d bytes to workers for %d sent: own points save little", st.BytesToWorkers, st.BytesDown)
			}
			sameTally(t, cl, path, 16, res)
		})
	}
}

// TestPointsAuto: with each worker sending its own sums, own points go
// out when the workers' columns add up to at most half of what a
// broadcast sends them: on the banded data at four workers (each touches
// about 0.4 of the columns), not at two (0.6). Along the workers' tree,
// whose sums are over the broadcast's coordinates, points are broadcast.
func TestPointsAuto(t *testing.T) {
	path := bandedData(t, 4000, 2, 1)
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "lbfgs", MaxIter: 50}, Eps: 1e-3}}
	want := localModel(t, path, 16, cfg)
	for _, c := range []struct {
		workers int
		reduce  ReduceMode
		own     bool
	}{{2, ReduceStar, false}, {4, ReduceStar, true}, {4, ReduceTree, false}} {
		t.Run(fmt.Sprint(c.workers, " workers ", c.reduce), func(t *testing.T) {
			cl, _, _ := startCluster(t, path, c.workers, 16, clusterOptions{parallel: 1, config: func(cfg *Config) { cfg.Reduce = c.reduce }})
			res, err := train.Train(cl, cfg)
			if err != nil {
				t.Fatal(err)
			}
			sameModel(t, res, want)
			st := cl.Stats()
			broadcast := st.BytesToWorkers == int64(c.workers)*st.BytesDown
			if own := st.BytesToWorkers == st.BytesDown && !broadcast; own != c.own {
				t.Fatalf("own points %v (%d bytes sent, %d to workers), want %v", own, st.BytesDown, st.BytesToWorkers, c.own)
			}
		})
	}
}

// stopAt is a trace that stops a worker, as SIGTERM does, at the given
// record of training.
func stopAt(record int, stop func()) func(osgm.Record) {
	n := 0
	return func(osgm.Record) {
		if n++; n == record {
			stop()
		}
	}
}

// TestOwnPointsReachAnIdleWorker: with more workers than shards one
// holds nothing, so a round of own points goes out without it. When a
// worker that holds a shard stops in the middle of training, its shard
// moves to the idle one, which has no point of the round to evaluate it
// at: once the shard has changed hands the round goes out whole, instead
// of waiting for a resend (an hour here).
func TestOwnPointsReachAnIdleWorker(t *testing.T) {
	path := bandedData(t, 4000, 2, 1)
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "lbfgs", MaxIter: 300}, Eps: 1e-6}}
	want := localModel(t, path, 2, cfg)
	stop := make(chan struct{})
	defer time.AfterFunc(20*time.Second, func() { close(stop) }).Stop()
	cl, _, stops := startCluster(t, path, 3, 2, clusterOptions{parallel: 1, config: func(cfg *Config) {
		cfg.Points, cfg.ResendAfter, cfg.Stop = PointsOwn, time.Hour, stop
	}})
	var victim int // a worker's ID begins with its name, t and its index
	if _, err := fmt.Sscanf(cl.core.owner[0], "t%d-", &victim); err != nil {
		t.Fatal(err)
	}
	cfg.Trace = stopAt(3, stops[victim])
	res, err := train.Train(cl, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sameModel(t, res, want)
	if st := cl.Stats(); st.Reassignments == 0 || st.BytesToWorkers >= 2*st.BytesDown {
		t.Fatalf("%d reassignments; %d bytes to workers for %d sent", st.Reassignments, st.BytesToWorkers, st.BytesDown)
	}
}
