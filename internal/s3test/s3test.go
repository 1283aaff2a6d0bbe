// Package s3test starts a real S3-compatible server for tests: SeaweedFS
// (Apache-2.0), built from its module by .ci/run into a cache outside the
// checkout, since go install refuses a module with replace directives.
package s3test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/osgm-svm/osgm/internal/testport"
)

// Credentials the server accepts.
const (
	AccessKey = "osgm-test"
	SecretKey = "osgm-test-secret"
)

// Server is a running SeaweedFS with its S3 API.
type Server struct {
	Endpoint string // http://127.0.0.1:port
	Client   *minio.Client
	t        testing.TB
	args     []string
	logs     *os.File
	cmd      *exec.Cmd
}

// binary is the weed binary: $OSGM_WEED, or the cache .ci/run fills.
func binary() string {
	if b := os.Getenv("OSGM_WEED"); b != "" {
		return b
	}
	matches, _ := filepath.Glob("/var/cache/osgm/weed-*")
	if len(matches) == 0 {
		return ""
	}
	return matches[len(matches)-1]
}

// Start runs a server for the test, or skips it when no weed binary is
// built (OSGM_S3_TESTS=require makes that a failure, as in CI).
func Start(t testing.TB) *Server {
	t.Helper()
	bin := binary()
	if bin == "" {
		if os.Getenv("OSGM_S3_TESTS") == "require" {
			t.Fatal("no SeaweedFS binary (OSGM_WEED, or /var/cache/osgm/weed-*): .ci/run builds it")
		}
		t.Skip("no SeaweedFS binary: set OSGM_WEED, or run .ci/run once")
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "s3.json")
	os.WriteFile(config, []byte(fmt.Sprintf(`{"identities":[{"name":"osgm","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","Write","List","Tagging"]}]}`, AccessKey, SecretKey)), 0o600)
	port := func() string { return fmt.Sprint(testport.Free(t)) }
	s3Port := port()
	// Every port is given: left out, a gRPC port is its HTTP port plus
	// 10,000, which no one checked was free (a master once died on one a
	// client connection held).
	args := []string{"server", "-dir", dir, "-ip", "127.0.0.1", "-ip.bind", "127.0.0.1",
		"-master.port", port(), "-master.port.grpc", port(), "-volume.port", port(), "-volume.port.grpc", port(),
		"-filer.port", port(), "-filer.port.grpc", port(),
		"-s3", "-s3.port", s3Port, "-s3.port.grpc", port(), "-s3.config", config, "-volume.max", "0"}
	logs, _ := os.Create(filepath.Join(dir, "weed.log"))
	s := &Server{Endpoint: "http://127.0.0.1:" + s3Port, t: t, args: append([]string{bin}, args...), logs: logs}
	t.Cleanup(func() { s.Stop(); logs.Close() })
	client, err := minio.New("127.0.0.1:"+s3Port, &minio.Options{Creds: credentials.NewStaticV4(AccessKey, SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	s.Client = client
	s.Restart()
	return s
}

// Stop kills the server, as a crash would.
func (s *Server) Stop() {
	if s.cmd != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.cmd = nil
	}
}

// Restart starts the server (again, over the same data) and waits until
// it serves.
func (s *Server) Restart() {
	t := s.t
	t.Helper()
	s.Stop()
	cmd := exec.Command(s.args[0], s.args[1:]...)
	cmd.Stdout, cmd.Stderr = s.logs, s.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.cmd = cmd
	// Up once a bucket can be made: the master, volume and filer start
	// one after another, in about two seconds.
	ctx := context.Background()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		ok, err := s.Client.BucketExists(ctx, "probe")
		if err == nil && !ok {
			err = s.Client.MakeBucket(ctx, "probe", minio.MakeBucketOptions{})
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(s.logs.Name())
			t.Fatalf("SeaweedFS did not come up: %v\n%s", err, tail(b, 3000))
		}
	}
}

func tail(b []byte, n int) []byte { return b[max(len(b)-n, 0):] }

// Put stores file's bytes as bucket/key (making the bucket) and returns
// its s3:// URL.
func (s *Server) Put(t testing.TB, bucket, key, file string) string {
	t.Helper()
	ctx := context.Background()
	if ok, _ := s.Client.BucketExists(ctx, bucket); !ok {
		if err := s.Client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Client.FPutObject(ctx, bucket, key, file, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("s3://%s/%s", bucket, key)
}

// Get is the object bucket/key's bytes.
func (s *Server) Get(t testing.TB, bucket, key string) []byte {
	t.Helper()
	o, err := s.Client.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	if err != nil {
		t.Fatalf("%s/%s: %v", bucket, key, err)
	}
	return b
}

// Env points this process's S3 clients at the server, with its
// credentials, for the test.
func (s *Server) Env(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL", s.Endpoint)
	t.Setenv("AWS_ACCESS_KEY_ID", AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", SecretKey)
	t.Setenv("AWS_REGION", "us-east-1")
}
