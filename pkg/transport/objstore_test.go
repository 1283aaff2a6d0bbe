package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/internal/natstest"
	"github.com/osgm-svm/osgm/internal/testport"
)

// A request to a bucket's stream that finds no responder is a stream
// whose replicas are being placed, and is tried again; the same answer
// to a request of the JetStream API means no JetStream, which no attempt
// changes. CI once saw a cluster's fresh checkpoint bucket taken for a
// server without JetStream.
func TestErrorClasses(t *testing.T) {
	cases := []struct {
		name        string
		err         error
		noJetStream bool
		final       bool
	}{
		{"api, no responders", nats.ErrNoResponders, true, true},
		{"api, not enabled", jetstream.ErrJetStreamNotEnabled, true, true},
		{"bucket, no responders", InBucket(nats.ErrNoResponders), false, false},
		{"bucket, wrapped no responders", InBucket(fmt.Errorf("get: %w", nats.ErrNoResponders)), false, false},
		{"bucket, no object", InBucket(jetstream.ErrObjectNotFound), false, true},
		{"bucket, timeout", InBucket(nats.ErrTimeout), false, false},
		{"bucket, success", InBucket(nil), false, false},
	}
	for _, c := range cases {
		if got := NoJetStream(c.err); got != c.noJetStream {
			t.Errorf("%s: NoJetStream = %v, want %v", c.name, got, c.noJetStream)
		}
		if got := c.err != nil && final(c.err); got != c.final {
			t.Errorf("%s: final = %v, want %v", c.name, got, c.final)
		}
	}
	if !errors.Is(InBucket(nats.ErrNoResponders), errStreamNotReady) {
		t.Error("a bucket without a responder is not reported as a stream not ready")
	}
}

// TestStoreReplicas: a store made on a JetStream cluster of three, as
// soon as the cluster answers, has three replicas; on a single server,
// one.
func TestStoreReplicas(t *testing.T) {
	// A clustered JetStream server needs its routes configured, and is
	// ready only once its peers are up: all three start before any is
	// waited for.
	ports := []int{testport.Free(t), testport.Free(t), testport.Free(t)}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	var servers []*server.Server
	for i, p := range ports {
		o := &server.Options{ServerName: fmt.Sprint("j", i), Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
			JetStream: true, StoreDir: t.TempDir(), Cluster: server.ClusterOpts{Name: "osgm", Host: "127.0.0.1", Port: p},
			Routes: server.RoutesFromStr(strings.Join(routes, ","))}
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		t.Cleanup(s.Shutdown)
		servers = append(servers, s)
	}
	single, err := Embedded(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(single.Shutdown)
	for _, c := range []struct {
		name string
		url  string
		want int
	}{{"cluster", natstest.URLs(servers, 0), 3}, {"single", single.ClientURL(), 1}} {
		nc, err := nats.Connect(c.url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, _ := jetstream.New(nc)
		natstest.WaitFor(t, 30*time.Second, "JetStream to answer", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := js.AccountInfo(ctx)
			return err == nil
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		store, err := CreateStore(ctx, js, jetstream.ObjectStoreConfig{Bucket: "b"})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		st, err := store.Status(ctx)
		if err != nil || st.Replicas() != c.want {
			t.Fatalf("%s: a store of %d replicas (%v), want %d", c.name, st.Replicas(), err, c.want)
		}
	}
}

// TestRetryStore: an object store request that fails for want of an
// answer is tried again, as storeRetries space it; one that finds nothing
// there is not.
func TestRetryStore(t *testing.T) {
	defer func(d []time.Duration) { storeRetries = d }(storeRetries)
	storeRetries = []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond}
	for _, c := range []struct {
		name  string
		fails int
		err   error
		calls int
		ok    bool
	}{
		{"answers at once", 0, nil, 1, true},
		{"answers after an election", 2, nats.ErrTimeout, 3, true},
		{"never answers", 10, nats.ErrTimeout, 4, false},
		{"nothing there", 10, jetstream.ErrObjectNotFound, 1, false},
		{"no JetStream", 10, nats.ErrNoResponders, 1, false},
	} {
		calls := 0
		err := RetryStore(zap.NewNop(), "x", func() error {
			if calls++; calls <= c.fails {
				return c.err
			}
			return nil
		})
		if calls != c.calls || (err == nil) != c.ok {
			t.Errorf("%s: %d calls, error %v; want %d calls, ok %v", c.name, calls, err, c.calls, c.ok)
		}
	}
}
