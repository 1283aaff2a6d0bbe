package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/internal/natstest"
	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/status"
	"github.com/osgm-svm/osgm/pkg/train"
	"github.com/osgm-svm/osgm/pkg/transport"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// BenchmarkBroadcast measures what the scaling model needs: bytes per
// second that one NATS server delivers on loopback when one publisher
// sends a point in max_payload chunks to `subs` subscribers.
func BenchmarkBroadcast(b *testing.B) {
	for _, subs := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("subs=%d", subs), func(b *testing.B) {
			srv, err := transport.Embedded(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Shutdown()
			connect := func() *nats.Conn { return connected(b, srv.ClientURL()) }
			pub := connect()
			defer pub.Close()
			var got atomic.Int64
			for i := 0; i < subs; i++ {
				nc := connect()
				defer nc.Close()
				sub, _ := nc.Subscribe("bench", func(m *nats.Msg) { got.Add(int64(len(m.Data))) })
				sub.SetPendingLimits(-1, -1)
				nc.Flush()
			}
			payload := make([]byte, 8<<20) // a 1 M-feature point
			sent := int64(0)               // bytes on the wire, headers included
			wire.Chunks(wire.KindPoint, 1, 0, 0, payload, int(pub.MaxPayload()), func(c []byte) error { sent += int64(len(c)); return nil })
			b.SetBytes(sent * int64(subs))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				want := got.Load() + sent*int64(subs)
				wire.Chunks(wire.KindPoint, 1, uint64(i), 0, payload, int(pub.MaxPayload()), func(c []byte) error {
					return pub.Publish("bench", c)
				})
				pub.Flush()
				for got.Load() < want {
					time.Sleep(50 * time.Microsecond)
				}
			}
		})
	}
}

// BenchmarkBroadcastServers sends the 8 MB point to 6 subscribers spread
// over 1 or 3 servers of a NATS cluster (subscriber i on server i mod S,
// the publisher on server 0), and reports the bytes each server sends a
// point (pub-server-MB/op: the publisher's; max-other-MB/op: the busiest
// other). One server sends every copy; in a cluster the publisher's
// server sends its own subscribers' copies and one per other server,
// which serve theirs. On this machine all servers share its two cores,
// so the time here says nothing of separate hosts; the bytes do.
func BenchmarkBroadcastServers(b *testing.B) {
	const subs = 6
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("servers=%d", n), func(b *testing.B) {
			servers := natstest.Cluster(b, n)
			pub := connected(b, servers[0].ClientURL())
			defer pub.Close()
			var got atomic.Int64
			var seen [subs]atomic.Int64
			for i := range subs {
				nc := connected(b, servers[i%n].ClientURL())
				defer nc.Close()
				sub, _ := nc.Subscribe("bench", func(m *nats.Msg) { seen[i].Add(1); got.Add(int64(len(m.Data))) })
				sub.SetPendingLimits(-1, -1)
				nc.Flush()
			}
			// Interest reaches the publisher's server over the routes a
			// moment after the subscriptions: empty messages until every
			// subscriber has one.
			natstest.WaitFor(b, 10*time.Second, "every subscriber reached", func() bool {
				pub.Publish("bench", nil)
				pub.Flush()
				time.Sleep(5 * time.Millisecond)
				for i := range seen {
					if seen[i].Load() == 0 {
						return false
					}
				}
				return true
			})
			payload := make([]byte, 8<<20)
			sent := int64(0)
			wire.Chunks(wire.KindPoint, 1, 0, 0, payload, int(pub.MaxPayload()), func(c []byte) error { sent += int64(len(c)); return nil })
			out := func() []int64 {
				var o []int64
				for _, s := range servers {
					v, _ := s.Varz(nil)
					o = append(o, v.OutBytes)
				}
				return o
			}
			b.SetBytes(sent * subs)
			before := out()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				want := got.Load() + sent*subs
				wire.Chunks(wire.KindPoint, 1, uint64(i), 0, payload, int(pub.MaxPayload()), func(c []byte) error {
					return pub.Publish("bench", c)
				})
				pub.Flush()
				for got.Load() < want {
					time.Sleep(50 * time.Microsecond)
				}
			}
			b.StopTimer()
			after, busiest := out(), 0.0
			perOp := func(i int) float64 { return float64(after[i]-before[i]) / 1e6 / float64(b.N) }
			for i := 1; i < n; i++ {
				busiest = max(busiest, perOp(i))
			}
			b.ReportMetric(perOp(0), "pub-server-MB/op")
			b.ReportMetric(busiest, "max-other-MB/op")
		})
	}
}

// BenchmarkEmbedded measures the embedded server's start, which every
// run without -nats pays before its workers can join: wall time and the
// CPU time the process spent on it (cpu-ms/op; polling the server from a
// spinning loop cost a core for the whole start).
func BenchmarkEmbedded(b *testing.B) {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	before := cpu()
	for i := 0; i < b.N; i++ {
		srv, err := transport.Embedded("")
		if err != nil {
			b.Fatal(err)
		}
		srv.Shutdown()
		srv.WaitForShutdown()
	}
	b.ReportMetric(float64(cpu()-before)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
}

// BenchmarkRoundTrip measures a round's floor on the in-process bus: one
// small broadcast, each of `workers` subscribers answering with a small
// message, the publisher waiting for every answer, as the coordinator
// does. It is the fixed cost per pass that small data sets pay.
func BenchmarkRoundTrip(b *testing.B) {
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			srv, err := transport.Embedded("")
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Shutdown()
			connect := func() *nats.Conn { return connected(b, srv.ClientURL(), nats.InProcessServer(srv)) }
			coord := connect()
			defer coord.Close()
			answers := make(chan struct{}, 16)
			up, _ := coord.Subscribe("up", func(*nats.Msg) { answers <- struct{}{} })
			defer up.Unsubscribe()
			reply := make([]byte, 1000)
			for i := 0; i < workers; i++ {
				nc := connect()
				defer nc.Close()
				nc.Subscribe("down", func(*nats.Msg) { nc.Publish("up", reply) })
				nc.Flush()
			}
			coord.Flush()
			point := make([]byte, 1000)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				coord.Publish("down", point)
				for range workers {
					<-answers
				}
			}
		})
	}
}

// connected connects a test's or benchmark's client and waits until it
// is up.
func connected(tb testing.TB, url string, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	nc, err := transport.Connect(url, "test", transport.Auth{}, zap.NewNop(), opts...)
	if err != nil {
		tb.Fatal(err)
	}
	if err := transport.WaitConnected(context.Background(), nc, 5*time.Second); err != nil {
		nc.Close()
		tb.Fatal(err)
	}
	return nc
}

// BenchmarkRound measures issue 4's target 5 in one process: a
// value+gradient round over the same shards evaluated in process (local)
// and by two workers over the embedded server, connected through memory
// with a goroutine per core each, as the coordinator runs them
// (coordinator -method hdm makes exactly these rounds). The data is the
// file OSGM_BENCH_FILE names, or a generated one with 100,000 features.
func BenchmarkRound(b *testing.B) {
	path := os.Getenv("OSGM_BENCH_FILE")
	if path == "" {
		path = wideData(b, 40000, 100000, 60)
	}
	info, err := input.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	n := len(input.Layout(info.Size, 0))
	shards := loadShards(b, path, n)
	sum := shard.Summarize(objective.NewLocal(shards, 1).Meta(), shard.SquaredHinge)
	labels, _, err := train.Classes(sum)
	if err != nil {
		b.Fatal(err)
	}
	features := int(sum.MaxIndex)
	rng := rand.New(rand.NewPCG(1, 2))
	x := [][]float64{make([]float64, features+1)} // the bias weight last
	for j := range x[0] {
		x[0][j] = 1e-3 * rng.NormFloat64()
	}
	round := func(b *testing.B, be objective.Backend) {
		if err := be.SetClasses(labels); err != nil {
			b.Fatal(err)
		}
		o := objective.New(be, features, 1e-4, 1)
		f, g := make([]float64, 1), [][]float64{make([]float64, features+1)}
		b.ResetTimer()
		for range b.N {
			if err := o.Eval(x, f, g); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("local", func(b *testing.B) { round(b, objective.NewLocal(shards, runtime.NumCPU())) })
	b.Run("nats", func(b *testing.B) {
		c, _, _ := startCluster(b, path, 2, n, clusterOptions{inProcess: true, parallel: runtime.NumCPU()})
		round(b, c)
	})
}

// wideData writes rows of nnz random features among features, real
// values, two classes.
func wideData(b *testing.B, rows, features, nnz int) string {
	rng := rand.New(rand.NewPCG(7, 8))
	path := filepath.Join(b.TempDir(), "wide")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	cols := make([]int, nnz)
	for range rows {
		fmt.Fprintf(w, "%d", 2*rng.IntN(2)-1)
		for k := range cols {
			cols[k] = 1 + rng.IntN(features)
		}
		slices.Sort(cols)
		for k, j := range cols {
			if k == 0 || j != cols[k-1] {
				fmt.Fprintf(w, " %d:%.4g", j, rng.NormFloat64())
			}
		}
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	return path
}

// BenchmarkSparsePartial encodes a node sum of news20.t's shape at 2
// workers (28,000 columns of 20 problems) whose gradient is three
// quarters +0, as near its optimum: the bitmap and the other values.
func BenchmarkSparsePartial(b *testing.B) {
	const cols, K = 28_000, 20
	rng := rand.New(rand.NewPCG(1, 2))
	p := &reduce.Partial{Loss: make([]float64, K), BiasGrad: make([]float64, K), Grad: make([]float64, cols*K)}
	for j := range p.Grad {
		if rng.IntN(4) == 0 {
			p.Grad[j] = rng.NormFloat64()
		}
	}
	var buf []byte
	b.SetBytes(int64(8 * len(p.Grad)))
	for b.Loop() {
		buf = wire.AppendPartial(buf[:0], p)
	}
}

// BenchmarkStatusPage measures what an open status page costs a pass
// (issue 57's target: within 2%): value+gradient rounds at 32 in-process
// workers on a 1 M-feature file (OSGM_BENCH_FILE, or a generated one),
// without the page and with it, fed every round, listing the workers and
// read twice a second as the page reads it. Run with -count to alternate.
func BenchmarkStatusPage(b *testing.B) {
	path := os.Getenv("OSGM_BENCH_FILE")
	if path == "" {
		path = wideData(b, 40000, 1_000_000, 60)
	}
	info, err := input.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	n := len(input.Layout(info.Size, 0))
	c, _, _ := startCluster(b, path, 32, n, clusterOptions{inProcess: true, parallel: 1})
	sum := shard.Summarize(c.Meta(), shard.SquaredHinge)
	labels, _, err := train.Classes(sum)
	if err != nil || c.SetClasses(labels) != nil {
		b.Fatal(err)
	}
	features := int(sum.MaxIndex)
	o := objective.New(c, features, 1e-4, 1)
	x, f, g := [][]float64{make([]float64, features+1)}, make([]float64, 1), [][]float64{make([]float64, features+1)}
	for _, page := range []bool{false, true} {
		b.Run(fmt.Sprintf("page=%t", page), func(b *testing.B) {
			var board *status.Board
			if page {
				board = statusPage(b, c)
			}
			b.ResetTimer()
			for i := range b.N {
				if err := o.Eval(x, f, g); err != nil {
					b.Fatal(err)
				}
				if board != nil {
					board.Record(status.Record{Passes: i + 1, F: f[0], GradNorm: 1, GradTol: 1e-3})
				}
			}
		})
	}
}

// statusPage serves a board listing c's workers and reads it twice a
// second until b ends, as an open page does.
func statusPage(b *testing.B, c *Cluster) *status.Board {
	board := status.NewBoard(time.Now)
	board.SetWorkers(func() []status.Worker {
		var out []status.Worker
		for _, v := range c.Workers() {
			out = append(out, status.Worker{Name: v.ID, State: v.State, Shards: v.Shards, Passes: v.Rounds})
		}
		return out
	})
	addr, stop, err := board.Serve("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		for t := time.NewTicker(500 * time.Millisecond); ; {
			select {
			case <-done:
				return
			case <-t.C:
				if r, err := http.Get("http://" + addr + "/api/status"); err == nil {
					io.Copy(io.Discard, r.Body)
					r.Body.Close()
				}
			}
		}
	}()
	b.Cleanup(func() { close(done); stop() })
	return board
}
