package testport

import "testing"

// TestFreeNeverRepeats takes more ports than a test ever needs at once
// and checks that none comes twice.
func TestFreeNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 2000 {
		p := Free(t)
		if seen[p] {
			t.Fatalf("port %d given twice", p)
		}
		seen[p] = true
	}
}
