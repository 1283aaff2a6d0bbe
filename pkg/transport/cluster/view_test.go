package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/osgm-svm/osgm/internal/natstest"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/train"
	"github.com/osgm-svm/osgm/pkg/transport/worker"
)

// TestWorkersView: the coordinator's view of its workers, for a status
// page, as their heartbeats tell it: every worker ready with its shards
// and rows, and after rounds the rounds it answered, its bytes both ways,
// its host and its memory; a stopped worker is shown left, its shards
// with the other.
func TestWorkersView(t *testing.T) {
	path := testData(t)
	c, _, stops := startCluster(t, path, 2, 8, clusterOptions{parallel: 1}, func(nc *nats.Conn, wc *worker.Config) { wc.Heartbeat = 50 * time.Millisecond })
	if _, err := train.Train(c, train.Config{Problem: train.Problem{C: 1}, Settings: train.Settings{Options: osgm.Options{MaxIter: 20, Method: "lbfgs"}, Eps: 1e-3}}); err != nil {
		t.Fatal(err)
	}
	sum := shard.Summarize(c.Meta(), shard.SquaredHinge)
	o := objective.New(c, int(sum.MaxIndex), 1, 1)
	x, f, g := [][]float64{make([]float64, sum.MaxIndex+1)}, make([]float64, 1), [][]float64{make([]float64, sum.MaxIndex+1)}
	view := func() []WorkerView { // a round handles the heartbeats queued
		if err := o.Eval(x, f, g); err != nil {
			t.Fatal(err)
		}
		return c.Workers()
	}
	natstest.WaitFor(t, 10*time.Second, "both workers' counters", func() bool {
		v := view()
		return len(v) == 2 && v[0].Rounds > 0 && v[1].Rounds > 0
	})
	v := view()
	var shards []int
	for _, w := range v {
		if w.State != "ready" || w.Host == "" || w.RSS <= 0 || w.BytesIn <= 0 || w.BytesOut <= 0 || w.LastSeen.IsZero() {
			t.Fatalf("worker %+v", w)
		}
		shards = append(shards, w.Shards...)
	}
	slices.Sort(shards)
	if !slices.Equal(shards, []int{0, 1, 2, 3, 4, 5, 6, 7}) || v[0].Rows+v[1].Rows != sum.Rows {
		t.Fatalf("shards %v, rows %d + %d, want 0-7 and %d", shards, v[0].Rows, v[1].Rows, sum.Rows)
	}
	stops[1]()
	natstest.WaitFor(t, 10*time.Second, "the stopped worker left, its shards moved", func() bool {
		v := view()
		return v[1].State == "left" && len(v[1].Shards) == 0 && len(v[0].Shards) == 8
	})
}
