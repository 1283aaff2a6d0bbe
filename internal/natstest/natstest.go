// Package natstest starts real NATS servers in-process for tests, as
// nats-server's own tests do, and polls instead of sleeping.
package natstest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Run starts a server on a random loopback port with opts, stopped when
// the test ends.
func Run(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	opts.Port = -1
	return On(t, opts)
}

// On starts a server with opts on opts.Port of the loopback (a test
// restarts a server on the port of the one it stopped), stopped when the
// test ends.
func On(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.NoSigs, opts.NoLog = "127.0.0.1", true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("port %d: %v", opts.Port, err)
	}
	s.Start() // returns once it listens
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("port %d: the server did not start", opts.Port)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// Cluster starts n servers routed to each other, and returns once each
// reaches every other.
func Cluster(t testing.TB, n int) []*server.Server {
	t.Helper()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprint("s", i)
	}
	return NamedCluster(t, names...)
}

// NamedCluster is Cluster of servers with the names given.
func NamedCluster(t testing.TB, names ...string) []*server.Server {
	t.Helper()
	var servers []*server.Server
	for _, name := range names {
		servers = append(servers, Run(t, MemberOptions(name, servers)))
	}
	ReachEachOther(t, servers)
	return servers
}

// MemberOptions are the options of a server named name that joins the
// cluster of servers (nil: the first). Routes go to the first alone,
// listening already: a server dialling a port nobody listens on yet can
// connect to itself from it (TCP's self-connect), and the server meant
// for that port then cannot start.
func MemberOptions(name string, servers []*server.Server) *server.Options {
	o := &server.Options{ServerName: name, Cluster: server.ClusterOpts{Name: "osgm", Host: "127.0.0.1", Port: -1}}
	if len(servers) > 0 {
		o.Routes = server.RoutesFromStr(fmt.Sprintf("nats://%s", servers[0].ClusterAddr()))
	}
	return o
}

// ReachEachOther returns once a message published on any of the servers
// reaches a subscriber on every other.
func ReachEachOther(t testing.TB, servers []*server.Server) {
	t.Helper()
	conns := make([]*nats.Conn, len(servers))
	for i, s := range servers {
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		conns[i] = nc
	}
	for i, to := range conns {
		sub, err := to.SubscribeSync(fmt.Sprint("probe.", i))
		if err != nil {
			t.Fatal(err)
		}
		to.Flush()
		for j, from := range conns {
			if j == i {
				continue
			}
			WaitFor(t, 10*time.Second, fmt.Sprintf("server %d to reach server %d", j, i), func() bool {
				from.Publish(sub.Subject, nil)
				_, err := sub.NextMsg(20 * time.Millisecond)
				return err == nil
			})
		}
		sub.Unsubscribe()
	}
}

// URLs lists every server's URL, the at-th (round the list) first: a
// client that keeps that order connects to it and fails over to the next.
func URLs(servers []*server.Server, at int) string {
	var urls []string
	for i := range servers {
		urls = append(urls, servers[(at+i)%len(servers)].ClientURL())
	}
	return strings.Join(urls, ",")
}

// WaitFor polls cond until it holds, failing the test after timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", timeout, what)
		}
	}
}
