package transport

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
