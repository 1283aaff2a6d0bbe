package shard

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/osgm-svm/osgm/pkg/cols"
)

// TestRemapAgreesWithSorting checks the builder's two ways of numbering
// local columns: a cols.Set below cols.MaxSet, sorting above.
func TestRemapAgreesWithSorting(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	b := newBuilder(0, Options{})
	for trial := 0; trial < 100; trial++ {
		width := uint32(1 + rng.IntN(5000))
		b.idx = b.idx[:0]
		for n := rng.IntN(300); n > 0; n-- {
			b.idx = append(b.idx, uint32(rng.IntN(int(width))))
		}
		global := slices.Clone(b.idx)
		ids := b.remap(width) // ids.Set
		viaSet := slices.Clone(b.idx)
		b.idx = slices.Clone(global)
		wantIDs := b.remap(cols.MaxSet + 1) // sorting
		if !slices.Equal(ids, wantIDs) || !slices.Equal(viaSet, b.idx) {
			t.Fatalf("trial %d: set gave %v %v, sorting %v %v", trial, ids, viaSet, wantIDs, b.idx)
		}
		for q, l := range viaSet {
			if ids[l] != global[q] {
				t.Fatalf("trial %d: entry %d maps to column %d, was %d", trial, q, ids[l], global[q])
			}
		}
	}
}
