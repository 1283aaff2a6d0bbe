package shard

import (
	"strings"
	"testing"

	"github.com/osgm-svm/osgm/internal/svmdata"
	"github.com/osgm-svm/osgm/pkg/cols"
	"github.com/osgm-svm/osgm/pkg/input"
)

// TestCheckLiveRefusesMissingColumns: a shard with a column the map does
// not carry is refused.
func TestCheckLiveRefusesMissingColumns(t *testing.T) {
	path := svmdata.WriteFile(t, "1 1:1 3:2\n2 2:1\n")
	info, err := input.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	shards, err := Load(path, input.Layout(info.Size, 1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := cols.NewLiveMap([]uint64{0b101}, 3) // features 1 and 3, not 2
	if err := CheckLive(shards, m); err == nil || !strings.Contains(err.Error(), "feature 2") {
		t.Fatalf("a shard with feature 2 at a point without it: %v", err)
	}
}
