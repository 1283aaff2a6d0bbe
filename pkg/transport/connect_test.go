package transport

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// WaitConnected ends at its timeout, or sooner when its context ends: a
// coordinator told to stop (SIGTERM) while NATS is out of reach used to
// wait out the whole 30 s.
func TestWaitConnectedEnds(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + l.Addr().String()
	l.Close() // nothing listens there now
	tests := []struct {
		name    string
		cancel  time.Duration // cancel the context after this long (0: never)
		timeout time.Duration
		want    string
		isCtx   bool
	}{
		{"timeout", 0, 200 * time.Millisecond, "not connected to NATS after 200ms", false},
		{"cancelled", 100 * time.Millisecond, time.Minute, "while connecting to NATS", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := Connect(url, "wait", Auth{}, zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel > 0 {
				time.AfterFunc(tc.cancel, cancel)
			}
			done := make(chan error, 1)
			go func() { done <- WaitConnected(ctx, nc, tc.timeout) }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, context.Canceled) != tc.isCtx {
					t.Fatalf("got %v, want %q (context's error: %v)", err, tc.want, tc.isCtx)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("WaitConnected did not return")
			}
		})
	}
}
