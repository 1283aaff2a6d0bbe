package transport

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/internal/natstest"
)

func TestNearFirst(t *testing.T) {
	a := startServer(t, &server.Options{ServerName: "nats@h1"})
	b := startServer(t, &server.Options{ServerName: "nats-2@h2"})
	unnamed := startServer(t, &server.Options{})
	down := closedURL(t)
	tests := []struct {
		name, url, host string
		want            string
		ok              bool
	}{
		{"own host's server first", a + "," + b, "h2", b + "," + a, true},
		{"already first", a + "," + b, "h1", a + "," + b, true},
		{"no server on the host", a + "," + b, "h3", a + "," + b, false},
		{"a name ending in the host is not enough", a + "," + b, "2@h2", a + "," + b, false},
		{"unnamed servers", unnamed + "," + a, "h1", a + "," + unnamed, true},
		{"one server down", down + "," + a + "," + b, "h2", b + "," + down + "," + a, true},
		{"no host given", a + "," + b, "", a + "," + b, false},
		{"one server", b, "h2", b, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := NearFirst(context.Background(), tt.url, tt.host, Auth{}, 0)
			if err != nil || got != tt.want || ok != tt.ok {
				t.Errorf("NearFirst(%q, %q) = %q, %v, %v; want %q, %v", tt.url, tt.host, got, ok, err, tt.want, tt.ok)
			}
		})
	}
}

// A client on a host whose server has not started yet waits for it
// rather than settling for another, and the connection it opens stays
// with it.
func TestConnectNearWaitsForItsServer(t *testing.T) {
	other := startServer(t, &server.Options{ServerName: "nats@h1"})
	// Until its server starts, the port takes connections and answers
	// nothing, as a host whose server is still starting does: once the
	// client has asked there in vain, the server starts.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := silent.Addr().(*net.TCPAddr).Port
	near := fmt.Sprintf("nats://127.0.0.1:%d", port)
	asked := make(chan struct{})
	go func() {
		defer close(asked) // also when the test ends first (Close)
		if c, err := silent.Accept(); err == nil {
			c.Close()
		}
	}()
	started := make(chan *server.Server, 1)
	go func() {
		<-asked
		silent.Close()
		s, err := server.NewServer(&server.Options{ServerName: "nats-2@h2", Host: "127.0.0.1", Port: port, NoSigs: true, NoLog: true})
		if err != nil {
			t.Error(err)
			close(started)
			return
		}
		s.Start()
		started <- s
	}()
	defer func() {
		if s := <-started; s != nil {
			s.Shutdown()
		}
	}()
	defer silent.Close()
	nc, _, err := ConnectNear(context.Background(), other+","+near, "h2", "worker", Auth{}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := WaitConnected(context.Background(), nc, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := nc.ConnectedServerName(); got != "nats-2@h2" {
		t.Errorf("connected to %q, want the server on h2", got)
	}
	if servers := strings.Join(nc.Servers(), ","); !strings.HasPrefix(servers, near) {
		t.Errorf("server pool %s: the near server is not first", servers)
	}
}

// closedURL is a NATS URL on a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	s := natstest.Run(t, &server.Options{})
	s.Shutdown()
	return s.ClientURL()
}

// cluster3 is three routed servers named for hosts h0-h2, their client
// URLs, and cutH1, which shuts h1's down and returns what starts it
// again on the same client port.
func cluster3(t *testing.T) (servers []*server.Server, urls []string, cutH1 func() (heal func() *server.Server)) {
	servers = natstest.NamedCluster(t, "nats@h0", "nats@h1", "nats@h2")
	for _, s := range servers {
		urls = append(urls, s.ClientURL())
	}
	cutH1 = func() func() *server.Server {
		o := natstest.MemberOptions("nats@h1", servers)
		o.Port = servers[1].Addr().(*net.TCPAddr).Port
		servers[1].Shutdown()
		return func() *server.Server { return natstest.On(t, o) }
	}
	return servers, urls, cutH1
}

// failOver waits for a client of h1 to be on another host's server.
func failOver(t *testing.T, nc *nats.Conn) {
	t.Helper()
	natstest.WaitFor(t, 20*time.Second, "the client to fail over", func() bool {
		return nc.IsConnected() && nc.ConnectedServerName() != "nats@h1"
	})
}

// connectTo is connectNear to urls for a client on host, connected.
func connectTo(t *testing.T, urls []string, host string, period, grace time.Duration) (*nats.Conn, *home) {
	t.Helper()
	nc, h, err := connectNear(context.Background(), strings.Join(urls, ","), host, "c", Auth{}, zap.NewNop(), period, grace)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	natstest.WaitFor(t, 10*time.Second, "a connection", nc.IsConnected)
	return nc, h
}

// TestBackHomeAfterAHeal: a client whose own host's server goes away
// fails over to another host's, and once its server is back, moves back
// to it; a client of another host stays where it was. Neither starts a
// round, so the move is made once it has waited its grace for one.
func TestBackHomeAfterAHeal(t *testing.T) {
	servers, urls, cutH1 := cluster3(t)
	away, _ := connectTo(t, urls, "h1", 100*time.Millisecond, 200*time.Millisecond)
	stays, _ := connectTo(t, urls, "h0", 100*time.Millisecond, 200*time.Millisecond)
	heal := cutH1()
	failOver(t, away)
	healed := heal()
	natstest.ReachEachOther(t, []*server.Server{servers[0], healed, servers[2]})
	natstest.WaitFor(t, 20*time.Second, "the client to move back home", func() bool {
		return away.IsConnected() && away.ConnectedServerName() == "nats@h1"
	})
	if got := stays.ConnectedServerName(); got != "nats@h0" {
		t.Errorf("the other host's client is on %s, not its own host's", got)
	}
}

// TestBackHomeBetweenRounds: a client that runs rounds moves home at a
// round's start (between), not while a round may be under way: with a
// grace longer than the test, it stays away until between is called,
// and between moves it once.
func TestBackHomeBetweenRounds(t *testing.T) {
	_, urls, cutH1 := cluster3(t)
	away, h := connectTo(t, urls, "h1", 50*time.Millisecond, time.Hour)
	between := func() bool { return h.between(away) }
	if between() {
		t.Fatal("between moved a client that is home")
	}
	heal := cutH1()
	failOver(t, away)
	heal()
	natstest.WaitFor(t, 20*time.Second, "the move home to be due", h.due.Load)
	if away.ConnectedServerName() == "nats@h1" {
		t.Fatal("the client moved home with no round started")
	}
	if !between() {
		t.Fatal("between did not move the client home")
	}
	natstest.WaitFor(t, 20*time.Second, "the client to move back home", func() bool {
		return away.IsConnected() && away.ConnectedServerName() == "nats@h1"
	})
	if between() {
		t.Error("between moved the client again")
	}
}
