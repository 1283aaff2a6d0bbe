package s3_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/osgm-svm/osgm/internal/s3test"
	"github.com/osgm-svm/osgm/pkg/s3"
)

// TestObjects against a real S3-compatible server: ranged reads give the
// object's bytes from any position; a missing bucket or key and refused
// credentials are errors that name the object and the cause; and an
// object replaced after it was opened is refused, not read.
func TestObjects(t *testing.T) {
	srv := s3test.Start(t)
	srv.Env(t)
	file := filepath.Join(t.TempDir(), "data")
	want := bytes.Repeat([]byte("+1 1:0.5 7:2\n-1 3:1\n"), 5000)
	os.WriteFile(file, want, 0o644)
	url := srv.Put(t, "train", "dir/data.svm", file)
	ctx := context.Background()
	o, err := s3.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if o.Size != int64(len(want)) || o.ETag == "" {
		t.Fatalf("size %d, ETag %q", o.Size, o.ETag)
	}
	r := o.Reader(ctx)
	for _, at := range []int64{0, 12345, int64(len(want)) - 7} {
		if _, err := r.Seek(at, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, min(1000, int64(len(want))-at))
		if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, want[at:at+int64(len(got))]) {
			t.Fatalf("at %d: %v", at, err)
		}
	}
	r.Close()
	for _, c := range []struct{ url, want string }{
		{"s3://train/no-such-key", "no such object"},
		{"s3://no-such-bucket/x", "no such bucket"},
		{"s3://train", "not an s3://bucket/key URL"},
	} {
		if _, err := s3.Open(ctx, c.url); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), strings.TrimSuffix(c.url, "/x")) {
			t.Errorf("%s: %v, want %q", c.url, err, c.want)
		}
	}
	t.Run("refused credentials", func(t *testing.T) {
		t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
		if _, err := s3.Open(ctx, url); err == nil || !strings.Contains(err.Error(), "credentials were refused") {
			t.Fatalf("wrong secret: %v", err)
		}
	})
	// Replaced after it was opened: a read pinned to the old ETag fails.
	os.WriteFile(file, append([]byte("+1 2:1\n"), want...), 0o644)
	srv.Put(t, "train", "dir/data.svm", file)
	r = o.Reader(ctx)
	defer r.Close()
	if _, err := io.ReadAll(r); !errors.Is(err, s3.ErrChanged) {
		t.Fatalf("read of a replaced object: %v", err)
	}
}

// readingBig puts a 42 MB object (more than the sockets buffer) on a
// server of its own and reads its first MB: the server can then fail
// with the read under way.
func readingBig(t *testing.T) (srv *s3test.Server, url string, want []byte, r io.Reader, got []byte) {
	t.Helper()
	srv = s3test.Start(t)
	srv.Env(t)
	file := filepath.Join(t.TempDir(), "data")
	want = bytes.Repeat([]byte("+1 1:0.25 9:3\n"), 3000000)
	os.WriteFile(file, want, 0o644)
	url = srv.Put(t, "train", "big", file)
	ctx := context.Background()
	o, err := s3.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	rc := o.Reader(ctx)
	t.Cleanup(func() { rc.Close() })
	got = make([]byte, 1<<20)
	if _, err := io.ReadFull(rc, got); err != nil {
		t.Fatal(err)
	}
	return srv, url, want, rc, got
}

// TestReadSurvivesRestart: a server killed in the middle of a read and
// started again over the same data costs the reader a wait, not its
// bytes; the reads go on from where the broken one stopped.
func TestReadSurvivesRestart(t *testing.T) {
	srv, _, want, r, got := readingBig(t)
	srv.Stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(time.Second)
		srv.Restart()
	}()
	rest, err := io.ReadAll(r)
	<-done
	if err != nil || !bytes.Equal(append(got, rest...), want) {
		t.Fatalf("read through a restart: %v, %d bytes of %d", err, len(got)+len(rest), len(want))
	}
}

// TestReadGivesUpOnAServerGone: a server killed in the middle of a read
// that does not come back fails the read after the retries (about a
// minute with the client's own), with an error that names the object,
// instead of a load that hangs.
func TestReadGivesUpOnAServerGone(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the retries (about a minute)")
	}
	srv, url, _, r, _ := readingBig(t)
	srv.Stop()
	start := time.Now()
	_, err := io.ReadAll(r)
	waited := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), url) {
		t.Fatalf("read from a server gone: %v, want an error naming %s", err, url)
	}
	if waited < 20*time.Second || waited > 3*time.Minute {
		t.Fatalf("gave up after %v, want the retries' minute or so", waited)
	}
	t.Logf("gave up after %v: %v", waited, err)
}
