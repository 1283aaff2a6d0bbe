package transport

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// soon as the cluster answers, has three replicas, or the one asked for;
// on a single server, one; more than the servers are refused; and a
// store of three outlives its leader's server.
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
		name     string
		url      string
		replicas int
		want     int
	}{
		{"cluster", natstest.URLs(servers, 0), AutoReplicas, 3},
		{"cluster, one copy asked", natstest.URLs(servers, 0), 1, 1},
		{"single", single.ClientURL(), AutoReplicas, 1},
	} {
		store := createStore(t, c.url, "b"+fmt.Sprint(c.replicas), c.replicas)
		st, err := store.Status(context.Background())
		if err != nil || st.Replicas() != c.want {
			t.Fatalf("%s: a store of %d replicas (%v), want %d", c.name, st.Replicas(), err, c.want)
		}
	}
	// More copies than servers: refused, saying what to do, never
	// made with fewer.
	nc, _ := nats.Connect(natstest.URLs(servers, 0))
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = CreateStore(ctx, js, jetstream.ObjectStoreConfig{Bucket: "five"}, 5)
	if !errors.Is(err, ErrReplicas) || !strings.Contains(err.Error(), "-objstore-replicas 1") {
		t.Fatalf("5 copies on 3 servers: %v", err)
	}
	if _, err := js.ObjectStore(context.Background(), "five"); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("the store of 5 copies was made anyway (%v)", err)
	}
	if _, err := CreateStore(context.Background(), js, jetstream.ObjectStoreConfig{Bucket: "two"}, 2); err != nil {
		t.Fatalf("2 copies on 3 servers: %v", err)
	}

	// A store of three outlives the server that led it: what was put
	// is read back through another.
	store := createStore(t, natstest.URLs(servers, 0), "kept", AutoReplicas)
	// A stream just made answers puts once its copies have elected a
	// leader (under the race detector, a put before that had no
	// responder).
	natstest.WaitFor(t, 10*time.Second, "the store's leader", func() bool {
		st, err := store.Status(context.Background())
		return err == nil && st.(*jetstream.ObjectBucketStatus).StreamInfo().Cluster.Leader != ""
	})
	if _, err := store.PutBytes(context.Background(), "shard-000000", []byte("text of a shard")); err != nil {
		t.Fatal(err)
	}
	info, err := store.Status(context.Background())
	leader := info.(*jetstream.ObjectBucketStatus).StreamInfo().Cluster.Leader
	i := slices.IndexFunc(servers, func(s *server.Server) bool { return s.Name() == leader })
	if err != nil || i < 0 {
		t.Fatalf("the store's leader %q is none of the servers (%v)", leader, err)
	}
	servers[i].Shutdown()
	nc2, err := nats.Connect(natstest.URLs(servers, i+1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc2.Close)
	js2, _ := jetstream.New(nc2)
	var got []byte
	natstest.WaitFor(t, 30*time.Second, "the store's new leader", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		// What a coordinator restarted now does first: open its store.
		other, err := CreateStore(ctx, js2, jetstream.ObjectStoreConfig{Bucket: "kept"}, AutoReplicas)
		if err != nil {
			return false
		}
		got, err = other.GetBytes(ctx, "shard-000000")
		return err == nil
	})
	if string(got) != "text of a shard" {
		t.Fatalf("read back %q", got)
	}
}

// createStore connects to url and makes bucket of replicas copies once
// JetStream answers there.
func createStore(t *testing.T, url, bucket string, replicas int) jetstream.ObjectStore {
	t.Helper()
	nc, err := nats.Connect(url)
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
	store, err := CreateStore(ctx, js, jetstream.ObjectStoreConfig{Bucket: bucket}, replicas)
	if err != nil {
		t.Fatalf("%s of %d copies: %v", bucket, replicas, err)
	}
	return store
}

// TestRetryStore: an object store request that fails for want of an
// answer is tried again, after the waits storeRetries give; one that
// finds nothing there is not.
func TestRetryStore(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		fails int
		err   error
		calls int
		ok    bool
	}{
		{"answers at once", 0, nil, 1, true},
		{"answers after an election", 2, nats.ErrTimeout, 3, true},
		{"never answers", 10, nats.ErrTimeout, len(storeRetries) + 1, false},
		{"nothing there", 10, jetstream.ErrObjectNotFound, 1, false},
		{"no JetStream", 10, nats.ErrNoResponders, 1, false},
	} {
		calls := 0
		var waited []time.Duration
		err := retryStore(zap.NewNop(), "x", func() error {
			if calls++; calls <= c.fails {
				return c.err
			}
			return nil
		}, func(d time.Duration) { waited = append(waited, d) })
		if calls != c.calls || (err == nil) != c.ok || !slices.Equal(waited, storeRetries[:calls-1]) {
			t.Errorf("%s: %d calls after waits %v, error %v; want %d calls, ok %v", c.name, calls, waited, err, c.calls, c.ok)
		}
	}
}
