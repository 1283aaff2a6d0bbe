package cluster

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/nats-io/nats.go"

	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/train"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
	"github.com/osgm-svm/osgm/pkg/transport/worker"
)

// TestTreeModelsForAnyWorkerCount: along the workers' tree the
// coordinator receives one sum a round, from 1, 2, 3 or 8 workers, and
// the model is the in-process one to the bit.
func TestTreeModelsForAnyWorkerCount(t *testing.T) {
	path := testData(t)
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "newton", MaxIter: 300}, Eps: 1e-3}}
	want := localModel(t, path, 64, cfg)
	for _, workers := range []int{1, 2, 3, 8} {
		t.Run(fmt.Sprint(workers), func(t *testing.T) {
			c, _, _ := startCluster(t, path, workers, 64, clusterOptions{parallel: 1, config: func(c *Config) { c.Reduce = ReduceTree }})
			got, err := train.Train(c, cfg)
			if err != nil {
				t.Fatal(err)
			}
			sameModel(t, got, want)
			st := c.Stats()
			// One worker holds the whole tree and sends its root as it is.
			treeRounds := st.Rounds
			if workers == 1 {
				treeRounds = 0
			}
			if st.TreeRounds != treeRounds || st.ResultsUp != st.Rounds || st.Resends > 0 {
				t.Fatalf("%d rounds, %d along the tree, %d results, %d resends", st.Rounds, st.TreeRounds, st.ResultsUp, st.Resends)
			}
			// Eight groups: the longest chain is a worker's group sum to
			// the adder of its node, and so on up, then to the coordinator.
			if maxHops := min(workers, 4); workers > 1 && (st.Hops < 2 || st.Hops > maxHops) {
				t.Fatalf("%d hops with %d workers", st.Hops, workers)
			}
		})
	}
}

// TestTreeRoundsSurviveAnAdder: a worker that adds an inner node of the
// tree is lost mid-round, once partitioned (the sums it relays are lost,
// its heartbeats go on) and once killed when the first sum reaches it.
// The round goes out again, every worker sends its own sums here, and
// the model is the in-process one to the bit.
func TestTreeRoundsSurviveAnAdder(t *testing.T) {
	path := testData(t)
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "lbfgs", MaxIter: 300}, Eps: 1e-3}}
	want := localModel(t, path, 64, cfg)
	// Node 2/1 (groups 4-7, shards 32-63) is added by shard 32's owner,
	// which gets node 1/3's sum (groups 6-7) from another worker and
	// sends node 2/1's on to the root's adder.
	inner, right := reduce.NodeID{Level: 2, Index: 1}, reduce.NodeID{Level: 1, Index: 3}
	for _, fault := range []string{"partitioned", "killed"} {
		t.Run(fault, func(t *testing.T) {
			var done atomic.Bool
			setup := func(nc *nats.Conn, wc *worker.Config) {
				out := &losing{rule: func(h wire.Header) bool {
					return fault == "partitioned" && h.Kind == wire.KindRelayNode && h.Shard == inner.Wire() && h.Round >= 3 && done.CompareAndSwap(false, true)
				}}
				in := &losing{rule: func(h wire.Header) bool {
					if fault == "killed" && h.Kind == wire.KindRelayNode && h.Shard == right.Wire() && h.Round >= 3 && done.CompareAndSwap(false, true) {
						go nc.Close()
						return true
					}
					return false
				}}
				onFaultyBus(nc, wc, out, in)
			}
			cl, _, _ := startCluster(t, path, 4, 64, clusterOptions{parallel: 1, config: func(cfg *Config) {
				cfg.HeartbeatTimeout, cfg.ResendAfter, cfg.Reduce = time.Hour, 300*time.Millisecond, ReduceTree
			}}, setup)
			core, logs := observer.New(zap.InfoLevel)
			cl.core.log = zap.New(core)
			start := time.Now()
			got, err := train.Train(cl, cfg)
			if err != nil {
				t.Fatal(err)
			}
			sameModel(t, got, want)
			st := cl.Stats()
			if !done.Load() || st.Resends == 0 || st.TreeRounds >= st.Rounds {
				t.Fatalf("fault %v; %d resends, %d of %d rounds along the tree", done.Load(), st.Resends, st.TreeRounds, st.Rounds)
			}
			if fault == "killed" && logs.FilterMessage("worker lost").Len() != 1 {
				t.Fatalf("lost: %v", logs.FilterMessage("worker lost").All())
			}
			t.Logf("%s: %d rounds (%d along the tree, %d resends) in %v", fault, st.Rounds, st.TreeRounds, st.Resends, time.Since(start))
		})
	}
}

// TestReduceAuto: by default rounds go along the workers' tree when their
// own sums would bring the coordinator more than twice the bytes of the
// tree's longest chain: on the test data, whose 60 features are in every
// shard, from 16 workers (960 columns against 2 x 5 hops x 61), not at 2
// (120 against 2 x 2 x 61).
func TestReduceAuto(t *testing.T) {
	path := testData(t)
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "lbfgs", MaxIter: 300}, Eps: 1e-3}}
	want := localModel(t, path, 64, cfg)
	for _, c := range []struct {
		workers int
		tree    bool
	}{{2, false}, {16, true}} {
		t.Run(fmt.Sprint(c.workers), func(t *testing.T) {
			cl, _, _ := clusterWithStops(t, path, c.workers, 64)
			got, err := train.Train(cl, cfg)
			if err != nil {
				t.Fatal(err)
			}
			sameModel(t, got, want)
			st := cl.Stats()
			if tree := st.TreeRounds == st.Rounds; tree != c.tree || (!tree && st.TreeRounds > 0) {
				t.Fatalf("%d of %d rounds along the tree, want all: %v", st.TreeRounds, st.Rounds, c.tree)
			}
		})
	}
}
