package e2etest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// NeedDocker skips where the engine does not answer, unless the run says
// the tests are required there (Required).
func NeedDocker(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("container tests: run without -short")
	}
	err := exec.Command("docker", "info").Run()
	if err == nil && ComposeCommand() == nil {
		err = errors.New("neither docker compose nor docker-compose is installed")
	}
	if err != nil {
		if Required() {
			t.Fatalf("container tests required, but docker or docker-compose fails: %v", err)
		}
		t.Skipf("no Docker engine here (docker info: %v)", err)
	}
}

var compose struct {
	once sync.Once
	argv []string
}

// ComposeCommand is `docker compose` where the plugin exists, else
// Debian's docker-compose; nil when there is neither.
func ComposeCommand() []string {
	compose.once.Do(func() {
		if exec.Command("docker", "compose", "version").Run() == nil {
			compose.argv = []string{"docker", "compose"}
		} else if _, err := exec.LookPath("docker-compose"); err == nil {
			compose.argv = []string{"docker-compose"}
		}
	})
	return compose.argv
}

// Docker runs the docker client and returns its trimmed output.
func Docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// NodesHere says why a cluster whose nodes live in network namespaces
// on this machine (scripts/swarm.sh's swarm, scripts/k8s.sh's
// Kubernetes; kind names it) cannot be made here, or nil.
func NodesHere(kind string) error {
	switch {
	case testing.Short():
		return fmt.Errorf("%s tests: run without -short", kind)
	case exec.Command("docker", "info").Run() != nil:
		return errors.New("no Docker engine here")
	case os.Getuid() != 0:
		return fmt.Errorf("the %s's nodes live in network namespaces, which need root", kind)
	}
	return nil
}
