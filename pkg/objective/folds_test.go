package objective

import (
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/osgm-svm/osgm/internal/svmdata"
	"github.com/osgm-svm/osgm/pkg/shard"
)

// TestTallyCountsTheHeldOutFold compares Tally with a dense prediction of
// every row: all rows without a holdout, one fold's with it.
func TestTallyCountsTheHeldOutFold(t *testing.T) {
	for _, classes := range []int{2, 3} {
		rng := rand.New(rand.NewPCG(7, uint64(classes)))
		d := svmdata.Random(rng, 200, 8, classes, "f64")
		obj := objectiveFor(t, svmdata.WriteFile(t, d.Text), 4, 2, 0.01, 1)
		order, K := problems(obj)
		x := svmdata.NormalVectors(rng, K, obj.Dim())
		if err := obj.Backend.SetFolds(4); err != nil {
			t.Fatal(err)
		}
		fold, _ := Folds(len(d.Rows), 4)
		for hold := 0; hold <= 4; hold++ {
			p := obj.Point(x)
			p.Holdout = hold
			got, err := obj.Backend.Tally(p)
			if err != nil {
				t.Fatal(err)
			}
			want := shard.Tally{Rows: make([]int, len(order)), Correct: make([]int, len(order))}
			for i, row := range d.Rows {
				if hold > 0 && int(fold[i]) != hold {
					continue
				}
				z := make([]float64, K)
				for k := range z {
					for j := 0; j < obj.Features; j++ {
						z[k] += row[j] * x[k][j]
					}
					z[k] += 1 * x[k][obj.Features]
				}
				pred := 0
				if K == 1 && z[0] <= 0 {
					pred = 1
				}
				for k := 1; K > 1 && k < K; k++ {
					if z[k] > z[pred] {
						pred = k
					}
				}
				c := 0
				for c < len(order) && order[c] != d.Labels[i] {
					c++
				}
				want.Rows[c]++
				if pred == c {
					want.Correct[c]++
				}
			}
			for c := range order {
				if got.Rows[c] != want.Rows[c] || got.Correct[c] != want.Correct[c] {
					t.Fatalf("classes %d, holdout %d: tally %+v, want %+v", classes, hold, got, want)
				}
			}
			if rows, _ := got.Total(); hold > 0 && (rows < 40 || rows > 60) {
				t.Fatalf("fold %d has %d of 200 rows", hold, rows)
			}
		}
	}
}

func TestHoldoutWithoutFoldsIsRefused(t *testing.T) {
	d := svmdata.Random(rand.New(rand.NewPCG(1, 1)), 20, 3, 2, "ones")
	obj := objectiveFor(t, svmdata.WriteFile(t, d.Text), 2, 1, 0.01, -1)
	obj.Holdout = 1
	x := [][]float64{make([]float64, obj.Dim())}
	if err := obj.Eval(x, []float64{0}, [][]float64{make([]float64, obj.Dim())}); err == nil {
		t.Fatal("evaluation with a held-out fold but no folds succeeded")
	}
	if _, err := obj.Backend.Tally(obj.Point(x)); err == nil {
		t.Fatal("tally with a held-out fold but no folds succeeded")
	}
}

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
