package shard

import (
	"slices"
	"testing"

	"github.com/osgm-svm/osgm/internal/svmdata"
	"github.com/osgm-svm/osgm/pkg/input"
)

// A shard's column map after loading is the same whichever way the
// rows came: the sorted distinct indices of its nonzeros.
func TestShardColumnsAreItsIndices(t *testing.T) {
	text := "1 3:1 9:1 70000:2\n-1 3:1 200000:1\n1 1:0.5\n"
	path := svmdata.WriteFile(t, text)
	for _, compact := range []bool{false, true} {
		shards, err := Load(path, input.Layout(int64(len(text)), 1), Options{Compact: compact})
		if err != nil {
			t.Fatal(err)
		}
		s := shards[0]
		want := []uint32{0, 2, 8, 69999, 199999}
		if got := s.Cols.Slice(); !slices.Equal(got, want) {
			t.Fatalf("compact %v: columns %v, want %v", compact, got, want)
		}
	}
}
