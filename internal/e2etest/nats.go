package e2etest

import (
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
