package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/osgm-svm/osgm/internal/natstest"
	"github.com/osgm-svm/osgm/internal/svmdata"
	"github.com/osgm-svm/osgm/internal/testport"
	"github.com/osgm-svm/osgm/pkg/cols"
	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/train"
	"github.com/osgm-svm/osgm/pkg/transport"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
	"github.com/osgm-svm/osgm/pkg/transport/worker"
)

// testData writes a random 3-class data set.
func testData(t *testing.T) string {
	return svmdata.WriteFile(t, svmdata.Stepped(rand.New(rand.NewPCG(5, 6)), 3000, 3, 1, 60))
}

// cluster starts an embedded server, n in-process workers and a Cluster
// backend over the file's shards.
func cluster(t *testing.T, path string, n, shards int) (*Cluster, *nats.Conn) {
	c, intruder, _ := clusterWithStops(t, path, n, shards)
	return c, intruder
}

// clusterWithStops is cluster that also returns a function per worker
// that stops it as SIGTERM stops a worker process: it says it leaves and
// its connection closes. (e2e's TestWorkerKilled kills one outright.)
func clusterWithStops(t *testing.T, path string, n, shards int, setup ...workerSetup) (*Cluster, *nats.Conn, []func()) {
	return startCluster(t, path, n, shards, clusterOptions{parallel: 1}, setup...)
}

// clusterOptions are startCluster's choices beyond the data.
type clusterOptions struct {
	// inProcess and parallel are the coordinator's choices for its own
	// workers: connections through memory, goroutines per worker.
	inProcess bool
	parallel  int
	// server, when set, is the server to use (a new embedded one
	// otherwise); coordinator and worker are options of those
	// connections.
	server              *server.Server
	coordinator, worker []nats.Option
	// servers, when set, are a NATS cluster's: the coordinator connects
	// to the first and worker i to the (i+1)th, round the list, each
	// failing over to the others in turn.
	servers []*server.Server
	// coordinatorURL, when set, is the coordinator's server list.
	coordinatorURL string
	config         func(*Config) // changes the test's defaults
}

// workerSetup changes a worker's configuration before it starts, given
// its connection.
type workerSetup func(nc *nats.Conn, cfg *worker.Config)

// startCluster starts n in-process workers and a Cluster backend over the
// file's shards, with the bus as o says.
func startCluster(t testing.TB, path string, n, shards int, o clusterOptions, setup ...workerSetup) (*Cluster, *nats.Conn, []func()) {
	srv := o.server
	if srv == nil && len(o.servers) > 0 {
		srv = o.servers[0]
	}
	if srv == nil {
		var err error
		if srv, err = transport.Embedded(t.TempDir()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Shutdown)
	}
	var opts []nats.Option
	if o.inProcess {
		opts = append(opts, nats.InProcessServer(srv))
	}
	url := func(int) string { return srv.ClientURL() }
	if len(o.servers) > 0 {
		url = func(at int) string { return natstest.URLs(o.servers, at) }
		opts = append(opts, nats.DontRandomize())
	}
	if o.coordinatorURL != "" {
		others := url
		url = func(at int) string {
			if at == 0 {
				return o.coordinatorURL
			}
			return others(at)
		}
	}
	// connect connects the at-th client (0: the coordinator).
	connect := func(name string, at int, extra ...nats.Option) *nats.Conn {
		nc, err := transport.Connect(url(at), name, transport.Auth{}, zap.NewNop(), append(slices.Clone(extra), opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		if err := transport.WaitConnected(context.Background(), nc, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		return nc
	}
	info, err := input.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := input.Identify(path)
	cfg := Config{Ranges: input.Layout(info.Size, shards), MinWorkers: n,
		Source: wire.Source{Path: path, File: id}, HeartbeatTimeout: 2 * time.Second, ResendAfter: 500 * time.Millisecond}
	if o.config != nil {
		o.config(&cfg)
	}
	c, err := New(connect("coordinator", 0, o.coordinator...), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait(); c.Close() })
	var stops []func()
	for i := 0; i < n; i++ {
		nc := connect("worker", i+1, o.worker...)
		wcfg := worker.Config{Name: fmt.Sprint("t", i), Parallel: o.parallel}
		for _, f := range setup {
			f(nc, &wcfg)
		}
		w := worker.New(nc, wcfg)
		wctx, wcancel := context.WithCancel(ctx)
		wg.Add(1)
		go func() { defer wg.Done(); w.Run(wctx); nc.Close() }()
		stops = append(stops, wcancel)
	}
	lctx, lcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer lcancel()
	if err := c.Load(lctx); err != nil {
		t.Fatal(err)
	}
	return c, connect("intruder", 0), stops
}

// TestCrossValidationSurvivesAWorkerLoss: a worker dies in the middle of
// -v 3; its shards move to the other, which numbers their rows' folds from
// the point message, and the held-out counts are the in-process ones.
func TestCrossValidationSurvivesAWorkerLoss(t *testing.T) {
	path := testData(t)
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1, Weights: []train.ClassWeight{{Label: 2, Weight: 3}}}, Settings: train.Settings{Options: osgm.Options{MaxIter: 300}, Eps: 1e-4}}
	want, err := train.CrossValidate(objective.NewLocal(loadShards(t, path, 16), 2), cfg, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Own points carry the folds as broadcasts do.
	for _, points := range []PointMode{PointsBroadcast, PointsOwn} {
		t.Run(points.String(), func(t *testing.T) {
			c, _, stops := startCluster(t, path, 2, 16, clusterOptions{parallel: 1, config: func(cfg *Config) { cfg.Points = points }})
			killed, records := false, 0
			cfg := cfg
			cfg.Trace = func(osgm.Record) {
				if records++; !killed && records == 10 { // in the first fold
					killed = true
					stops[1]()
				}
			}
			got, err := train.CrossValidate(c, cfg, 3, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !killed || c.Stats().Reassignments == 0 {
				t.Fatalf("no worker was lost (killed %v, reassignments %d)", killed, c.Stats().Reassignments)
			}
			if !slices.Equal(got.Tally.Rows, want.Tally.Rows) || !slices.Equal(got.Tally.Correct, want.Tally.Correct) {
				t.Fatalf("cluster tally %+v, in-process %+v", got.Tally, want.Tally)
			}
			for f := range want.Models {
				for k := range want.Models[f].W {
					if !slices.Equal(got.Models[f].W[k], want.Models[f].W[k]) {
						t.Fatalf("fold %d: model differs from the in-process one", f+1)
					}
				}
			}
		})
	}
}

// loadShards loads path into n shards in this process.
func loadShards(t testing.TB, path string, n int) []*shard.Shard {
	t.Helper()
	info, err := input.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	shards, err := shard.Load(path, input.Layout(info.Size, n), shard.Options{Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	return shards
}

// localModel trains in process, without a bus, over n shards.
func localModel(t *testing.T, path string, n int, cfg train.Config) []float64 {
	t.Helper()
	res, err := train.Train(objective.NewLocal(loadShards(t, path, n), 2), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return flatten(res.Model.W)
}

// sameModel fails unless res's weights are want's to the bit.
func sameModel(t *testing.T, res *train.Result, want []float64) {
	t.Helper()
	for j, v := range flatten(res.Model.W) {
		if math.Float64bits(v) != math.Float64bits(want[j]) {
			t.Fatalf("weight %d differs from the model trained without a bus", j)
		}
	}
}

// sameTally fails unless the cluster counts res's correct predictions as
// the file's shards in this process do (and some are correct).
func sameTally(t *testing.T, c *Cluster, path string, shards int, res *train.Result) {
	t.Helper()
	tally, err := c.Tally(res.Obj.ModelPoint(res.Model.W))
	if err != nil {
		t.Fatal(err)
	}
	local := objective.NewLocal(loadShards(t, path, shards), 1)
	local.SetClasses(shard.LabelOrder(shard.Summarize(local.Meta(), shard.SquaredHinge).Labels))
	if want, _ := local.Tally(res.Obj.ModelPoint(res.Model.W)); !slices.Equal(tally.Rows, want.Rows) ||
		!slices.Equal(tally.Correct, want.Correct) || want.Correct[0] == 0 {
		t.Fatalf("cluster tallies %+v, in-process %+v", tally, want)
	}
}

func flatten(w [][]float64) []float64 {
	var out []float64
	for _, v := range w {
		out = append(out, v...)
	}
	return out
}

// TestWorkersSendNodeSums: 64 shards make 8 groups and a tree of height
// 3; two workers given four whole groups each send one node sum per round
// each, and the model is the in-process one to the bit. Newton adds
// Hessian-vector rounds and evaluations that carry the Hessian's diagonal
// (partials of twice the problems); newton-full, rounds that carry whole
// Hessians. Workers sum their nodes in dense vectors on the test data,
// whose 60 features are in nearly every shard, and in the shards' own
// columns on wide data, whose shards touch few of its 4,000 (too many for
// whole Hessians).
func TestWorkersSendNodeSums(t *testing.T) {
	for _, data := range []struct {
		name  string
		path  string
		dense bool
	}{
		{"dense", testData(t), true},
		{"sparse", wideClasses(t, rand.New(rand.NewPCG(11, 12)), 3000, 4000), false},
	} {
		cols := map[int]cols.List{}
		for _, s := range loadShards(t, data.path, 64)[:32] {
			cols[s.ID] = s.Cols
		}
		if d := reduce.NewDenseSum(64, cols); (d != nil && d.Pays()) != data.dense {
			t.Fatalf("%s data: dense sums pay: %v, want %v: this test would not cover both", data.name, !data.dense, data.dense)
		}
		for _, method := range []string{"lbfgs", "newton", "newton-full"} {
			for _, mode := range []ReduceMode{ReduceTree, ReduceStar} {
				if method == "newton-full" && !data.dense {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/%v", method, data.name, mode), func(t *testing.T) {
					workersSendNodeSums(t, data.path, method, mode)
				})
			}
		}
	}
}

// wideClasses writes rows with labels 1 to 3, each with three of
// features 1 to 10 and five of features 11 to width+10.
func wideClasses(t testing.TB, rng *rand.Rand, rows, width int) string {
	var b strings.Builder
	for i := 0; i < rows; i++ {
		class := rng.IntN(3)
		fmt.Fprintf(&b, "%d", class+1)
		picks := rng.Perm(10)[:3]
		for range 5 {
			picks = append(picks, 10+rng.IntN(width))
		}
		slices.Sort(picks)
		for _, j := range slices.Compact(picks) {
			fmt.Fprintf(&b, " %d:%.3f", j+1, rng.NormFloat64()+float64(class)/2)
		}
		b.WriteString("\n")
	}
	path := filepath.Join(t.TempDir(), "wide")
	os.WriteFile(path, []byte(b.String()), 0o644)
	return path
}

func workersSendNodeSums(t *testing.T, path, method string, mode ReduceMode) {
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: method, MaxIter: 300}, Eps: 1e-3}}
	want := localModel(t, path, 64, cfg)
	c, _, _ := startCluster(t, path, 2, 64, clusterOptions{parallel: 1, config: func(c *Config) { c.Reduce = mode }})
	before := c.Stats()
	got, err := train.Train(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	rounds, results, tree := st.Rounds-before.Rounds, st.ResultsUp-before.ResultsUp, st.TreeRounds-before.TreeRounds
	// Along the tree the root alone comes here, two hops from the worker
	// that sent its other half.
	perRound, hops := 2, 0
	if mode == ReduceTree {
		perRound, hops = 1, 2
	}
	if rounds == 0 || results != perRound*rounds || tree != (perRound%2)*rounds || st.Hops != hops {
		t.Fatalf("%d result messages in %d rounds (%d along the tree, %d hops), want %d per round", results, rounds, tree, st.Hops, perRound)
	}
	sameModel(t, got, want)
}

// TestHessVecPointsGoWithoutX: Newton's CG steps at an x after its
// evaluation go out without x. A worker that does not hold that x (here
// one that forgets its point, as when it missed a round) asks for it, and
// the coordinator broadcasts the point with x at once, not after
// ResendAfter; the model is the one trained without a bus either way.
func TestHessVecPointsGoWithoutX(t *testing.T) {
	path := testData(t)
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "newton", MaxIter: 300}, Eps: 1e-3}}
	want := localModel(t, path, 16, cfg)
	for _, forget := range []int{0, 2} {
		t.Run(fmt.Sprintf("forget=%d", forget), func(t *testing.T) {
			first := true
			c, _, _ := clusterWithStops(t, path, 2, 16, func(nc *nats.Conn, wc *worker.Config) {
				if first {
					wc.Bus, first = &forgetfulBus{Conn: nc, n: forget}, false
				}
			})
			// A worker without x asks for it: no round waits for a resend.
			stop := make(chan struct{})
			c.core.cfg.ResendAfter, c.core.cfg.Stop = time.Hour, stop
			defer time.AfterFunc(20*time.Second, func() { close(stop) }).Stop()
			got, err := train.Train(c, cfg)
			if err != nil {
				t.Fatal(err)
			}
			st := c.Stats()
			if st.WithoutX == 0 {
				t.Fatal("no Hessian-vector round went without x")
			}
			if (forget == 0) != (st.Resends == 0) || st.Resends > forget {
				t.Fatalf("%d broadcasts again after %d forgotten points", st.Resends, forget)
			}
			sameModel(t, got, want)
		})
	}
}

// TestForgedMessagesAreDropped trains while an intruder floods the job's
// subjects with every kind of bad message. Each is dropped and counted,
// none crashes anything, and the model is the one trained without a bus.
func TestForgedMessagesAreDropped(t *testing.T) {
	path := testData(t)
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "lbfgs", MaxIter: 300}, Eps: 1e-3}}
	want := localModel(t, path, 5, cfg)
	c, intruder := cluster(t, path, 2, 5)

	job := c.Job()
	valid := func(kind wire.Kind, jobID, round uint64, id uint32, payload []byte) []byte {
		var out []byte
		wire.Chunks(kind, jobID, round, id, payload, 1<<20, func(b []byte) error { out = append([]byte(nil), b...); return nil })
		return out
	}
	partial := wire.EncodePartial(&reduce.Partial{Loss: []float64{1, 2, 3}, BiasGrad: []float64{0, 0, 0}, Grad: make([]float64, 3)})
	flipped := valid(wire.KindPartial, job, 1, 0, partial)
	flipped[len(flipped)-1] ^= 0xff
	version := valid(wire.KindPartial, job, 1, 0, partial)
	version[0] = 99
	oversized := valid(wire.KindPartial, job, 1, 0, partial)
	oversized[31] = 0xff // chunk count beyond MaxChunks
	forged := map[string][]byte{
		"garbage":       []byte("not a chunk at all"),
		"checksum":      flipped,
		"version":       version,
		"oversized":     oversized,
		"wrong job":     valid(wire.KindPartial, job+1, 1, 0, partial),
		"stale round":   valid(wire.KindPartial, job, 0, 0, partial),
		"shard range":   valid(wire.KindPartial, job, 1, 999, partial),
		"wrong kind":    valid(wire.KindHeartbeat, job, 1, 0, []byte("{}")),
		"forged meta":   valid(wire.KindMeta, job, 0, 1, wire.EncodeMeta("nobody", &shard.Meta{Rows: 1})),
		"bad heartbeat": valid(wire.KindHeartbeat, 0, 0, 0, []byte("{not json")),
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			for _, b := range forged {
				intruder.Publish(wire.UpSubject(job), b)
				intruder.Publish(wire.DownSubject(job), b)
				intruder.Publish(wire.SubjectHeartbeat, b)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	// Train only once the flood reaches the coordinator: a stale round
	// is counted only while a round runs, and training this small data
	// takes a few milliseconds.
	natstest.WaitFor(t, 5*time.Second, "a forged message to reach the coordinator", func() bool { return c.Dropped()["wrong job id"] > 0 })
	res, err := train.Train(c, cfg)
	close(stop)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	sameModel(t, res, want)
	// Counting correct predictions is a round of its own kind.
	sameTally(t, c, path, 5, res)
	dropped := c.Dropped()
	for _, reason := range []string{wire.ErrShort.Error(), wire.ErrChecksum.Error(), (&wire.VersionError{Got: 99}).Error(), wire.ErrChunk.Error(),
		"wrong job id", "shard id out of range"} {
		if dropped[reason] == 0 {
			t.Errorf("no drop counted for %q (counted: %v)", reason, dropped)
		}
	}
	if c.Late() == 0 {
		t.Error("no late result counted")
	}
	t.Logf("dropped: %v", dropped)
}

// TestLostDescriptionsAreAskedAgain: shard descriptions lost on the way
// (a server cuts off a coordinator that reads too slowly, dropping what
// it had queued) are asked for again, instead of Load waiting for ever,
// and the descriptions sent again are the ones the shards would have
// given the first time.
func TestLostDescriptionsAreAskedAgain(t *testing.T) {
	path := testData(t)
	c, _, _ := clusterWithStops(t, path, 2, 8, func(nc *nats.Conn, wc *worker.Config) { onFaultyBus(nc, wc, loseFirst(wire.KindMeta, 3), nil) })
	sameMetas(t, c, path, 8)
}

// TestReconnectedWorkersAreAskedAgain: descriptions lost to a NATS
// outage are asked for as soon as the worker says it reconnected, not
// after ResendAfter (an hour here, so Load would not end).
func TestReconnectedWorkersAreAskedAgain(t *testing.T) {
	path := testData(t)
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(done)
	o := clusterOptions{parallel: 1, config: func(cfg *Config) { cfg.ResendAfter = time.Hour }}
	c, _, _ := startCluster(t, path, 2, 8, o, func(nc *nats.Conn, wc *worker.Config) {
		onFaultyBus(nc, wc, loseFirst(wire.KindMeta, 4), nil) // all of them
		wg.Add(1)
		go func() {
			// What the connection does when it is back: the worker's
			// handler, installed once it runs, counts a reconnection.
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				case <-time.After(200 * time.Millisecond):
					if h := nc.ReconnectHandler(); h != nil {
						h(nc)
					}
				}
			}
		}()
	})
	sameMetas(t, c, path, 8)
}

// sameMetas checks the cluster's shard descriptions against the shards
// loaded here.
func sameMetas(t *testing.T, c *Cluster, path string, n int) {
	t.Helper()
	got := c.Meta()
	for i, s := range loadShards(t, path, n) {
		want := shard.MetaOf(s)
		if !sameMeta(&got[i], &want) {
			t.Errorf("shard %d: description %+v, want %+v", i, got[i], want)
		}
	}
}

// roundWithoutWorkers starts a round on a cluster whose only worker has
// stopped, set up by cfg first; the round's error comes on the channel.
func roundWithoutWorkers(t *testing.T, cfg func(*Config)) (*Cluster, <-chan error) {
	c, _, stops := clusterWithStops(t, testData(t), 1, 4)
	cfg(&c.core.cfg)
	stops[0]()
	features := uint32(0)
	for _, m := range c.Meta() {
		features = max(features, m.MaxIndex)
	}
	return c, evalAsync(c, features)
}

// evalAsync starts a round at a point of the given features; its error
// comes on the channel.
func evalAsync(c *Cluster, features uint32) <-chan error {
	p := &shard.Point{W: [][]float64{make([]float64, features)}, Terms: shard.Terms{Bias: -1}}
	done := make(chan error, 1)
	go func() { done <- c.Eval(osgm.OpEval, p, nil, func(*reduce.Partial) error { return nil }) }()
	return done
}

// roundEndsWith waits up to within for the round's error, which must be
// want.
func roundEndsWith(t *testing.T, done <-chan error, want error, within time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		if !errors.Is(err, want) {
			t.Fatalf("round ended with %v, want %v", err, want)
		}
	case <-time.After(within):
		t.Fatalf("the round still waits after %v", within)
	}
}

// TestStopEndsAWaitingRound: with its only worker gone a round waits for
// one to come, past the heartbeat timeout that declares the worker dead;
// closing Stop ends it with ErrStopped.
func TestStopEndsAWaitingRound(t *testing.T) {
	stop := make(chan struct{})
	c, done := roundWithoutWorkers(t, func(cfg *Config) { cfg.Stop = stop })
	select {
	case err := <-done:
		t.Fatalf("a round with no worker ended before the stop: %v", err)
	case <-time.After(c.core.cfg.HeartbeatTimeout + 500*time.Millisecond):
	}
	close(stop)
	roundEndsWith(t, done, ErrStopped, 5*time.Second)
}

// TestStopLetsAGoingRoundEnd: with Stop closed, a round whose workers
// answer completes (its state can then be saved); only one that waits
// longer than stopGrace ends with ErrStopped.
func TestStopLetsAGoingRoundEnd(t *testing.T) {
	path := testData(t)
	stop := make(chan struct{})
	close(stop)
	c, _ := cluster(t, path, 2, 8)
	c.core.cfg.Stop = stop
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "lbfgs", MaxIter: 300}, Eps: 1e-3}}
	got, err := train.Train(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sameModel(t, got, localModel(t, path, 8, cfg))
}

// TestRoundGivesUpWithoutWorkers: with NoWorkerTimeout set, a round that
// has had no live worker for that long fails with ErrNoWorkers.
func TestRoundGivesUpWithoutWorkers(t *testing.T) {
	c, done := roundWithoutWorkers(t, func(cfg *Config) { cfg.NoWorkerTimeout = 300 * time.Millisecond })
	roundEndsWith(t, done, ErrNoWorkers, c.core.cfg.HeartbeatTimeout+10*time.Second)
}

// TestLeavingWorkerHandsOver: a worker that stops says so, and its
// shards move at once: with the heartbeat timeout and ResendAfter at an
// hour, training would otherwise wait until Stop.
func TestLeavingWorkerHandsOver(t *testing.T) {
	path := testData(t)
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "lbfgs", MaxIter: 300}, Eps: 1e-3}}
	want := localModel(t, path, 8, cfg)
	stop := make(chan struct{})
	defer time.AfterFunc(20*time.Second, func() { close(stop) }).Stop()
	c, _, stops := startCluster(t, path, 2, 8, clusterOptions{parallel: 1, config: func(cfg *Config) {
		cfg.HeartbeatTimeout, cfg.ResendAfter, cfg.Stop = time.Hour, time.Hour, stop
	}})
	core, logs := observer.New(zap.InfoLevel)
	c.core.log = zap.New(core)
	stops[0]()
	got, err := train.Train(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sameModel(t, got, want)
	if logs.FilterMessage("worker left").Len() != 1 || c.Live() != 1 {
		t.Fatalf("%d workers live, left: %v", c.Live(), logs.FilterMessage("worker left").All())
	}
}

// TestKilledWorkerIsProbed: a worker whose connection closes without a
// goodbye (killed outright) is lost as soon as probes find its subject
// empty, long before its heartbeats are missed (an hour here), in a round
// and in Load; its shards move and the model is the same.
func TestKilledWorkerIsProbed(t *testing.T) {
	path := testData(t)
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "lbfgs", MaxIter: 300}, Eps: 1e-3}}
	want := localModel(t, path, 8, cfg)
	for _, during := range []string{"round", "load"} {
		t.Run(during, func(t *testing.T) {
			stop := make(chan struct{})
			defer time.AfterFunc(20*time.Second, func() { close(stop) }).Stop()
			var ncs []*nats.Conn
			keep := func(nc *nats.Conn, wc *worker.Config) { ncs = append(ncs, nc) }
			if during == "load" {
				// The victim loads its shards, never describes them, and
				// is gone.
				keep = func(nc *nats.Conn, wc *worker.Config) {
					if ncs = append(ncs, nc); len(ncs) > 1 {
						return
					}
					onFaultyBus(nc, wc, loseFirst(wire.KindMeta, 1<<30), nil)
					wc.Load = func(read func() ([]*shard.Shard, int, error), _ *atomic.Int64) ([]*shard.Shard, int, error) {
						defer nc.Close()
						return read()
					}
				}
			}
			start := time.Now()
			c, _, _ := startCluster(t, path, 2, 8, clusterOptions{parallel: 1, config: func(cfg *Config) {
				cfg.HeartbeatTimeout, cfg.ResendAfter, cfg.Stop = time.Hour, time.Hour, stop
			}}, keep)
			core, logs := observer.New(zap.InfoLevel)
			c.core.log = zap.New(core)
			if during == "round" {
				ncs[0].Close()
				start = time.Now()
			}
			got, err := train.Train(c, cfg)
			if err != nil {
				t.Fatal(err)
			}
			sameModel(t, got, want)
			if c.Live() != 1 || c.Stats().Reassignments == 0 {
				t.Fatalf("%d workers live, %d reassignments", c.Live(), c.Stats().Reassignments)
			}
			if during == "round" && logs.FilterMessage("worker lost").Len() != 1 {
				t.Fatalf("lost: %v", logs.FilterMessage("worker lost").All())
			}
			t.Logf("%s: trained %v after the connection closed", during, time.Since(start))
		})
	}
}

// TestStuckWorkerLosesItsShards: a worker that keeps heartbeating and
// holding its subject but stops answering rounds (from round 5) loses its
// shards once a round has gone out stuckResends times and waited ten
// times the longest recent round; without that the round would fail after
// maxResends. The model is the same, and the stuck worker's heartbeats do
// not bring it back.
func TestStuckWorkerLosesItsShards(t *testing.T) {
	path := testData(t)
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "lbfgs", MaxIter: 300}, Eps: 1e-3}}
	want := localModel(t, path, 8, cfg)
	n := 0
	c, _, _ := startCluster(t, path, 2, 8, clusterOptions{parallel: 1, config: func(cfg *Config) {
		cfg.ResendAfter = 100 * time.Millisecond // maxResends of them: 2 s
	}}, func(nc *nats.Conn, wc *worker.Config) {
		if n++; n == 1 {
			onFaultyBus(nc, wc, nil, loseAfter(wire.KindPoint, 5))
		}
	})
	core, logs := observer.New(zap.InfoLevel)
	c.core.log = zap.New(core)
	got, err := train.Train(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sameModel(t, got, want)
	if stuck := logs.FilterMessageSnippet("worker stuck").Len(); stuck != 1 || c.Live() != 1 {
		t.Fatalf("%d workers live, %d stuck", c.Live(), stuck)
	}
	if lost := logs.FilterMessage("worker lost").Len() + logs.FilterMessage("worker back").Len(); lost > 0 {
		t.Fatalf("%d workers lost or back: the stuck one was seen as something else", lost)
	}
}

// TestHungLoadLosesItsShards: a worker whose load reads nothing (from a
// hung network mount) while its heartbeats go on loses its shards after
// LoadStall, and the job trains the same model on the others; a worker
// whose load reads slowly for three times LoadStall keeps its shards.
func TestHungLoadLosesItsShards(t *testing.T) {
	path := testData(t)
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "lbfgs", MaxIter: 300}, Eps: 1e-3}}
	want := localModel(t, path, 8, cfg)
	hung, slow := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(hung) })
	core, logs := observer.New(zap.InfoLevel)
	n := 0
	c, _, _ := startCluster(t, path, 3, 8, clusterOptions{parallel: 1, config: func(cfg *Config) {
		cfg.LoadStall, cfg.Log = time.Second, zap.New(core)
	}}, func(nc *nats.Conn, wc *worker.Config) {
		// The first worker's loads hang; the second's read a little now
		// and then, as a slow mount gives, for three times LoadStall.
		switch n++; n {
		case 1:
			wc.Load = func(read func() ([]*shard.Shard, int, error), _ *atomic.Int64) ([]*shard.Shard, int, error) {
				<-hung
				return read()
			}
		case 2:
			time.AfterFunc(3*time.Second, func() { close(slow) })
			wc.Load = func(read func() ([]*shard.Shard, int, error), bytes *atomic.Int64) ([]*shard.Shard, int, error) {
				for {
					select {
					case <-slow:
						return read()
					case <-time.After(200 * time.Millisecond):
						bytes.Add(4096)
					}
				}
			}
		}
	})
	got, err := train.Train(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sameModel(t, got, want)
	if stuck := logs.FilterMessageSnippet("its load has read nothing").Len(); stuck != 1 || c.Live() != 2 {
		t.Fatalf("%d workers live, %d stuck loading", c.Live(), stuck)
	}
}

// TestUndescribedShardsMove: a worker that loads its shards and then
// never describes them, asked again or not, while its heartbeats go on (a
// loop hung once its load was over) loses them after stuckResends asks
// unanswered, and the job trains the same model on the other worker.
// Before, Load asked it again every ResendAfter for ever.
func TestUndescribedShardsMove(t *testing.T) {
	path := testData(t)
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "lbfgs", MaxIter: 300}, Eps: 1e-3}}
	want := localModel(t, path, 8, cfg)
	core, logs := observer.New(zap.InfoLevel)
	n := 0
	c, _, _ := startCluster(t, path, 2, 8, clusterOptions{parallel: 1, config: func(cfg *Config) {
		cfg.ResendAfter, cfg.Log = 100*time.Millisecond, zap.New(core)
	}}, func(nc *nats.Conn, wc *worker.Config) {
		if n++; n == 1 {
			onFaultyBus(nc, wc, loseFirst(wire.KindMeta, 1<<30), nil)
		}
	})
	got, err := train.Train(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sameModel(t, got, want)
	if stuck := logs.FilterMessageSnippet("does not describe them").Len(); stuck != 1 || c.Live() != 1 {
		t.Fatalf("%d workers live, %d stuck", c.Live(), stuck)
	}
	if asks := logs.FilterMessage("shard descriptions missing; asking again").Len(); asks != stuckResends {
		t.Fatalf("%d asks before the shards moved, want %d", asks, stuckResends)
	}
}

// TestBatchesOverTheBus: one-vs-rest problems minimised one at a time
// over the bus, as memory for the methods' state of one alone makes them
// (a point of one class, which workers evaluate with the multi-class
// kernels), give the model of all at once in-process.
func TestBatchesOverTheBus(t *testing.T) {
	path := testData(t)
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "lbfgs", MaxIter: 300}, Eps: 1e-3}}
	local, err := train.Train(objective.NewLocal(loadShards(t, path, 8), 2), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := flatten(local.Model.W)
	c, _, _ := startCluster(t, path, 2, 8, clusterOptions{parallel: 1})
	// The methods may take half of MaxBytes: the K models and the state
	// of one problem's method.
	dim, n, K := local.Model.NFeature+1, local.Obj.Dim(), len(local.Model.W)
	cfg.MaxBytes = 2 * (train.StateBytes(dim, 0, K) + train.StateBytes(0, n, 1))
	got, err := train.Train(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.Batch != 1 || !got.MemoryBound {
		t.Fatalf("batches of %d (memory bound %v)", got.Batch, got.MemoryBound)
	}
	sameModel(t, got, want)
}

// TestRoundGivesUpWithoutNATS: a coordinator cut off from NATS for
// NoWorkerTimeout fails its round with ErrNoWorkers, though the workers
// it last heard from are not declared lost.
func TestRoundGivesUpWithoutNATS(t *testing.T) {
	srv := natstest.On(t, &server.Options{Port: testport.Free(t)})
	c, _, _ := startCluster(t, testData(t), 1, 4, clusterOptions{parallel: 1, server: srv,
		config: func(cfg *Config) { cfg.HeartbeatTimeout, cfg.NoWorkerTimeout = time.Hour, 300*time.Millisecond }})
	c.SetClasses([]float64{1, 2, 3})
	srv.Shutdown()
	natstest.WaitFor(t, 10*time.Second, "the coordinator to be cut off", func() bool { return !c.nc.IsConnected() })
	roundEndsWith(t, evalAsync(c, 61), ErrNoWorkers, 10*time.Second)
}

// spreadData writes a data set whose features are multiples of 4 up to
// 240: three quarters of the coordinates are dead.
func spreadData(t *testing.T, classes int) string {
	return svmdata.WriteFile(t, svmdata.Stepped(rand.New(rand.NewPCG(7, uint64(classes))), 2000, classes, 4, 240))
}

// TestPointsCarryLiveCoordinates: on data with dead features the points
// carry the live coordinates only, a quarter of the bytes here, and every
// kind of round (Newton's Hessian-vector rounds without x among them,
// also when a worker lost the point they refer to) gives the model
// trained without a bus, to the bit, and its tally.
func TestPointsCarryLiveCoordinates(t *testing.T) {
	for _, c := range []struct {
		classes int
		method  string
		forget  int
		kill    bool // a worker dies: its shards map their columns anew
	}{
		{3, "lbfgs", 0, false},
		{3, "lbfgs", 0, true},
		{2, "newton", 0, false},
		{2, "newton", 1, false},
	} {
		t.Run(fmt.Sprintf("%d classes %s forget=%d kill=%v", c.classes, c.method, c.forget, c.kill), func(t *testing.T) {
			path := spreadData(t, c.classes)
			cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: c.method, MaxIter: 300}, Eps: 1e-3}}
			want := localModel(t, path, 8, cfg)
			first := true
			cl, _, stops := clusterWithStops(t, path, 2, 8, func(nc *nats.Conn, wc *worker.Config) {
				if first {
					wc.Bus, first = &forgetfulBus{Conn: nc, n: c.forget}, false
				}
			})
			if c.kill {
				cfg.Trace = stopAt(10, stops[1])
			}
			res, err := train.Train(cl, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if c.kill && cl.Stats().Reassignments == 0 {
				t.Fatal("no worker was lost")
			}
			if res.Obj.Dim() != 61 {
				t.Fatalf("the problem has %d coordinates, want the 61 live ones", res.Obj.Dim())
			}
			st := cl.Stats()
			if c.method == "newton" && st.WithoutX == 0 {
				t.Fatal("no Hessian-vector round went without x")
			}
			if !c.kill && st.Resends > c.forget {
				t.Fatalf("%d broadcasts again after %d forgotten points", st.Resends, c.forget)
			}
			// K vectors of 61 coordinates, not 241: under 1,000 bytes a
			// round for one problem (1,928 with all coordinates).
			if perRound := st.BytesDown / int64(st.Rounds); perRound > int64(c.classes*(61*8+600)) {
				t.Fatalf("%d bytes down a round", perRound)
			}
			sameModel(t, res, want)
			sameTally(t, cl, path, 8, res)
		})
	}
}

// TestSparseSumsKeepTheBits: sums whose gradients go sparse give the
// model that whole gradients (sent again whole by the workers' bus) give,
// and that training without a bus gives, to the bit, in fewer bytes up.
func TestSparseSumsKeepTheBits(t *testing.T) {
	// Text-like rows: a few of 3,000 features each, most of them their
	// class's, so that near the optimum most rows are inactive in most
	// problems and most entries of a sum are +0.
	rng := rand.New(rand.NewPCG(9, 10))
	var b strings.Builder
	for i := 0; i < 2000; i++ {
		class := rng.IntN(3)
		fmt.Fprintf(&b, "%d", class+1)
		picks := rng.Perm(1000)[:5]
		slices.Sort(picks)
		for _, j := range picks {
			if rng.IntN(5) > 0 {
				j = 3*j + class // the class's own features
			} else {
				j = 3*j + rng.IntN(3)
			}
			fmt.Fprintf(&b, " %d:1", j+1)
		}
		b.WriteString("\n")
	}
	path := filepath.Join(t.TempDir(), "text")
	os.WriteFile(path, []byte(b.String()), 0o644)
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{MaxIter: 300}, Eps: 1e-4}}
	want := localModel(t, path, 8, cfg)
	up := map[bool]int64{}
	for _, whole := range []bool{false, true} {
		t.Run(fmt.Sprintf("whole=%v", whole), func(t *testing.T) {
			// Each worker sends its shards' partials here, where most
			// entries are +0; along the tree the coordinator gets the
			// root, where few are.
			c, _, _ := startCluster(t, path, 2, 8, clusterOptions{parallel: 1, config: func(c *Config) { c.Reduce = ReduceStar }},
				func(nc *nats.Conn, wc *worker.Config) {
					if whole {
						wc.Bus = &wholeBus{Conn: nc}
					}
				})
			res, err := train.Train(c, cfg)
			if err != nil {
				t.Fatal(err)
			}
			sameModel(t, res, want)
			st := c.Stats()
			up[whole] = st.BytesUp / int64(st.Rounds)
		})
	}
	// The first rounds, near 0, have every row active: their sums go
	// whole either way.
	if !(up[false] < up[true]*9/10) {
		t.Fatalf("%d bytes up a round with sparse gradients, %d whole", up[false], up[true])
	}
	t.Logf("bytes up a round: %d sparse, %d whole", up[false], up[true])
}

// TestServerRestartSendsTheRoundAgain: the NATS server dies between
// rounds, a round starts while every client is cut off, and a new server
// comes up on the port. Whoever reconnects last, coordinator or workers,
// the round goes out again as soon as everyone is back: with ResendAfter
// at an hour a round that waited for it would not end. The cut-off
// coordinator declares no worker dead, and the round's results are those
// of the same point before the restart.
func TestServerRestartSendsTheRoundAgain(t *testing.T) {
	path := testData(t)
	quick := nats.CustomReconnectDelay(func(int) time.Duration { return 20 * time.Millisecond })
	slow := nats.CustomReconnectDelay(func(int) time.Duration { return 1500 * time.Millisecond })
	for _, tc := range []restartCase{
		// The point the coordinator buffered goes out before any worker
		// listens: the workers' heartbeats bring it back.
		{"workers last", []nats.Option{quick}, []nats.Option{slow}, 0, 10 * time.Second, time.Hour},
		// Workers say they are back while nobody listens, and send no
		// other heartbeat; the coordinator, which buffers nothing, has
		// sent nothing: its own reconnection brings the point. The
		// outage is longer than ResendAfter, whose clock starts again
		// at the reconnection.
		{"coordinator last", []nats.Option{slow, nats.ReconnectBufSize(-1)}, []nats.Option{quick}, time.Hour, 10 * time.Second, time.Second},
		// Cut off for longer than the heartbeat timeout, the coordinator
		// does not take it for the workers' silence.
		{"coordinator cut off too long", []nats.Option{slow, nats.ReconnectBufSize(-1)}, []nats.Option{quick}, 0, time.Second, time.Hour},
	} {
		// Points broadcast or each worker's own: either comes back.
		for _, points := range []PointMode{PointsBroadcast, PointsOwn} {
			t.Run(tc.name+" "+points.String(), func(t *testing.T) { serverRestart(t, path, tc, points) })
		}
	}
}

type restartCase struct {
	name                string
	coordinator, worker []nats.Option
	heartbeat           time.Duration // the workers' (0: the default)
	silence             time.Duration // the heartbeat timeout
	resendAfter         time.Duration
}

// serverRestart evaluates a point, restarts the server, and evaluates it
// again while the server is down: the round must come back with the same
// results, sent again for the reconnection, not for want of results.
func serverRestart(t *testing.T, path string, tc restartCase, points PointMode) {
	port := testport.Free(t)
	srv := natstest.On(t, &server.Options{Port: port})
	c, _, _ := startCluster(t, path, 2, 4, clusterOptions{parallel: 1, server: srv, coordinator: tc.coordinator, worker: tc.worker},
		func(nc *nats.Conn, wc *worker.Config) {
			if tc.heartbeat > 0 {
				wc.Heartbeat = tc.heartbeat
			}
		})
	core, logs := observer.New(zap.InfoLevel)
	c.core.log = zap.New(core)
	stop := make(chan struct{})
	c.core.cfg.ResendAfter, c.core.cfg.HeartbeatTimeout, c.core.cfg.Stop, c.core.cfg.Points = tc.resendAfter, tc.silence, stop, points
	// Results compared one by one: a round that goes out again has each
	// worker send its own, so the first goes the same way.
	c.core.cfg.Reduce = ReduceStar
	defer time.AfterFunc(30*time.Second, func() { close(stop) }).Stop()

	features := uint32(0)
	for _, m := range c.Meta() {
		features = max(features, m.MaxIndex)
	}
	w := make([]float64, features)
	for j := range w {
		w[j] = 0.01 * float64(j%7-3)
	}
	p := &shard.Point{W: [][]float64{w}, Terms: shard.Terms{Bias: -1}}
	c.SetClasses([]float64{1, 2, 3})
	eval := func() (map[string]float64, error) {
		got := map[string]float64{}
		err := c.Eval(osgm.OpEval, p, nil, func(part *reduce.Partial) error {
			got[fmt.Sprint(part.Group, part.Level, part.Shard)] = part.Loss[0]
			return nil
		})
		return got, err
	}
	want, err := eval()
	if err != nil {
		t.Fatal(err)
	}

	srv.Shutdown()
	natstest.WaitFor(t, 10*time.Second, "the coordinator to be cut off", func() bool { return !c.nc.IsConnected() })
	done := make(chan error, 1)
	var got map[string]float64
	go func() {
		var err error
		got, err = eval()
		done <- err
	}()
	natstest.On(t, &server.Options{Port: port})
	if err := <-done; err != nil {
		t.Fatalf("the round after the restart: %v (resends %d)", err, c.Stats().Resends)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("results after the restart %v, before %v", got, want)
	}
	if n := logs.FilterMessage("worker lost").Len(); n > 0 {
		t.Fatalf("%d workers declared lost over a server restart", n)
	}
	if n := logs.FilterMessage("round waiting on shards; broadcasting the point again").Len(); n > 0 {
		t.Fatalf("the round went out again %d times for want of results, not for the reconnection", n)
	}
	if c.Stats().Resends == 0 {
		t.Fatal("the round went through without being sent again: nothing was tested")
	}
}

// TestReconnectionsSettle: reconnections that come within
// reconnectSettle of the first make one broadcast, due that long after
// the first, not one each nor later with every new one.
func TestReconnectionsSettle(t *testing.T) {
	c, _ := cluster(t, testData(t), 1, 2)
	first := time.Now()
	clock := first
	c.core.now = func() time.Time { return clock }
	c.core.soon()
	if c.core.due(first) {
		t.Fatal("due at once")
	}
	clock = clock.Add(10 * time.Millisecond)
	c.core.soon() // a later one does not push the first back
	if !c.core.due(first.Add(reconnectSettle)) {
		t.Fatal("not due reconnectSettle after the first")
	}
	if c.core.due(first.Add(2 * reconnectSettle)) {
		t.Fatal("due twice")
	}
}

// TestShardsOutliveTheJob: a second coordinator's job over the same file
// and layout (a resumed run, or another C) finds the workers' shards
// loaded: no worker reads the file again, and the model is the one
// trained without a bus. The workers beat once an hour: the second
// coordinator learns of them by its hello.
func TestShardsOutliveTheJob(t *testing.T) {
	path := testData(t)
	core, logs := observer.New(zap.InfoLevel)
	hourly := clusterOptions{parallel: 1, config: func(cfg *Config) { cfg.HeartbeatTimeout = time.Hour }}
	first, _, _ := startCluster(t, path, 2, 8, hourly, func(nc *nats.Conn, wc *worker.Config) { wc.Log, wc.Heartbeat = zap.New(core), time.Hour })
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "newton", MaxIter: 300}, Eps: 1e-3}}
	if _, err := train.Train(first, cfg); err != nil {
		t.Fatal(err)
	}
	first.Close()

	nc, err := transport.Connect(first.nc.ConnectedUrl(), "second", transport.Auth{}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ccfg := first.core.cfg
	ccfg.Job = 0
	ccfg.ResendAfter = time.Hour // kept shards are described unasked
	second, err := New(nc, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if second.Job() == first.Job() {
		t.Fatal("the same job id twice")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := second.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessage("loading shards").Len(); n != 2 {
		t.Errorf("workers loaded shards %d times, want 2 (the first job's)", n)
	}
	if n := logs.FilterMessage("shards kept for the new job").Len(); n != 2 {
		t.Errorf("%d workers kept their shards, want 2", n)
	}
	sameMetas(t, second, path, 8)
	cfg.C = 4 // other points at stamps of their own
	got, err := train.Train(second, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sameModel(t, got, localModel(t, path, 8, cfg))
}

// TestLoadSaysItIsStillWaiting: a coordinator whose workers never come
// says so every WaitReport (here 200 ms), with how many joined, until it
// is stopped.
func TestLoadSaysItIsStillWaiting(t *testing.T) {
	srv, err := transport.Embedded("")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc := connected(t, srv.ClientURL())
	defer nc.Close()
	core, logs := observer.New(zap.InfoLevel)
	c, err := New(nc, Config{MinWorkers: 2, Ranges: []input.Range{{ID: 0, End: 1}}, Log: zap.New(core), WaitReport: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Load(ctx) }()
	natstest.WaitFor(t, 10*time.Second, "two reminders that the coordinator is still waiting", func() bool {
		return logs.FilterMessage("still waiting for workers").Len() >= 2
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Load ended with %v", err)
	}
	e := logs.FilterMessage("still waiting for workers").All()[0]
	if f := e.ContextMap(); f["min"] != int64(2) || f["joined"] != int64(0) {
		t.Errorf("reminder says %v", f)
	}
}

// TestRoundEndsWhenTheConnectionCloses: a coordinator connection that
// nats.go closes (credentials refused on a reconnection) never comes
// back; the round ends with that, not after the workers' heartbeat
// timeout and then never.
func TestRoundEndsWhenTheConnectionCloses(t *testing.T) {
	c, _, _ := startCluster(t, testData(t), 1, 4, clusterOptions{parallel: 1, config: func(cfg *Config) {
		cfg.HeartbeatTimeout, cfg.ResendAfter = time.Hour, time.Hour
	}}, func(nc *nats.Conn, wc *worker.Config) { onFaultyBus(nc, wc, nil, loseAfter(wire.KindPoint, 1)) }) // it answers no round: the round waits
	features := uint32(0)
	for _, m := range c.Meta() {
		features = max(features, m.MaxIndex)
	}
	done := evalAsync(c, features)
	natstest.WaitFor(t, 10*time.Second, "the round's point to go out", func() bool { return c.Stats().BytesDown > 0 })
	c.nc.Close() // the round has broadcast and waits for results
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "NATS connection closed") {
			t.Fatalf("round ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the round still waits on a closed connection")
	}
}

// TestShareMeta: the descriptions a process holding the shards makes
// replace those Load decoded when they are the same (the embedded
// default then holds one copy of the column maps), and are refused when
// any part differs.
func TestShareMeta(t *testing.T) {
	path := testData(t)
	c, _, _ := startCluster(t, path, 2, 16, clusterOptions{parallel: 1})
	local := func() []shard.Meta { return objective.NewLocal(loadShards(t, path, 16), 1).Meta() }
	decoded := slices.Clone(c.Meta())
	for _, bad := range []func(m *shard.Meta){
		func(m *shard.Meta) { m.Cols = cols.NewList(m.Cols.Slice()[1:]) },
		func(m *shard.Meta) { m.Labels = []float64{7} },
		func(m *shard.Meta) { m.LabelCount = slices.Clone(m.LabelCount); m.LabelCount[0]++ },
		func(m *shard.Meta) { m.Pairs++ },
		func(m *shard.Meta) { m.ID++ },
	} {
		metas := local()
		bad(&metas[5])
		if err := c.ShareMeta(metas); err == nil {
			t.Fatal("a description that differs replaced the decoded one")
		}
		if !reflect.DeepEqual(c.Meta(), decoded) {
			t.Fatal("a refused share changed the descriptions")
		}
	}
	if err := c.ShareMeta(local()[1:]); err == nil {
		t.Fatal("descriptions of another number of shards were taken")
	}
	metas := local()
	if err := c.ShareMeta(metas); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Meta(), metas) {
		t.Fatal("the shared descriptions are not the cluster's")
	}
}

// TestManyShardsOnASmallPayload: under a server whose max_payload (1
// KB) is below one worker's assignment of 600 shards, and below its
// heartbeat, both go in chunks and are put together, and training over
// the workers writes the in-process model. (One chunk was read alone as
// the whole message: the workers never loaded, and Load waited for
// ever.)
func TestManyShardsOnASmallPayload(t *testing.T) {
	path := testData(t)
	const shards = 600
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "lbfgs", MaxIter: 300}, Eps: 1e-3}}
	want := localModel(t, path, shards, cfg)
	srv := natstest.Run(t, &server.Options{MaxPayload: 1 << 10})
	c, _, _ := startCluster(t, path, 2, shards, clusterOptions{parallel: 1, server: srv})
	held := make([]int, shards/2)
	for i := range held {
		held[i] = shards/2 + i
	}
	body, _ := json.Marshal(wire.Assign{Shards: c.core.cfg.Ranges[:shards/2], Total: shards})
	hb, _ := json.Marshal(wire.Heartbeat{ID: "t0-0123456789abcdefghijkl", Held: held})
	if len(body) <= 1<<10 || len(hb) <= 1<<10 {
		t.Fatalf("an assignment of half the shards is %d bytes, a heartbeat %d: one chunk", len(body), len(hb))
	}
	res, err := train.Train(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sameModel(t, res, want)
	// The workers' heartbeats since they loaded, of 300 shards each,
	// tell the coordinator they hold them; rounds take the heartbeats.
	pt := res.Obj.ModelPoint(res.Model.W)
	natstest.WaitFor(t, 10*time.Second, "heartbeats that list the shards", func() bool {
		if _, err := c.Tally(pt); err != nil {
			t.Fatal(err)
		}
		ws := c.Workers()
		return len(ws) == 2 && len(ws[0].Shards) > 0 && ws[0].State == "ready" && len(ws[1].Shards) > 0 && ws[1].State == "ready"
	})
}

// TestWorkerOfAnotherVersionRefused: a worker of another release that
// asks to join is named once in an error with both wire versions, is
// sent a probe of this version (which it logs for its part), and is
// given no work.
func TestWorkerOfAnotherVersionRefused(t *testing.T) {
	c, intruder := cluster(t, testData(t), 2, 5)
	core, logs := observer.New(zap.InfoLevel)
	c.core.log = zap.New(core)
	probes, err := intruder.SubscribeSync(wire.WorkerSubject("old1"))
	if err != nil {
		t.Fatal(err)
	}
	var chunk []byte
	wire.Chunks(wire.KindHeartbeat, 0, 0, 0, []byte(`{"id":"old1","name":"oldhost","solves":true}`), 1<<20, func(b []byte) error {
		chunk = append([]byte(nil), b...)
		return nil
	})
	chunk[0] = wire.Version - 1
	for range 3 {
		if err := intruder.Publish(wire.SubjectHeartbeat, chunk); err != nil {
			t.Fatal(err)
		}
	}
	natstest.WaitFor(t, 5*time.Second, "the refusal", func() bool { return logs.FilterField(zap.String("worker", "old1")).Len() > 0 })
	msg, err := probes.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no probe reached the refused worker: %v", err)
	}
	if _, _, err := wire.DecodeChunk(msg.Data); err != nil || msg.Data[0] != wire.Version || wire.Kind(msg.Data[1]) != wire.KindProbe {
		t.Fatalf("the refused worker was sent % x (%v), not a probe of version %d", msg.Data[:2], err, wire.Version)
	}
	intruder.Flush()
	entries := logs.FilterField(zap.String("worker", "old1")).All()
	f := entries[0].ContextMap()
	if len(entries) != 1 || entries[0].Level != zap.ErrorLevel || f["name"] != "oldhost" ||
		fmt.Sprint(f["its_wire_version"]) != fmt.Sprint(wire.Version-1) || fmt.Sprint(f["wire_version"]) != fmt.Sprint(wire.Version) {
		t.Fatalf("the refusal was logged as %+v", entries)
	}
	if c.Live() != 2 {
		t.Fatalf("%d workers live, want the 2 of this release", c.Live())
	}
}
