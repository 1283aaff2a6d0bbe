package train

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/shard"
)

func localBackend(t *testing.T, path string) *objective.Local {
	info, err := input.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	shards, err := shard.Load(path, input.Layout(info.Size, 0), shard.Options{Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	return objective.NewLocal(shards, 2)
}

func liblinearOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := liblinearTrain("", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("liblinear-train %v: %v\n%s", args, err, out)
	}
	return string(out)
}

var cvLine = regexp.MustCompile(`Cross Validation Accuracy = ([0-9.]+)%`)

// TestCrossValidationMatchesLIBLINEAR: with the same folds (glibc's
// shuffle) and both solvers run to -e 1e-6, our -v 5 accuracy is
// LIBLINEAR's up to a few rows whose prediction sits on the margin.
func TestCrossValidationMatchesLIBLINEAR(t *testing.T) {
	dir := sharedData(t)
	needLIBLINEAR(t)
	for _, tc := range []struct {
		name string
		s    int
	}{{"heart_scale", 2}, {"a9a", 2}, {"svmguide1", 2}, {"dna.scale", 2}, {"glass.scale", 2}, {"heart_scale", 0}, {"dna.scale", 0}} {
		name := tc.name
		t.Run(fmt.Sprintf("%s/s=%d", name, tc.s), func(t *testing.T) {
			t.Parallel()
			plain := plainCopy(t, filepath.Join(dir, name+".bz2"))
			m := cvLine.FindStringSubmatch(liblinearOut(t, "-s", strconv.Itoa(tc.s), "-q", "-e", "1e-6", "-v", "5", plain))
			if m == nil {
				t.Fatal("no accuracy in LIBLINEAR's output")
			}
			want, _ := strconv.ParseFloat(m[1], 64)
			b := localBackend(t, plain)
			cv, err := CrossValidate(b, Config{Problem: Problem{C: 1, Bias: -1, Loss: losses[tc.s]}, Settings: Settings{Options: osgm.Options{MaxIter: 10000}, Eps: 1e-6}}, 5, nil)
			if err != nil {
				t.Fatal(err)
			}
			rows, _ := cv.Tally.Total()
			if rows != shard.Rows(b.Meta()) {
				t.Fatalf("folds held out %d rows of %d", rows, shard.Rows(b.Meta()))
			}
			got := 100 * cv.Accuracy()
			// Two rows, or 0.02% of them, may land on the other side.
			tol := 100 * math.Max(2, 0.0002*float64(rows)) / float64(rows)
			if math.Abs(got-want) > tol {
				t.Fatalf("accuracy %.4f%%, LIBLINEAR %.4f%% (tolerance %.3f points)", got, want, tol)
			}
			t.Logf("accuracy %.4f%%, LIBLINEAR %.4f%%, %d passes", got, want, cv.Passes)
		})
	}
}

var cvMSE = regexp.MustCompile(`Cross Validation Mean squared error = ([0-9.e+-]+)`)

// TestRegressionCrossValidationMatchesLIBLINEAR: -s 11 -v 5 at -e 1e-6
// gives LIBLINEAR's mean squared error (the same folds, both optima).
func TestRegressionCrossValidationMatchesLIBLINEAR(t *testing.T) {
	dir := sharedData(t)
	needLIBLINEAR(t)
	for _, name := range []string{"housing_scale", "bodyfat_scale"} {
		t.Run(name, func(t *testing.T) {
			plain := plainCopy(t, filepath.Join(dir, name+".bz2"))
			m := cvMSE.FindStringSubmatch(liblinearOut(t, "-s", "11", "-q", "-e", "1e-6", "-v", "5", plain))
			if m == nil {
				t.Fatal("no mean squared error in LIBLINEAR's output")
			}
			want, _ := strconv.ParseFloat(m[1], 64)
			cv, err := CrossValidate(localBackend(t, plain), Config{Problem: Problem{C: 1, Bias: -1, Loss: shard.SquaredEpsilon, Epsilon: 0.1}, Settings: Settings{Options: osgm.Options{MaxIter: 10000}, Eps: 1e-6}}, 5, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := cv.Tally.MSE(); math.Abs(got-want) > 1e-4*want {
				t.Fatalf("cross-validation MSE %.6g, LIBLINEAR's %.6g", got, want)
			}
		})
	}
}

var (
	searchCPLine = regexp.MustCompile(`log2c=\s*(-?[0-9.]+)\s+p=\s*([0-9.]+)\s+Mean squared error=(\S+)`)
	bestCPLine   = regexp.MustCompile(`Best C = (\S+) Best p = (\S+)  CV MSE = (\S+)`)
)

// TestSearchCPFollowsLIBLINEAR: -C for -s 11 tries LIBLINEAR's p values
// and, at each, starts at its C; every (C, p) both try has its mean
// squared error, and both pick the same C and p. At -e 1e-6 only the last
// Cs of a p, where w no longer moves, may end the search a few Cs apart.
// A -p given starts the grid, as LIBLINEAR's does: two p values here.
func TestSearchCPFollowsLIBLINEAR(t *testing.T) {
	dir := sharedData(t)
	needLIBLINEAR(t)
	for _, name := range []string{"housing_scale", "bodyfat_scale"} {
		t.Run(name, func(t *testing.T) {
			plain := plainCopy(t, filepath.Join(dir, name+".bz2"))
			b := localBackend(t, plain)
			grid := PGrid(b.Meta(), 0)
			startP := 1.5 * grid[len(grid)-2] // i = 1: p = max|y|/20, then 0
			out := liblinearOut(t, "-s", "11", "-C", "-e", "1e-6", "-p", strconv.FormatFloat(startP, 'g', -1, 64), plain)
			var steps []*CV
			cfg := Config{Problem: Problem{Bias: -1, Loss: shard.SquaredEpsilon}, Settings: Settings{Options: osgm.Options{MaxIter: 10000}, Eps: 1e-6}}
			best, err := SearchCP(b, cfg, 5, 0, startP, func(cv *CV) { steps = append(steps, cv) }, nil)
			if err != nil {
				t.Fatal(err)
			}
			compareSearchCP(t, out, steps, best)
		})
	}
}

func compareSearchCP(t *testing.T, out string, steps []*CV, best *CV) {
	t.Helper()
	want, first := map[string]string{}, map[string]string{}
	for _, m := range searchCPLine.FindAllStringSubmatch(out, -1) {
		want[m[1]+" "+m[2]] = m[3]
		if _, ok := first[m[2]]; !ok {
			first[m[2]] = m[1]
		}
	}
	ours := map[string]string{}
	for _, cv := range steps {
		c, p := fmt.Sprintf("%.2f", math.Log2(cv.C)), fmt.Sprintf("%.2f", cv.P)
		if _, ok := ours[p]; !ok {
			ours[p] = c
		}
		w, ok := want[c+" "+p]
		if !ok {
			continue
		}
		if mse, _ := strconv.ParseFloat(w, 64); math.Abs(cv.Tally.MSE()-mse) > 1e-4*mse {
			t.Errorf("log2c %s, p %s: MSE %.6g, LIBLINEAR's %s", c, p, cv.Tally.MSE(), w)
		}
	}
	if len(first) != 2 || !maps.Equal(first, ours) {
		t.Fatalf("p values with their first log2c: ours %v, LIBLINEAR's %v", ours, first)
	}
	if len(steps) < 3*len(want)/4 {
		t.Errorf("%d (C, p) tried, LIBLINEAR %d", len(steps), len(want))
	}
	m := bestCPLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no best C and p in LIBLINEAR's output:\n%s", out)
	}
	c, _ := strconv.ParseFloat(m[1], 64)
	p, _ := strconv.ParseFloat(m[2], 64)
	mse, _ := strconv.ParseFloat(m[3], 64)
	if best.C != c || math.Abs(best.P-p) > 1e-5*max(p, 1) || math.Abs(best.Tally.MSE()-mse) > 1e-4*mse {
		t.Errorf("best C %g, p %g, MSE %.6g; LIBLINEAR's %s", best.C, best.P, best.Tally.MSE(), m[0])
	}
}

// TestClassWeightsMatchLIBLINEAR: with -wi weights, our optimum is
// LIBLINEAR's (the weighted objective within 1e-6) for two classes and
// for one-vs-rest, where only the class's own side is weighted.
func TestClassWeightsMatchLIBLINEAR(t *testing.T) {
	dir := sharedData(t)
	needLIBLINEAR(t)
	for _, s := range []struct {
		name    string
		weights []ClassWeight
	}{
		{"a9a", []ClassWeight{{1, 3}, {-1, 0.5}}},
		{"dna.scale", []ClassWeight{{1, 2}, {3, 0.25}}},
	} {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			plain := plainCopy(t, filepath.Join(dir, s.name+".bz2"))
			ref := filepath.Join(t.TempDir(), "ref.model")
			args := []string{"-s", "2", "-q", "-e", "1e-10"}
			for _, w := range s.weights {
				args = append(args, "-w"+strconv.Itoa(w.Label), strconv.FormatFloat(w.Weight, 'g', -1, 64))
			}
			liblinearOut(t, append(args, plain, ref)...)
			theirs := readModelFile(t, ref)

			res, err := Train(localBackend(t, plain), Config{Problem: Problem{C: 1, Bias: -1, Weights: s.weights}, Settings: Settings{Options: osgm.Options{MaxIter: 10000}, Eps: 1e-6}})
			if err != nil {
				t.Fatal(err)
			}
			// LIBLINEAR's model evaluated on our weighted objective.
			obj := res.Obj
			f := make([]float64, len(theirs.W))
			g := make([][]float64, len(theirs.W))
			for k := range g {
				g[k] = make([]float64, obj.Dim())
			}
			if err := obj.Eval(theirs.W, f, g); err != nil {
				t.Fatal(err)
			}
			unweighted := primal(t, plain, theirs, 1)
			changed := 0
			for k := range f {
				fstar := f[k] / obj.Lambda
				if gap := (res.Primal[k] - fstar) / fstar; gap > 1e-6 || gap < -1e-6 {
					t.Errorf("problem %d: F = %.12g, LIBLINEAR's weighted optimum %.12g: gap %.2e", k, res.Primal[k], fstar, gap)
				}
				if math.Abs(unweighted[k]-fstar) > 1e-3*fstar {
					changed++
				}
			}
			// One-vs-rest weights only the weighted classes' own problems.
			if changed != len(s.weights) && changed != len(f) {
				t.Errorf("weights change %d of %d problems' objectives: the test would not see them", changed, len(f))
			}
		})
	}
}

func TestClassWeightsForUnknownLabelsAreRefused(t *testing.T) {
	dir := sharedData(t)
	_, err := Train(localBackend(t, plainCopy(t, filepath.Join(dir, "heart_scale.bz2"))),
		Config{Problem: Problem{C: 1, Bias: -1, Weights: []ClassWeight{{7, 2}}}, Settings: Settings{Options: osgm.Options{MaxIter: 100}, Eps: 0.01}})
	if err == nil {
		t.Fatal("a weight for label 7 of a +1/-1 data set was accepted")
	}
}

var searchLine = regexp.MustCompile(`log2c=\s*(-?[0-9.]+)\s+rate=([0-9.]+)`)

// TestSearchCFollowsLIBLINEAR: -C starts at LIBLINEAR's C, doubles, and
// at each C the accuracy is LIBLINEAR's within a few rows; both pick a
// best accuracy within that tolerance. Warm starts make the later Cs
// cheap: the search ends in well under the passes of cold runs.
func TestSearchCFollowsLIBLINEAR(t *testing.T) {
	dir := sharedData(t)
	needLIBLINEAR(t)
	plain := plainCopy(t, filepath.Join(dir, "heart_scale.bz2"))
	for _, solver := range []int{2, 0} {
		t.Run(fmt.Sprintf("s=%d", solver), func(t *testing.T) { searchCFollowsLIBLINEAR(t, plain, solver) })
	}
}

func searchCFollowsLIBLINEAR(t *testing.T, plain string, solver int) {
	loss := losses[solver]
	want := map[float64]float64{}
	first := math.Inf(1)
	out := liblinearOut(t, "-s", strconv.Itoa(solver), "-C", "-e", "1e-6", plain)
	for _, m := range searchLine.FindAllStringSubmatch(out, -1) {
		c, _ := strconv.ParseFloat(m[1], 64)
		r, _ := strconv.ParseFloat(m[2], 64)
		want[c] = r
		first = math.Min(first, c)
	}
	b := localBackend(t, plain)
	start := StartC(b.Meta(), -1, loss, 0)
	if math.Log2(start) != first {
		t.Fatalf("first C 2^%g, LIBLINEAR's 2^%g", math.Log2(start), first)
	}
	cfg := Config{Problem: Problem{Bias: -1, Loss: loss}, Settings: Settings{Options: osgm.Options{MaxIter: 10000}, Eps: 1e-6}}
	var steps []*CV
	best, maxReached, err := SearchC(b, cfg, 5, start, 1024, func(cv *CV) { steps = append(steps, cv) })
	if err != nil {
		t.Fatal(err)
	}
	if warned := strings.Contains(out, "warning: maximum C reached."); maxReached != warned {
		t.Errorf("maximum C reached: %v; LIBLINEAR warned: %v", maxReached, warned)
	}
	if best.Models != nil {
		t.Error("the best C's result holds its folds' models: a search would hold two sets")
	}
	rows := shard.Rows(b.Meta())
	tol := 100 * 2.0 / float64(rows)
	compared := 0
	for _, cv := range steps {
		r, ok := want[math.Log2(cv.C)]
		if !ok {
			continue
		}
		compared++
		if got := 100 * cv.Accuracy(); math.Abs(got-r) > tol {
			t.Errorf("C = 2^%g: accuracy %.4f%%, LIBLINEAR %.4f%%", math.Log2(cv.C), got, r)
		}
	}
	if compared < 5 {
		t.Fatalf("only %d C values in common with LIBLINEAR's search", compared)
	}
	bestWant := 0.0
	for _, r := range want {
		bestWant = math.Max(bestWant, r)
	}
	if math.Abs(100*best.Accuracy()-bestWant) > tol {
		t.Errorf("best accuracy %.4f%% at C = %g, LIBLINEAR's best %.4f%%", 100*best.Accuracy(), best.C, bestWant)
	}
	// Warm starts: the last C costs far fewer passes than training it cold.
	last := steps[len(steps)-1]
	cold, err := CrossValidate(b, Config{Problem: Problem{C: last.C, Bias: -1, Loss: loss}, Settings: Settings{Options: osgm.Options{MaxIter: 10000}, Eps: 1e-6}}, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	if last.Passes*2 > cold.Passes {
		t.Errorf("warm-started folds at C = %g took %d passes, cold %d", last.C, last.Passes, cold.Passes)
	}
	t.Logf("%d Cs, best C = %g (%.4f%%); last C warm %d passes, cold %d", len(steps), best.C, 100*best.Accuracy(), last.Passes, cold.Passes)
}

// A model that already meets the tolerance is returned unchanged: that is
// what stops the search once C no longer matters.
func TestWarmStartAtTheOptimumIsUnchanged(t *testing.T) {
	dir := sharedData(t)
	b := localBackend(t, plainCopy(t, filepath.Join(dir, "heart_scale.bz2")))
	first, err := CrossValidate(b, Config{Problem: Problem{C: 1, Bias: -1}, Settings: Settings{Options: osgm.Options{MaxIter: 1000}, Eps: 0.01}}, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err := CrossValidate(b, Config{Problem: Problem{C: 1, Bias: -1}, Settings: Settings{Options: osgm.Options{MaxIter: 1000}, Eps: 0.01}}, 3, first.Models)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Unchanged || again.Accuracy() != first.Accuracy() {
		t.Fatalf("restarting at the folds' own models: unchanged %v, accuracy %v vs %v", again.Unchanged, again.Accuracy(), first.Accuracy())
	}
}

// The folds' models held so far are memory a fold's training cannot
// have: once they leave too little for every problem at once, the next
// folds batch, to the same models.
func TestCrossValidationCountsTheModelsItHolds(t *testing.T) {
	path := sparseFeatureFile(t, 5)
	cfg := Config{Problem: Problem{C: 1, Bias: 1}, Settings: Settings{Options: osgm.Options{MaxIter: 3000}, Eps: 1e-4}}
	free, err := CrossValidate(localBackend(t, path), cfg, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := free.Models[0]
	// Room for every problem at once, and for half a model more.
	var plans []Plan
	cfg.Started = func(p Plan) { plans = append(plans, p) }
	cfg.MaxBytes = 2*StateBytes(m.Dim(), planOf(t, path).Coordinates, len(m.W)) + modelBytes(m)/2
	got, err := CrossValidate(localBackend(t, path), cfg, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(plans) != 3 || plans[0].Batch != 0 || plans[1].Batch == 0 || plans[2].Batch == 0 {
		t.Fatalf("folds' plans %+v: want the first unbatched, the others batched", plans)
	}
	if got.Accuracy() != free.Accuracy() {
		t.Errorf("accuracy %v, %v with all the memory", got.Accuracy(), free.Accuracy())
	}
	for f := range got.Models {
		for k := range got.Models[f].W {
			if !slices.Equal(got.Models[f].W[k], free.Models[f].W[k]) {
				t.Fatalf("fold %d, problem %d: batched model differs", f+1, k)
			}
		}
	}
}

// planOf is the plan of training on path as a whole.
func planOf(t *testing.T, path string) Plan {
	var p Plan
	if _, err := Train(localBackend(t, path), Config{Problem: Problem{C: 1, Bias: 1}, Settings: Settings{Options: osgm.Options{MaxIter: 1}, Eps: 1e-4}, Recorder: Recorder{Started: func(q Plan) { p = q }}}); err != nil {
		t.Fatal(err)
	}
	return p
}

// A search drops each C's models as the next C's folds replace them, and
// finds what cross-validating each C from the last one's models finds.
func TestSearchCReleasesWarmStarts(t *testing.T) {
	path := sparseFeatureFile(t, 3)
	cfg := Config{Problem: Problem{Bias: 1}, Settings: Settings{Options: osgm.Options{MaxIter: 3000}, Eps: 1e-4}}
	var steps []*CV
	if _, _, err := SearchC(localBackend(t, path), cfg, 3, 0.25, 1, func(cv *CV) { steps = append(steps, cv) }); err != nil {
		t.Fatal(err)
	}
	if len(steps) != 3 {
		t.Fatalf("%d Cs tried, want 0.25, 0.5 and 1", len(steps))
	}
	var warm []*libsvm.Model
	for i, cv := range steps {
		last := i == len(steps)-1
		for f, m := range cv.Models {
			if (m == nil) == last {
				t.Errorf("C = %g, fold %d: model held %v, want %v", cv.C, f+1, m != nil, last)
			}
		}
		c := cfg
		c.C = cv.C
		want, err := CrossValidate(localBackend(t, path), c, 3, warm)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(warm, nil) {
			t.Fatal("CrossValidate dropped the caller's warm starts")
		}
		if cv.Accuracy() != want.Accuracy() || cv.Passes != want.Passes {
			t.Errorf("C = %g: accuracy %v in %d passes, %v in %d cross-validated alone", cv.C, cv.Accuracy(), cv.Passes, want.Accuracy(), want.Passes)
		}
		warm = want.Models
	}
}

// TestOddClassesMatchLIBLINEAR: what one-vs-rest meets at the edges
// behaves as liblinear-train -s 2 does: labels written two ways (1 and
// 1.0) are one class, a class of one row trains, folds that leave a
// class out of training keep its row count, and 1,000 classes over
// 2,000 rows give LIBLINEAR's labels in its order and its cross-validation
// accuracy.
func TestOddClassesMatchLIBLINEAR(t *testing.T) {
	needLIBLINEAR(t)
	dir := t.TempDir()
	var many strings.Builder
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		c := 1 + rng.IntN(1000)
		fmt.Fprintf(&many, "%d %d:1 %d:0.5\n", c, 1+c%50, 51+i%7)
	}
	for _, tc := range []struct{ name, data string }{
		{"labels written two ways, a class of one row", "1 1:0.5 2:1\n1.0 1:0.4 2:0.9\n2 1:-0.5 2:-1\n2.00 1:-0.3\n3 2:0.1\n+1 1:0.6\n"},
		{"1000 classes over 2000 rows", many.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.Fields(tc.name)[0]+".svm")
			if err := os.WriteFile(path, []byte(tc.data), 0o644); err != nil {
				t.Fatal(err)
			}
			ref := filepath.Join(dir, "ref.model")
			liblinearOut(t, "-q", "-s", "2", path, ref)
			theirs := readModelFile(t, ref)
			res, err := Train(localBackend(t, path), Config{Problem: Problem{C: 1, Bias: -1}, Settings: Settings{Options: osgm.Options{MaxIter: 10000}, Eps: 0.01}})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Model.Labels, theirs.Labels) {
				t.Fatalf("labels %v, LIBLINEAR's %v", res.Model.Labels, theirs.Labels)
			}
			m := cvLine.FindStringSubmatch(liblinearOut(t, "-s", "2", "-q", "-v", "5", path))
			cv, err := CrossValidate(localBackend(t, path), Config{Problem: Problem{C: 1, Bias: -1}, Settings: Settings{Options: osgm.Options{MaxIter: 10000}, Eps: 0.01}}, 5, nil)
			if err != nil || m == nil {
				t.Fatalf("cross-validation: %v (LIBLINEAR's line %v)", err, m)
			}
			want, _ := strconv.ParseFloat(m[1], 64)
			if got := 100 * cv.Accuracy(); math.Abs(got-want) > 0.1 {
				t.Errorf("cross-validation accuracy %.4f%%, LIBLINEAR's %.4f%%", got, want)
			}
		})
	}
}

// TestPGrid: LIBLINEAR's p values, largest first, from a -p given; with
// every target 0 a -p given leaves the grid whole, on any CPU (the
// division by max|y| would be an infinity converted to int).
func TestPGrid(t *testing.T) {
	metas := []shard.Meta{{Labels: []float64{-4, 1}}, {Labels: []float64{2}}}
	for _, c := range []struct {
		metas  []shard.Meta
		startP float64
		want   []float64
	}{
		{metas, 0, []float64{3.8, 3.6, 3.4, 3.2, 3, 2.8, 2.6, 2.4, 2.2, 2, 1.8, 1.6, 1.4, 1.2, 1, 0.8, 0.6, 0.4, 0.2, 0}},
		{metas, 0.5, []float64{0.4, 0.2, 0}},
		{metas, 100, nil}, // the whole grid, as for no -p
		{[]shard.Meta{{Labels: []float64{0}}}, 0.5, make([]float64, 20)},
	} {
		got := PGrid(c.metas, c.startP)
		if c.want == nil {
			c.want = PGrid(c.metas, 0)
		}
		if len(got) != len(c.want) {
			t.Fatalf("PGrid(-p %v): %v, want %v", c.startP, got, c.want)
		}
		for i := range got {
			if math.Abs(got[i]-c.want[i]) > 1e-12 {
				t.Fatalf("PGrid(-p %v): %v, want %v", c.startP, got, c.want)
			}
		}
	}
}
