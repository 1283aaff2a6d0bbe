// Package gcwait lets tests wait for the cleanups of objects that became
// unreachable, which run after a collection on a goroutine of their own.
package gcwait

import (
	"runtime"
	"testing"
	"time"
)

// Until collects until done holds, failing with state after 10 s.
func Until(t testing.TB, done func() bool, state func() string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !done(); {
		if time.Now().After(deadline) {
			t.Fatal(state())
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}
