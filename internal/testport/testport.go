// Package testport hands tests loopback ports to give servers they start.
package testport

import (
	"net"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// Free is a loopback port nobody listened on a moment ago and that no
// earlier call in this process returned. The kernel may hand out a port
// it has just handed out once its listener is closed, so without the
// second condition a test that takes several ports before starting its
// servers can give two of them one port (a cluster test's client and
// route ports were once the same, and its server did not start).
func Free(t testing.TB) int {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !given[port] {
			given[port] = true
			return port
		}
	}
}
