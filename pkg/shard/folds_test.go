package shard

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestFoldsMatchLIBLINEAR checks the fold numbering against the
// permutation glibc's rand() gives LIBLINEAR (testdata/glibc_perm.c made
// the golden file): rows perm[f*m/n : (f+1)*m/n] form fold f+1.
func TestFoldsMatchLIBLINEAR(t *testing.T) {
	b, err := os.ReadFile("testdata/glibc_perm_1000.txt")
	if err != nil {
		t.Fatal(err)
	}
	var perm []int
	for _, f := range strings.Fields(string(b)) {
		v, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		perm = append(perm, v)
	}
	m := len(perm)
	for _, n := range []int{2, 3, 5, 10, 999, 1000} {
		fold, err := Folds(m, n)
		if err != nil {
			t.Fatal(err)
		}
		for f := 0; f < n; f++ {
			for _, row := range perm[f*m/n : (f+1)*m/n] {
				if int(fold[row]) != f+1 {
					t.Fatalf("n=%d: row %d in fold %d, LIBLINEAR puts it in %d", n, row, fold[row], f+1)
				}
			}
		}
	}
}

func TestFoldsRefusesBadCounts(t *testing.T) {
	for _, n := range []int{-1, 0, 1, MaxFolds + 1} {
		if _, err := Folds(10, n); err == nil {
			t.Errorf("%d folds accepted", n)
		}
	}
	// More folds than rows is leave-one-out, as in LIBLINEAR.
	fold, err := Folds(3, 10)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint16]bool{}
	for _, f := range fold {
		seen[f] = true
	}
	if len(seen) != 3 {
		t.Fatalf("3 rows in %d folds, want 3", len(seen))
	}
}
