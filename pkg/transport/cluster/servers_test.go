package cluster

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/osgm-svm/osgm/internal/natstest"
	"github.com/osgm-svm/osgm/internal/testport"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/train"
	"github.com/osgm-svm/osgm/pkg/transport/worker"
)

// TestServerCluster: the coordinator and the workers spread over the
// servers of a NATS cluster, which is how a deployment spreads the fan-out
// of points over several servers' links. Every round crosses routes both
// ways, and the model is the in-process one to the bit, with points
// broadcast or each worker's own. A server lost for good in the middle of
// the run (not restarted: its clients fail over to the others) changes
// nothing either, whether it served only workers or the coordinator too.
func TestServerCluster(t *testing.T) {
	path := bandedData(t, 4000, 2, 1)
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "newton", MaxIter: 300}, Eps: 1e-3}}
	want := localModel(t, path, 16, cfg)
	for _, lose := range []int{-1, 0, 2} {
		for _, points := range []PointMode{PointsBroadcast, PointsOwn} {
			name := fmt.Sprintf("lose server %d %v", lose, points)
			if lose < 0 {
				name = "no loss " + points.String()
			}
			t.Run(name, func(t *testing.T) { serverClusterRun(t, path, cfg, want, lose, points) })
		}
	}
}

// serverClusterRun trains over 4 workers on a cluster of 3 servers (the
// coordinator on server 0, the workers on 1, 2, 0 and 1), shutting down
// server lose (-1: none) after the second iteration.
func serverClusterRun(t *testing.T, path string, cfg train.Config, want []float64, lose int, points PointMode) {
	servers := natstest.Cluster(t, 3)
	stop := make(chan struct{})
	defer time.AfterFunc(60*time.Second, func() { close(stop) }).Stop()
	quick := nats.CustomReconnectDelay(func(int) time.Duration { return 20 * time.Millisecond })
	c, _, _ := startCluster(t, path, 4, 16, clusterOptions{
		parallel: 1, servers: servers, coordinator: []nats.Option{quick}, worker: []nats.Option{quick},
		config: func(cfg *Config) { cfg.Points, cfg.Stop = points, stop },
	})
	// The coordinator, worker 3 and startCluster's intruder on server 0;
	// workers 1 and 4 on server 1; worker 2 on server 2.
	for i, n := range []int{3, 2, 1} {
		if got := servers[i].NumClients(); got != n {
			t.Fatalf("server %d has %d clients, not %d", i, got, n)
		}
	}
	if lose >= 0 {
		cfg.Trace = stopAt(2, servers[lose].Shutdown)
	}
	res, err := train.Train(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sameModel(t, res, want)
	if lose < 0 {
		return
	}
	// The server went down inside the second iteration's trace, before
	// the third's rounds. A round may or may not need its resend: a
	// worker's result published while it was cut off goes out from the
	// client's buffer once it has failed over.
	if res.Opt.Iters[0] <= 2 {
		t.Fatalf("the run ended after %d iterations: the server was not lost mid-run", res.Opt.Iters[0])
	}
	// Every client, the intruder too, fails over to the servers left.
	natstest.WaitFor(t, 10*time.Second, "every client on the servers left", func() bool {
		n := 0
		for i, s := range servers {
			if i != lose {
				n += s.NumClients()
			}
		}
		return n == 6
	})
}

// leafServers starts a hub server and a leaf server connected to it as a
// leaf node (a remote site's server), and returns once a message
// published on either reaches a subscriber on the other.
func leafServers(t *testing.T) []*server.Server {
	t.Helper()
	port := testport.Free(t)
	hub := natstest.Run(t, &server.Options{ServerName: "hub", LeafNode: server.LeafNodeOpts{Host: "127.0.0.1", Port: port}})
	remote, _ := url.Parse(fmt.Sprintf("nats-leaf://127.0.0.1:%d", port))
	leaf := natstest.Run(t, &server.Options{ServerName: "leaf",
		LeafNode: server.LeafNodeOpts{Remotes: []*server.RemoteLeafOpts{{URLs: []*url.URL{remote}}}}})
	servers := []*server.Server{hub, leaf}
	natstest.ReachEachOther(t, servers)
	return servers
}

// TestLeafNode: workers on a leaf node's server (a remote site's), the
// coordinator on the hub it connects to: every round crosses the leaf
// connection both ways, and the model is the in-process one to the bit,
// with points broadcast or each worker's own.
func TestLeafNode(t *testing.T) {
	path := bandedData(t, 4000, 2, 1)
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "newton", MaxIter: 300}, Eps: 1e-3}}
	want := localModel(t, path, 16, cfg)
	for _, points := range []PointMode{PointsBroadcast, PointsOwn} {
		t.Run(points.String(), func(t *testing.T) {
			servers := leafServers(t)
			// The coordinator on the hub, both workers on the leaf.
			c, _, _ := startCluster(t, path, 2, 16, clusterOptions{parallel: 1,
				servers: []*server.Server{servers[0], servers[1], servers[1]},
				config:  func(cfg *Config) { cfg.Points = points }})
			if n := servers[1].NumClients(); n != 2 {
				t.Fatalf("the leaf has %d clients, not the 2 workers", n)
			}
			res, err := train.Train(c, cfg)
			if err != nil {
				t.Fatal(err)
			}
			sameModel(t, res, want)
		})
	}
}

// TestCoordinatorLinkCut: the coordinator's link to its server goes dead
// without closing, as when its server's host is cut off: what it sends
// is lost until pings find the connection dead and it fails over to
// another server of the cluster. Meanwhile every worker falls silent to
// it, one after another, so the first lost have their shards given to
// the others in assignments that never arrive; back on the bus, it must
// tell them again (the heartbeats say what each holds) or a round waits
// on shards nobody loads until it fails. The model is the local one.
func TestCoordinatorLinkCut(t *testing.T) {
	path := bandedData(t, 4000, 2, 1)
	// Thousands of cheap iterations: rounds go on through the cut.
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "hdm", MaxIter: 4000}, Eps: 1e-12}}
	want := localModel(t, path, 16, cfg)
	servers := natstest.Cluster(t, 3)
	link := newLink(t, servers[0].Addr().String())
	quick := nats.CustomReconnectDelay(func(int) time.Duration { return 20 * time.Millisecond })
	// Pings every second find the link dead after 3 to 4 s, past the
	// heartbeat timeout of 2 s. Heartbeats at different paces, as
	// workers started at different times beat at different phases: they
	// fall silent to the coordinator one after another, not all in one
	// tick.
	core, seen := observer.New(zap.InfoLevel)
	n := 0
	pace := func(nc *nats.Conn, wc *worker.Config) {
		if n++; n == 4 {
			wc.Heartbeat = 800 * time.Millisecond
		} else {
			wc.Heartbeat = 100 * time.Millisecond
		}
	}
	c, _, stops := startCluster(t, path, 4, 16, clusterOptions{
		parallel: 1, servers: servers, worker: []nats.Option{quick},
		coordinator:    []nats.Option{quick, nats.PingInterval(time.Second)},
		coordinatorURL: "nats://" + link.addr() + "," + servers[1].ClientURL() + "," + servers[2].ClientURL(),
		config:         func(cfg *Config) { cfg.Log = zap.New(core) },
	}, pace)
	// Cut while rounds go on, not between them: the coordinator then
	// takes heartbeats as they come, up to the cut.
	cfg.Trace = stopAt(2, func() {
		time.AfterFunc(300*time.Millisecond, func() { link.cut(); stops[3]() })
	})
	res, err := train.Train(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sameModel(t, res, want)
	if !link.dead.Load() {
		t.Fatalf("the run ended after %d iterations, before the link was cut", res.Opt.Iters[0])
	}
	// The silence was the coordinator's own: no worker that came back
	// is taken for stuck and left out for the rest of the job.
	for _, e := range seen.FilterMessageSnippet("worker stuck").All() {
		t.Errorf("%s %v", e.Message, e.ContextMap())
	}
}

// link forwards TCP connections to a server until cut, then swallows
// what either side sends and accepts no new connection: a partition,
// which neither end sees but by timeouts.
type link struct {
	ln    net.Listener
	dead  atomic.Bool
	mu    sync.Mutex
	conns []net.Conn // both ends of every connection, closed at the test's end
}

func newLink(t *testing.T, to string) *link {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &link{ln: ln}
	t.Cleanup(func() {
		ln.Close()
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, c := range l.conns {
			c.Close()
		}
	})
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			l.mu.Lock()
			l.conns = append(l.conns, in, out)
			l.mu.Unlock()
			go l.pipe(out, in)
			go l.pipe(in, out)
		}
	}()
	return l
}

func (l *link) addr() string { return l.ln.Addr().String() }

func (l *link) cut() {
	l.dead.Store(true)
	l.ln.Close()
}

// pipe copies from src to dst while the link is up, and reads and drops
// src's bytes once it is cut.
func (l *link) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if !l.dead.Load() {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}

// TestBetweenRoundsEachRound: the coordinator offers its connection a
// move at every round's start (transport.ConnectNear's between), and a
// move made there, a reconnection forced between two rounds, changes no
// bit of the model: the round waits for the new connection.
func TestBetweenRoundsEachRound(t *testing.T) {
	path := bandedData(t, 2000, 2, 1)
	cfg := train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "newton", MaxIter: 50}, Eps: 1e-3}}
	want := localModel(t, path, 8, cfg)
	var c *Cluster
	var calls atomic.Int64
	between := func() bool {
		if calls.Add(1) != 3 {
			return false
		}
		c.nc.ForceReconnect()
		return true
	}
	c, _, _ = startCluster(t, path, 2, 8, clusterOptions{parallel: 1,
		config: func(cfg *Config) { cfg.BetweenRounds = between }})
	res, err := train.Train(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sameModel(t, res, want)
	if got, rounds := calls.Load(), c.Stats().Rounds; got != int64(rounds) || rounds < 3 {
		t.Errorf("between was called %d times in %d rounds, want once a round", got, rounds)
	}
	if n := c.nc.Stats().Reconnects; n != 1 {
		t.Errorf("%d reconnections, want the one made between rounds", n)
	}
}
