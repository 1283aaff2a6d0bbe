package transport

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
)

// BenchmarkBroadcast measures what the scaling model needs: bytes per
// second that one NATS server delivers on loopback when one publisher
// sends a point in max_payload chunks to `subs` subscribers.
func BenchmarkBroadcast(b *testing.B) {
	for _, subs := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("subs=%d", subs), func(b *testing.B) {
			srv, err := Embedded(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Shutdown()
			connect := func() *nats.Conn { return benchConn(b, srv.ClientURL()) }
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
			Chunks(KindPoint, 1, 0, 0, payload, int(pub.MaxPayload()), func(c []byte) error { sent += int64(len(c)); return nil })
			b.SetBytes(sent * int64(subs))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				want := got.Load() + sent*int64(subs)
				Chunks(KindPoint, 1, uint64(i), 0, payload, int(pub.MaxPayload()), func(c []byte) error {
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

// BenchmarkRoundTrip measures a round's floor on the in-process bus: one
// small broadcast, each of `workers` subscribers answering with a small
// message, the publisher waiting for every answer, as the coordinator
// does. It is the fixed cost per pass that small data sets pay.
func BenchmarkRoundTrip(b *testing.B) {
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			srv, err := Embedded("")
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Shutdown()
			connect := func() *nats.Conn { return benchConn(b, srv.ClientURL(), nats.InProcessServer(srv)) }
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

// benchConn connects a benchmark's client and waits until it is up.
func benchConn(b *testing.B, url string, opts ...nats.Option) *nats.Conn {
	nc, err := Connect(url, "bench", Auth{}, zap.NewNop(), opts...)
	if err != nil {
		b.Fatal(err)
	}
	WaitConnected(nc, 5*time.Second)
	return nc
}
