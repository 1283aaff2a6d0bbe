package train

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/osgm-svm/osgm/pkg/cols"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/shard"
)

// sparseFeatureFile writes rows whose features are multiples of 4 up to
// 400: three quarters of the coordinates are dead.
func sparseFeatureFile(t *testing.T, classes int) string {
	path := filepath.Join(t.TempDir(), fmt.Sprintf("sparse%d.svm", classes))
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	r := rand.New(rand.NewPCG(1, uint64(classes)))
	for i := range 300 {
		label := i % classes
		fmt.Fprintf(w, "%d", label+1)
		for j := 4; j <= 400; j += 4 {
			if r.IntN(8) == 0 {
				// Features near the class's own range lean its way.
				v := r.Float64()
				if j/4%classes == label {
					v += 0.5
				}
				fmt.Fprintf(w, " %d:%.3f", j, v)
			}
		}
		w.WriteString("\n")
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDeadFeaturesLeftOut: on data where most features never occur, the
// methods run over the live coordinates only. The optimum must be
// LIBLINEAR's, over every coordinate, with the dead weights exactly 0,
// for each kind of method (and its kind of pass).
func TestDeadFeaturesLeftOut(t *testing.T) {
	needLIBLINEAR(t)
	for _, c := range []struct {
		classes int
		method  string
	}{
		{2, "newton"},
		{2, "newton-full"},
		{2, "lbfgs"},
		{3, "lbfgs"},
		{3, "newton"},
	} {
		t.Run(fmt.Sprintf("%d classes %s", c.classes, c.method), func(t *testing.T) {
			path := sparseFeatureFile(t, c.classes)
			b := localBackend(t, path)
			live := cols.SetBits(objective.LiveBits(b.Meta(), 400, 400))
			if len(live) == 0 || len(live) > 101 {
				t.Fatalf("%d live coordinates, want 1..100 of 400", len(live))
			}
			cfg := Config{Problem: Problem{C: 1, Bias: -1}, Settings: Settings{Options: osgm.Options{MaxIter: 100000, Method: c.method}, Eps: 1e-8}}
			got := trainFile(t, path, cfg)
			model := filepath.Join(t.TempDir(), "model")
			liblinear(t, "", "-q", "-s", "2", "-c", "1", "-e", "1e-10", path, model)
			want := primal(t, path, readModelFile(t, model), 1)
			for k, w := range got.Model.W {
				if len(w) != 400 {
					t.Fatalf("problem %d: %d weights, want 400", k, len(w))
				}
				for j, v := range w {
					if !slices.Contains(live, j) && v != 0 {
						t.Fatalf("problem %d: dead feature %d has weight %g", k, j+1, v)
					}
				}
				if gap := math.Abs(got.Primal[k]-want[k]) / want[k]; gap > 1e-9 {
					t.Errorf("problem %d: F = %.15g over the live coordinates, LIBLINEAR's %.15g over all: gap %.2e", k, got.Primal[k], want[k], gap)
				}
			}
		})
	}
}

// TestWarmStartZeroesDeadWeights: a starting model with weight on
// features the data lacks ends with those weights at their optimum, 0.
func TestWarmStartZeroesDeadWeights(t *testing.T) {
	path := sparseFeatureFile(t, 3)
	cfg := Config{Problem: Problem{C: 1, Bias: 1}, Settings: Settings{Options: osgm.Options{MaxIter: 100000}, Eps: 1e-8}}
	cold := trainFile(t, path, cfg)
	init := *cold.Model
	init.W = make([][]float64, len(cold.Model.W))
	for k, w := range cold.Model.W {
		init.W[k] = slices.Clone(w)
		for j := range init.NFeature {
			if j%4 != 3 { // feature j+1 is not a multiple of 4
				init.W[k][j] = 1
			}
		}
	}
	cfg.Init = &init
	warm := trainFile(t, path, cfg)
	for k, w := range warm.Model.W {
		for j := range warm.Model.NFeature {
			if j%4 != 3 && w[j] != 0 {
				t.Fatalf("problem %d: dead feature %d has weight %g", k, j+1, w[j])
			}
		}
		if gap := math.Abs(warm.Primal[k]-cold.Primal[k]) / cold.Primal[k]; gap > 1e-9 {
			t.Errorf("problem %d: warm F = %.15g, cold %.15g", k, warm.Primal[k], cold.Primal[k])
		}
	}
}

// TestWarmStartOfOtherFeatures: a starting model of more features than
// the data's has those past them dropped, and one of fewer is padded with
// zeros; either way the model written has the data's features, as
// liblinear-train's has, the plan says what was fitted, and the optimum
// is the cold run's.
func TestWarmStartOfOtherFeatures(t *testing.T) {
	path := sparseFeatureFile(t, 2)
	cfg := Config{Problem: Problem{C: 1, Bias: 1}, Settings: Settings{Options: osgm.Options{MaxIter: 100000}, Eps: 1e-8}}
	cold := trainFile(t, path, cfg)
	n := cold.Model.NFeature
	for _, features := range []int{n + 50, n - 4} {
		init := *cold.Model
		init.NFeature, init.W = features, nil
		for _, w := range cold.Model.W {
			v := make([]float64, features+1) // and the bias
			for j := range v {
				v[j] = 0.25
			}
			copy(v, w[:min(n, features)])
			init.W = append(init.W, v)
		}
		var plan Plan
		warm := cfg
		warm.Init, warm.Started = &init, func(p Plan) { plan = p }
		res := trainFile(t, path, warm)
		if res.Model.NFeature != n || plan.InitFeatures != features {
			t.Errorf("from %d features: a model of %d, the plan says %d; want %d and %d", features, res.Model.NFeature, plan.InitFeatures, n, features)
		}
		if gap := math.Abs(res.Primal[0]-cold.Primal[0]) / cold.Primal[0]; gap > 1e-9 {
			t.Errorf("from %d features: F = %.15g, cold %.15g", features, res.Primal[0], cold.Primal[0])
		}
	}
}

// TestResumeOverLiveCoordinates: a run interrupted and resumed from its
// checkpoint writes the model of the run that was never stopped, to the
// bit, when the checkpoint holds the live coordinates only.
func TestResumeOverLiveCoordinates(t *testing.T) {
	path := sparseFeatureFile(t, 3)
	cfg := Config{Problem: Problem{C: 1, Bias: 1}, Settings: Settings{Options: osgm.Options{MaxIter: 100000}, Eps: 1e-8}}
	rounds := 0
	count := cfg
	count.Interrupt = func() bool { rounds++; return false }
	want := trainFile(t, path, count)

	passes := 0
	stop := cfg
	stop.CheckpointEvery = 1000
	saved := interrupted(t, path, stop, func(*Checkpoint) bool { passes++; return passes == 20 })
	resume := cfg
	resume.Resume = saved
	resumed := 0
	resume.Interrupt = func() bool { resumed++; return false }
	got := trainFile(t, path, resume)
	if resumed >= rounds {
		t.Fatalf("the resumed run took %d rounds, a whole run %d: it started over", resumed, rounds)
	}
	for k := range want.Model.W {
		if !slices.Equal(got.Model.W[k], want.Model.W[k]) {
			t.Fatalf("problem %d: resumed weights differ from the uninterrupted run's", k)
		}
	}
}

// TestMemoryCheckCountsLiveCoordinates: problems whose methods' state
// would not fit are minimised in batches that do, to the same model bits,
// and refused only when one at a time does not fit; leaving the dead
// coordinates out is what lets more of them fit.
func TestMemoryCheckCountsLiveCoordinates(t *testing.T) {
	path := sparseFeatureFile(t, 3)
	cfg := Config{Problem: Problem{C: 1, Bias: -1}, Settings: Settings{Eps: 0.1}}
	want := trainFile(t, path, cfg)
	// 3 problems of 400 coordinates, 100 live: the models take 19,200
	// bytes, a method 24,000 with the dead coordinates left out, 96,000
	// with them; the methods may take half of MaxBytes, or all of it one
	// at a time.
	for _, c := range []struct {
		maxBytes int64
		batch    int // -1: refused
		allBatch int // with the dead coordinates kept
	}{
		{200_000, 0, 1},
		{140_000, 2, 1},
		{80_000, 1, -1},
		{40_000, -1, -1},
		{400_000, 0, 1},
		{700_000, 0, 0},
	} {
		t.Run(fmt.Sprint(c.maxBytes), func(t *testing.T) {
			cfg := cfg
			cfg.MaxBytes = c.maxBytes
			all, _, err := batchSize(cfg, 400, 400, 400, 3, 0)
			if c.allBatch < 0 && err == nil || c.allBatch >= 0 && (err != nil || all != c.allBatch) {
				t.Errorf("over every coordinate: batches of %d (%v), want %d", all, err, c.allBatch)
			}
			got, err := Train(localBackend(t, path), cfg)
			switch {
			case c.batch < 0 && (err == nil || !strings.Contains(err.Error(), "largest feature index 400")):
				t.Fatalf("want a refusal naming the largest feature index, got %v", err)
			case c.batch < 0:
				return
			case err != nil:
				t.Fatal(err)
			case got.Batch != c.batch:
				t.Fatalf("batches of %d problems, want %d", got.Batch, c.batch)
			}
			for k := range want.Model.W {
				if !slices.Equal(got.Model.W[k], want.Model.W[k]) {
					t.Fatalf("problem %d: weights differ from all problems at once", k)
				}
			}
		})
	}
}

// batchMemory is the MaxBytes in which K problems of dim coordinates, n
// of them live, are minimised batch at a time.
func batchMemory(dim, n, K, batch int) int64 { return 2 * stateBytes(dim, n, K, batch) }

// TestBatchesGiveTheSameModel: one-vs-rest problems minimised some at a
// time give the model of all at once, to the bit, with L-BFGS and HDM
// (Newton's one-problem passes take other kernels, see Shard.binary); and a run interrupted in its second batch and
// resumed from the checkpoint (taken in batches of 2, resumed on a host
// that would take all 5 at once) gives it too, without starting over.
func TestBatchesGiveTheSameModel(t *testing.T) {
	path := sparseFeatureFile(t, 5)
	for _, method := range []string{"lbfgs", "hdm", "newton"} {
		t.Run(method, func(t *testing.T) {
			cfg := Config{Problem: Problem{C: 1, Bias: 1}, Settings: Settings{Options: osgm.Options{Method: method, MaxIter: 3000}, Eps: 1e-4}}
			want := trainFile(t, path, cfg)
			dim, n := want.Model.NFeature+1, want.Obj.Dim()
			for _, batch := range []int{2, 4, 1} {
				b := cfg
				b.MaxBytes = batchMemory(dim, n, 5, batch)
				traced := map[int]bool{}
				var plans []Plan
				b.Trace = func(r osgm.Record) {
					if len(plans) == 0 {
						t.Fatal("a record before the plan")
					}
					traced[r.Problem] = true
				}
				b.Started = func(p Plan) { plans = append(plans, p) }
				if batch == 1 { // finished problems wait on a shelf, and Full reads them back
					b.Shelf = newShelf(t)
				}
				backend := &widest{Backend: localBackend(t, path)}
				got, err := Train(backend, b)
				if err != nil {
					t.Fatal(err)
				}
				if got.Batch != batch || len(traced) != 5 {
					t.Fatalf("batch %d: ran in batches of %d, traced problems %v", batch, got.Batch, traced)
				}
				// The pass at 0 too: what it brings is a batch's.
				if backend.k != batch {
					t.Fatalf("batch %d: a pass over %d problems", batch, backend.k)
				}
				if want := (Plan{Method: method, Problems: 5, Batch: batch, MemoryBound: true, Coordinates: n, Dim: dim}); len(plans) != 1 || plans[0] != want {
					t.Fatalf("batch %d: plans %+v, want one, %+v", batch, plans, want)
				}
				for k := range want.Model.W {
					if !slices.Equal(got.Model.W[k], want.Model.W[k]) {
						t.Fatalf("batch %d: problem %d's weights differ from all problems at once", batch, k)
					}
				}
			}
		})
	}
	// HDM starts from the Hessian's diagonal at 0 and here from a model:
	// the problems of the batches after the resumed one need both again.
	warmed := trainFile(t, path, Config{Problem: Problem{C: 1, Bias: 1}, Settings: Settings{Options: osgm.Options{MaxIter: 3000}, Eps: 0.5}})
	warm, twoAtATime := warmed.Model, batchMemory(warmed.Model.NFeature+1, warmed.Obj.Dim(), 5, 2)
	for _, cfg := range []Config{
		{Problem: Problem{C: 1, Bias: 1}, Settings: Settings{Options: osgm.Options{Method: "lbfgs", MaxIter: 3000}, Eps: 1e-6, MaxBytes: twoAtATime}},
		{Problem: Problem{C: 1, Bias: 1}, Settings: Settings{Options: osgm.Options{Method: "hdm", MaxIter: 3000}, Eps: 1e-4, MaxBytes: twoAtATime, Init: warm}},
		{Problem: Problem{C: 1, Bias: 1}, Settings: Settings{Options: osgm.Options{Method: "newton", MaxIter: 3000}, Eps: 1e-6, MaxBytes: twoAtATime}},
	} {
		t.Run("resumed "+cfg.Method, func(t *testing.T) {
			want := trainFile(t, path, cfg)
			stop := cfg
			stop.CheckpointEvery = 1
			saved := interrupted(t, path, stop, func(last *Checkpoint) bool { return last != nil && last.Opt.First == 2 && last.Opt.Evals > 3 })
			resume := cfg
			resume.MaxBytes, resume.Resume, resume.Shelf = 0, saved, newShelf(t)
			first := -1
			resume.Trace = func(r osgm.Record) {
				if first < 0 {
					first = r.Problem
				}
			}
			got := trainFile(t, path, resume)
			if first != 2 {
				t.Fatalf("the resumed run began with problem %d, not the interrupted batch's first, 2", first)
			}
			for k := range want.Model.W {
				if !slices.Equal(got.Model.W[k], want.Model.W[k]) {
					t.Fatalf("problem %d: resumed weights differ from the uninterrupted run's", k)
				}
			}
			if got.Opt.Evals != want.Opt.Evals {
				t.Fatalf("the resumed run counts %d passes, the uninterrupted %d", got.Opt.Evals, want.Opt.Evals)
			}
		})
	}
}

func newShelf(t *testing.T) *FileShelf {
	shelf, err := NewShelf(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shelf.Close() })
	return shelf
}

// widest is a backend that notes the most problems a pass took.
type widest struct {
	objective.Backend
	k int
}

func (w *widest) Eval(op osgm.Op, p, v *shard.Point, add func(*reduce.Partial) error) error {
	w.k = max(w.k, p.K())
	return w.Backend.Eval(op, p, v, add)
}

// interrupted trains with cfg until stop, shown the last checkpoint saved
// (nil: none yet), says so between rounds, and returns the checkpoint the
// run saved at the interruption, after a trip through its bytes.
func interrupted(t *testing.T, path string, cfg Config, stop func(last *Checkpoint) bool) *Checkpoint {
	t.Helper()
	var saved *Checkpoint
	cfg.Save = func(c *Checkpoint) error { saved = c; return nil }
	cfg.Interrupt = func() bool { return stop(saved) }
	if _, err := Train(localBackend(t, path), cfg); !errors.Is(err, osgm.ErrInterrupted) {
		t.Fatalf("interrupted run: %v", err)
	}
	if saved == nil || len(saved.Opt.States) == 0 {
		t.Fatal("no checkpoint saved")
	}
	b, err := saved.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if saved, err = DecodeCheckpoint(b); err != nil {
		t.Fatal(err)
	}
	return saved
}

// TestBatchesBoundedByTheData: by default a batch's methods' state is at
// most LIBLINEAR's data (16 bytes a nonzero) or batchFloor, whichever is
// more; memory may make batches smaller still, and says so.
func TestBatchesBoundedByTheData(t *testing.T) {
	perProblem := stateBytes(0, 39128, 0, 1) // news20.t's live coordinates
	for _, c := range []struct {
		name           string
		n, K, nnz      int
		maxBytes       int64
		batch          int
		memory, refuse bool
	}{
		{name: "wide and small (news20.t)", n: 39128, K: 20, nnz: 321123, batch: 1},
		{name: "narrow (letter.scale)", n: 16, K: 26, nnz: 300000, batch: 0},
		{name: "state within the data", n: 39128, K: 20, nnz: int(5 * perProblem / 16), batch: 5},
		{name: "state within the floor", n: 1000, K: 400, nnz: 10, batch: int(batchFloor / stateBytes(0, 1000, 0, 1))},
		{name: "one problem", n: 39128, K: 1, nnz: 1, batch: 0},
		{name: "memory below the data's rule", n: 39128, K: 20, nnz: int(10 * perProblem / 16), maxBytes: 2 * stateBytes(39128, 39128, 20, 3), batch: 3, memory: true},
		{name: "memory above the data's rule", n: 39128, K: 20, nnz: int(2 * perProblem / 16), maxBytes: 2 * stateBytes(39128, 39128, 20, 3), batch: 2},
		{name: "nothing fits", n: 39128, K: 20, nnz: 1, maxBytes: stateBytes(39128, 39128, 20, 0), refuse: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			batch, memory, err := batchSize(Config{Settings: Settings{MaxBytes: c.maxBytes}}, c.n, c.n, c.n, c.K, c.nnz)
			switch {
			case c.refuse && err == nil:
				t.Fatalf("batches of %d, want a refusal", batch)
			case c.refuse:
				return
			case err != nil:
				t.Fatal(err)
			case batch != c.batch || memory != c.memory:
				t.Fatalf("batches of %d (memory bound %v), want %d (%v)", batch, memory, c.batch, c.memory)
			}
		})
	}
}

// TestSideBySideGivesTheSameModel: one-vs-rest problems trained one at a
// time go side by side on forks of an in-process backend, with the
// model and the passes of one after the other; a run interrupted with
// problems under way resumes from its checkpoint to them too, with
// forks or without.
func TestSideBySideGivesTheSameModel(t *testing.T) {
	path := sparseFeatureFile(t, 5)
	for _, method := range []string{"newton", "lbfgs"} {
		t.Run(method, func(t *testing.T) {
			cfg := Config{Problem: Problem{C: 1, Bias: 1}, Settings: Settings{Options: osgm.Options{Method: method, MaxIter: 3000}, Eps: 1e-6, batch: 1}}
			want := trainFile(t, path, cfg)
			side := cfg
			side.Parallel, side.Shelf = 2, newShelf(t)
			got, err := Train(localBackend(t, path), side)
			if err != nil {
				t.Fatal(err)
			}
			sameModel(t, "side by side", got, want)

			var mu sync.Mutex
			var saved *Checkpoint
			stop := side
			stop.CheckpointEvery, stop.Shelf = 3, newShelf(t)
			stop.Save = func(c *Checkpoint) error { mu.Lock(); saved = c; mu.Unlock(); return nil }
			stop.Interrupt = func() bool {
				mu.Lock()
				defer mu.Unlock()
				return saved != nil && saved.Opt.Evals > want.Opt.Evals/2
			}
			if _, err := Train(localBackend(t, path), stop); !errors.Is(err, osgm.ErrInterrupted) {
				t.Fatalf("interrupted run: %v", err)
			}
			b, err := saved.Encode()
			if err != nil {
				t.Fatal(err)
			}
			cp, err := DecodeCheckpoint(b)
			if err != nil || !cp.Opt.Side || len(cp.Opt.Running) == 0 {
				t.Fatalf("the checkpoint (%v) is not side by side with problems under way: %+v", err, cp.Opt.Running)
			}
			for _, parallel := range []int{2, 0} {
				resume := cfg
				resume.Parallel, resume.Resume, resume.Shelf = parallel, cp, newShelf(t)
				sameModel(t, fmt.Sprintf("resumed, %d side by side", parallel), trainFile(t, path, resume), want)
			}
		})
	}
}

// sameModel fails unless got's weights and passes are want's.
func sameModel(t *testing.T, what string, got, want *Result) {
	t.Helper()
	if err := got.Full(); err != nil {
		t.Fatal(err)
	}
	for k := range want.Model.W {
		if !slices.Equal(got.Model.W[k], want.Model.W[k]) {
			t.Fatalf("%s: problem %d's weights differ from one at a time", what, k)
		}
	}
	if got.Opt.Evals != want.Opt.Evals {
		t.Fatalf("%s: %d passes, one at a time %d", what, got.Opt.Evals, want.Opt.Evals)
	}
}
