package reduce

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestColumnSetsAgreeWithMerging checks the bitmap union (used below
// cols.MaxSet) against plain merging on random increasing lists, including
// empty lists, shared and word-boundary columns.
func TestColumnSetsAgreeWithMerging(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for trial := 0; trial < 200; trial++ {
		width := uint32(1 + rng.IntN(1000))
		lists := make([][]uint32, 1+rng.IntN(GroupSize))
		for i := range lists {
			density := rng.Float64()
			for j := uint32(0); j < width; j++ {
				if rng.Float64() < density*density {
					lists[i] = append(lists[i], j)
				}
			}
		}
		all, pos := setColumns(lists, width)
		wantAll, wantPos := mergeColumns(lists)
		if !slices.Equal(all, wantAll) || fmt.Sprint(pos) != fmt.Sprint(wantPos) {
			t.Fatalf("trial %d, lists %v:\nset   %v %v\nmerge %v %v", trial, lists, all, pos, wantAll, wantPos)
		}
	}
}
