// An external test: the worker's side is a package that imports this one.
package transport_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/internal/natstest"
	"github.com/osgm-svm/osgm/pkg/transport"
	"github.com/osgm-svm/osgm/pkg/transport/worker"
)

// A server that refuses the credentials ends the wait, and a worker's
// Run, with the server's reason: nats.go closes such a connection, and a
// closed one never comes up. A coordinator used to wait out its 30 s,
// and a worker stayed up doing nothing, where a supervisor could not see
// the failure.
func TestRefusedCredentialsEnd(t *testing.T) {
	url := natstest.Run(t, &server.Options{Username: "u", Password: "right"}).ClientURL()
	connect := func(t *testing.T) *nats.Conn {
		nc, err := transport.Connect(url, "refused", transport.Auth{User: "u", Password: "wrong"}, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	for _, tc := range []struct {
		name string
		run  func(nc *nats.Conn) error
	}{
		{"WaitConnected", func(nc *nats.Conn) error { return transport.WaitConnected(context.Background(), nc, time.Hour) }},
		{"Worker.Run", func(nc *nats.Conn) error {
			return worker.New(nc, worker.Config{Name: "refused", Log: zap.NewNop()}).Run(context.Background())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { done <- tc.run(connect(t)) }()
			select {
			case err := <-done:
				if !errors.Is(err, nats.ErrAuthorization) {
					t.Fatalf("got %v, want the server's authorization violation", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("still waiting on a connection the server refused")
			}
		})
	}
}
