package e2etest

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// WorkerConn connects with the worker's credentials; the server's
// refusals (permission violations) arrive on the channel.
func WorkerConn(t *testing.T, url string) (*nats.Conn, chan error) {
	t.Helper()
	violations := make(chan error, 8)
	nc, err := nats.Connect(url, nats.UserInfo("worker", "w-secret"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, violations
}

// WantRefused publishes on each subject and fails unless the server
// refuses it with a permissions violation.
func WantRefused(t *testing.T, nc *nats.Conn, violations chan error, subjects ...string) {
	t.Helper()
	for _, subject := range subjects {
		nc.Publish(subject, []byte("forged"))
		nc.Flush()
		select {
		case err := <-violations:
			if !strings.Contains(err.Error(), "ermissions") {
				t.Fatalf("publishing on %s: unexpected error %v", subject, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("a worker could publish on %s: the permissions are too wide", subject)
		}
	}
}

// NATSServer starts a nats-server process with JetStream on a free port.
func NATSServer(t *testing.T, extra ...string) string {
	port := FreePort(t)
	return ServerOn(t, port, append([]string{"-a", "127.0.0.1", "-p", fmt.Sprint(port), "-js", "-sd", t.TempDir()}, extra...)...)
}

// ServerOn starts nats-server with args, which make it listen on port,
// and returns its URL once it does.
func ServerOn(t *testing.T, port int, args ...string) string {
	p := Start(t, "nats-server", args...)
	CheckFor(t, 10*time.Second, "nats-server to listen", func() bool {
		return Dial(port) && !strings.Contains(p.Output(), "fatal")
	})
	return fmt.Sprintf("nats://127.0.0.1:%d", port)
}

// Dial tells whether a server listens on the loopback port.
func Dial(port int) bool {
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err == nil {
		c.Close()
	}
	return err == nil
}

// InterruptAtCheckpoint sends c SIGINT once its checkpoint ck exists and
// waits for it to stop, skipping the test if it wrote its model first.
func InterruptAtCheckpoint(t *testing.T, c *Proc, ck, model string) {
	t.Helper()
	CheckFor(t, time.Minute, "a checkpoint", func() bool { _, err := os.Stat(ck); return err == nil })
	c.Cmd.Process.Signal(os.Interrupt)
	<-c.Done()
	if _, err := os.Stat(model); err == nil {
		t.Skip("the run ended before the interruption")
	}
}
