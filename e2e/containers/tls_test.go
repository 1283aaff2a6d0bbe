package containers

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/osgm-svm/osgm/internal/e2etest"
)

// TestContainerTLS is the README's TLS overlay (deploy/compose.tls.yaml)
// with certificates from scripts/certs.sh: the containers train to the
// local model's bytes over TLS; the published port refuses plain text;
// a worker on this host without the CA is refused with a message that
// names what is missing, and with it passes its check.
func TestContainerTLS(t *testing.T) {
	certs := certsDir(t)
	s := newStack(t, "a9a", []string{"compose.yaml", "compose.tls.yaml"}, "CERTS_DIR="+certs)
	s.mustCompose("up", "-d", "--scale", "worker=2")
	s.wantLocalModel([]string{"-e", "0.01"}, "over TLS")

	addr := fmt.Sprintf("127.0.0.1:%d", s.port)
	if got := plainText(t, addr); strings.Contains(got, "PONG") {
		t.Fatalf("the published port answered plain text: %q", got)
	}
	url := "nats://" + addr
	check := func(env ...string) (string, error) {
		cmd := exec.Command(e2etest.Bin("worker"), "-check", "-nats", url, "-user", "worker")
		cmd.Env = append(os.Environ(), append([]string{"NATS_PASSWORD=w-secret", "NATS_CA_FILE="}, env...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := check(); err == nil || !strings.Contains(out, "-tlsca") {
		t.Fatalf("a worker without the CA: %v\n%s", err, out)
	}
	if out, err := check("NATS_CA_FILE=" + filepath.Join(certs, "ca.pem")); err != nil {
		t.Fatalf("a worker with the CA: %v\n%s", err, out)
	}
}

// plainText speaks NATS without TLS to addr and returns what came back
// before the server closed the connection (or a second passed).
func plainText(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	r := bufio.NewReader(c)
	info, _ := r.ReadString('\n')
	if !strings.Contains(info, `"tls_required":true`) {
		t.Fatalf("the server's INFO does not require TLS: %q", info)
	}
	fmt.Fprintf(c, "CONNECT {\"verbose\":false,\"user\":\"worker\",\"pass\":\"w-secret\"}\r\nPING\r\n")
	var got strings.Builder
	for {
		line, err := r.ReadString('\n')
		got.WriteString(line)
		if err != nil {
			return got.String()
		}
	}
}
