package train

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osgm-svm/osgm/pkg/osgm"
)

var update = flag.Bool("update", false, "rewrite testdata/golden_models.txt from this build")

const goldenFile = "testdata/golden_models.txt"

// goldenSets are the shared training sets the golden test trains on, with
// -B, so the bias path is covered too.
var goldenSets = []struct {
	name  string
	bias  float64
	wide  bool // more features than newton-full takes
	iters int  // -max-iter: 40 unless set (news20.t's 20 problems cost more a pass)
}{
	{name: "heart_scale", bias: -1},
	{name: "breast-cancer_scale", bias: 1},
	{name: "svmguide1", bias: -1},
	{name: "a9a", bias: -1},
	{name: "w8a", bias: 1},
	{name: "ijcnn1", bias: -1},
	{name: "mushrooms", bias: -1},
	{name: "dna.scale", bias: 1},
	{name: "glass.scale", bias: -1},
	{name: "letter.scale", bias: -1},
	{name: "pendigits", bias: -1},
	{name: "news20.t", bias: -1, wide: true, iters: 6},
}

// TestGoldenModels pins the model file's bytes of every method on every
// shared set: refactoring the evaluation path, the transport or the
// methods must not move a bit of any model. A deliberate change of
// results is recorded with -update, and the diff of the golden file shows
// which models moved.
func TestGoldenModels(t *testing.T) {
	dir := sharedData(t)
	if testing.Short() {
		t.Skip("trains every method on every shared set: run without -short")
	}
	methods := osgm.Methods()
	got := map[string]string{}
	var mu sync.Mutex
	t.Run("sets", func(t *testing.T) {
		for _, s := range goldenSets {
			t.Run(s.name, func(t *testing.T) {
				t.Parallel()
				b := localBackend(t, filepath.Join(dir, s.name+".bz2"))
				iters := s.iters
				if iters == 0 {
					iters = 40
				}
				for _, m := range methods {
					// A short run keeps the test quick and still moves
					// every method far from its start; -e is loose so
					// that the fast methods stop by their own test.
					start := time.Now()
					res, err := Train(b, Config{Problem: Problem{C: 1, Bias: s.bias}, Settings: Settings{Options: osgm.Options{Method: m, MaxIter: iters}, Eps: 1e-3}})
					if m == "newton-full" && s.wide {
						if err == nil {
							t.Errorf("newton-full trained %s, which has more than %d features", s.name, osgm.MaxFullDim)
						}
						continue
					}
					if err != nil {
						t.Fatalf("%s: %v", m, err)
					}
					t.Logf("%s %v", m, time.Since(start))
					var buf bytes.Buffer
					if err := res.Model.Write(&buf); err != nil {
						t.Fatal(err)
					}
					mu.Lock()
					got[s.name+" "+m] = goldenOf(buf.Bytes(), res.Model.W)
					mu.Unlock()
				}
			})
		}
	})
	if t.Failed() {
		return
	}
	if *update {
		keys := make([]string, 0, len(got))
		for k := range got {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var out strings.Builder
		out.WriteString("# set method sha256(model file) ||w||; rewrite with: go test ./pkg/train -run TestGoldenModels -update\n")
		for _, k := range keys {
			fmt.Fprintf(&out, "%s %s\n", k, got[k])
		}
		if err := os.WriteFile(goldenFile, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want := readGolden(t)
	for k, h := range got {
		if w, ok := want[k]; !ok {
			t.Errorf("%s: no golden hash (run with -update to add it)", k)
		} else if w != h {
			t.Errorf("%s: model bytes changed: %s", k, goldenChange(w, h))
		}
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("%s: golden hash for a model no longer trained", k)
		}
	}
}

func readGolden(t *testing.T) map[string]string {
	f, err := os.Open(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if strings.HasPrefix(text, "#") || text == "" {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 4 {
			t.Fatalf("%s:%d: want \"set method hash norm\", got %q", goldenFile, line, text)
		}
		out[fields[0]+" "+fields[1]] = fields[2] + " " + fields[3]
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// goldenOf is what the golden file keeps of a model: its file's SHA-256,
// and the norm of its weights, which says how far a changed model moved.
func goldenOf(file []byte, w [][]float64) string {
	sum := sha256.Sum256(file)
	sq := 0.0
	for _, wk := range w {
		for _, v := range wk {
			sq += v * v
		}
	}
	return fmt.Sprintf("%s %.17g", hex.EncodeToString(sum[:]), math.Sqrt(sq))
}

// goldenChange says how a model moved: rounding (a relative change of
// the norm near 1e-16), a real change, or bytes alone (the same norm).
func goldenChange(want, got string) string {
	wh, wn, _ := strings.Cut(want, " ")
	gh, gn, _ := strings.Cut(got, " ")
	a, errA := strconv.ParseFloat(wn, 64)
	b, errB := strconv.ParseFloat(gn, 64)
	if errA != nil || errB != nil {
		return fmt.Sprintf("sha256 %s, golden %s", gh, wh)
	}
	return fmt.Sprintf("||w|| %.17g, golden %.17g (relative change %.2g); sha256 %s, golden %s", b, a, math.Abs(b-a)/math.Max(math.Abs(a), 1e-300), gh, wh)
}
