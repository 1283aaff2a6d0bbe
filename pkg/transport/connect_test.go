package transport

import (
	"context"
	"errors"
	"flag"
	"net"
	"os"
	"path/filepath"
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

// TestAuthFlags: both commands' credential flags default to their
// environment variables, and a flag given wins.
func TestAuthFlags(t *testing.T) {
	env := map[string]string{"NATS_USER": "u", "NATS_NKEY_FILE": "n", "NATS_CREDS_FILE": "c",
		"NATS_CA_FILE": "ca", "NATS_CERT_FILE": "cert", "NATS_KEY_FILE": "key"}
	for k, v := range env {
		t.Setenv(k, v)
	}
	parse := func(args ...string) Auth {
		var a Auth
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		a.Flags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return a
	}
	if got, want := parse(), (Auth{User: "u", NKeyFile: "n", CredsFile: "c", CAFile: "ca", CertFile: "cert", KeyFile: "key"}); got != want {
		t.Errorf("from the environment: %+v, want %+v", got, want)
	}
	got := parse("-user", "U", "-nkey", "N", "-creds", "C", "-tlsca", "CA", "-tlscert", "CERT", "-tlskey", "KEY")
	if want := (Auth{User: "U", NKeyFile: "N", CredsFile: "C", CAFile: "CA", CertFile: "CERT", KeyFile: "KEY"}); got != want {
		t.Errorf("from flags: %+v, want %+v", got, want)
	}
}

// TestSecretFiles: a password or token comes from the environment or from
// the file its _FILE variable names (a Docker secret), with the newline
// `echo` leaves trimmed; a missing or empty file, or both ways at once,
// is an error that names the variable.
func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		env     map[string]string
		want    Auth
		wantErr string
	}{
		{"variable", map[string]string{"NATS_PASSWORD": "p", "NATS_TOKEN": "t"}, Auth{Password: "p", Token: "t"}, ""},
		{"files", map[string]string{"NATS_PASSWORD_FILE": pw, "NATS_TOKEN_FILE": pw}, Auth{Password: "s3cret", Token: "s3cret"}, ""},
		{"missing file", map[string]string{"NATS_PASSWORD_FILE": filepath.Join(dir, "none")}, Auth{}, "NATS_PASSWORD_FILE: open " + filepath.Join(dir, "none")},
		{"empty file", map[string]string{"NATS_TOKEN_FILE": empty}, Auth{}, "NATS_TOKEN_FILE: " + empty + " is empty"},
		{"both", map[string]string{"NATS_PASSWORD": "p", "NATS_PASSWORD_FILE": pw}, Auth{}, "both NATS_PASSWORD and NATS_PASSWORD_FILE are set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, k := range []string{"NATS_USER", "NATS_PASSWORD", "NATS_TOKEN", "NATS_PASSWORD_FILE", "NATS_TOKEN_FILE"} {
				t.Setenv(k, c.env[k])
			}
			got, err := Auth{}.FromEnv()
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one with %q", err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("%+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}
