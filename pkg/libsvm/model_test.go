package libsvm

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite golden files")

func testModel() *Model {
	return &Model{Solver: SolverL2LossSVC, Labels: []int{3, 1, 2}, NFeature: 3, Bias: 1,
		W: [][]float64{{0.1, -2.5e-7, 0, 1.0 / 3}, {1e20, 0, 3, 4}, {math.Pi, math.E, -1, 0.30000000000000004}}}
}

// TestModelGolden pins the exact bytes LIBLINEAR's save_model would write.
func TestModelGolden(t *testing.T) {
	var b bytes.Buffer
	if err := testModel().Write(&b); err != nil {
		t.Fatal(err)
	}
	const golden = "testdata/model.golden"
	if *rewrite {
		os.WriteFile(golden, b.Bytes(), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Fatalf("model file:\n%s\nwant:\n%s", b.Bytes(), want)
	}
}

func TestModelRoundTrip(t *testing.T) {
	m := testModel()
	var b bytes.Buffer
	m.Write(&b)
	got, err := ReadModel(&b, "m")
	if err != nil {
		t.Fatal(err)
	}
	for k := range m.W {
		for j := range m.W[k] {
			if math.Float64bits(got.W[k][j]) != math.Float64bits(m.W[k][j]) && m.W[k][j] != 0 {
				t.Errorf("w[%d][%d] = %v, want %v", k, j, got.W[k][j], m.W[k][j])
			}
		}
	}
	if got.Bias != 1 || got.NFeature != 3 || len(got.Labels) != 3 {
		t.Errorf("header: %+v", got)
	}
}

func TestReadModelErrors(t *testing.T) {
	tests := []struct{ text, want string }{
		{"solver_type L2R_L2LOSS_SVR\nnr_class 3\nnr_feature 1\nbias -1\nw\n1 \n", "m:5: a regression model has nr_class 2 and no labels, not 3 and 0"},
		{"solver_type L2R_L2LOSS_SVR\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias -1\nw\n1 \n", "a regression model has nr_class 2 and no labels, not 2 and 2"},
		{"solver_type L2R_SVM\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias -1\nw\n1 \n", `m:1: solver_type "L2R_SVM" is not one of LIBLINEAR's`},
		{"nr_class 2\nlabel 1 -1\nnr_feature 1\nbias -1\nw\n1 \n", "m:5: missing solver_type"},
		// Crammer and Singer's model keeps a vector per class even for two.
		{"solver_type MCSVM_CS\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias -1\nw\n1 \n", "m:7: 1 weights on the line, expected 2"},
		{"solver_type L2R_L2LOSS_SVC\nnr_class 3\nlabel 1 -1\nnr_feature 1\nbias -1\nw\n1 \n", "nr_class 3 but 2 labels"},
		{"solver_type L2R_L2LOSS_SVC\nnr_class 2\nlabel 1 -1\nnr_feature 2\nbias -1\nw\n1 \n", "m:7: 1 weight rows, expected 2"},
		{"solver_type L2R_L2LOSS_SVC\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias -1\nw\nx \n", `m:7: weight "x" is not a finite number`},
		{"solver_type L2R_L2LOSS_SVC\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias -1\n", `missing "w" line`},
		{"solver_type L2R_L2LOSS_SVC\nfoo 1\n", `unknown header "foo"`},
		{"solver_type L2R_L2LOSS_SVC\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias nan\nw\n1\n2\n", `m:5: bias "nan" is not a finite number`},
		{"solver_type L2R_L2LOSS_SVC\nnr_class 2\nlabel 1 1\nnr_feature 1\nbias -1\nw\n1\n", `m:3: label 1 appears twice`},
		{"solver_type L2R_L2LOSS_SVC\nnr_class 2\nlabel 1 -1\nnr_feature 9223372036854775807\nbias 1\nw\n1\n", `m:4: nr_feature "9223372036854775807" is not an integer from 0 to 2147483647`},
		// A header that promises two billion features of a file that holds
		// one: an error after one row, not a 16 GB allocation first.
		{"solver_type L2R_L2LOSS_SVC\nnr_class 2\nlabel 1 -1\nnr_feature 2147483647\nbias -1\nw\n1\n", "m:7: 1 weight rows, expected 2147483647"},
	}
	for _, tc := range tests {
		_, err := ReadModel(strings.NewReader(tc.text), "m")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}

func TestPredictRule(t *testing.T) {
	bin := &Model{Labels: []int{1, -1}, NFeature: 2, Bias: -1, W: [][]float64{{1, -1}}}
	if p := bin.Predict([]uint32{1}, []float64{2}, nil); p != 1 {
		t.Errorf("w·x > 0 gave %d", p)
	}
	if p := bin.Predict([]uint32{1, 2}, []float64{1, 1}, nil); p != -1 {
		t.Errorf("w·x = 0 gave %d, LIBLINEAR predicts label[1]", p)
	}
	if p := bin.Predict([]uint32{9}, []float64{5}, nil); p != -1 {
		t.Errorf("unseen feature gave %d", p)
	}
	multi := &Model{Labels: []int{5, 6, 7}, NFeature: 1, Bias: 1, W: [][]float64{{1, 0}, {1, 0}, {0, 0.5}}}
	if p := multi.Predict([]uint32{1}, []float64{1}, nil); p != 5 {
		t.Errorf("tie gave %d, want the first class", p)
	}
	if p := multi.Predict(nil, nil, nil); p != 7 {
		t.Errorf("bias only gave %d", p)
	}
}

// FuzzReadModel: any bytes give a model or an error naming the file, never
// a panic; a model read is whole (a weight for every feature of every
// problem) and reads back the same after Write.
func FuzzReadModel(f *testing.F) {
	for _, name := range []string{"testdata/model.golden"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("solver_type L2R_L2LOSS_SVC\nnr_class 2\nlabel 1 -1\nnr_feature 2\nbias -1\nw\n0.5\n-1e-3\n"))
	f.Add([]byte("solver_type MCSVM_CS\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias 1\nw\n0.5 -0.5\n1 2\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ReadModel(bytes.NewReader(b), "fuzz.model")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.model:") {
				t.Fatalf("error without the file's name: %v", err)
			}
			return
		}
		problems := len(m.Labels)
		if problems == 2 && m.Solver != "MCSVM_CS" {
			problems = 1
		}
		if len(m.Labels) < 2 || len(m.W) != problems {
			t.Fatalf("%d labels, %d weight vectors", len(m.Labels), len(m.W))
		}
		for k := range m.W {
			if len(m.W[k]) != m.Dim() {
				t.Fatalf("problem %d: %d weights for %d coordinates", k, len(m.W[k]), m.Dim())
			}
		}
		m.Predict([]uint32{1, uint32(m.NFeature) + 1}, []float64{1, 1}, nil)
		var out bytes.Buffer
		if err := m.Write(&out); err != nil {
			t.Fatal(err)
		}
		again, err := ReadModel(&out, "again")
		if err != nil {
			t.Fatalf("a model written from one read does not read: %v\n%s", err, out.Bytes())
		}
		if again.Bias != m.Bias || again.NFeature != m.NFeature || !slices.Equal(again.Labels, m.Labels) {
			t.Fatalf("header %+v read back as %+v", m, again)
		}
		for k := range m.W {
			if !slices.Equal(again.W[k], m.W[k]) {
				t.Fatalf("problem %d: weights %v read back as %v", k, m.W[k], again.W[k])
			}
		}
	})
}

// Every LIBLINEAR classifier predicts from w·x, so every one loads and
// predicts (cmd/predict checks the labels against liblinear-predict);
// only the L2-loss SVM's two solvers are this problem's.
func TestReadModelSolvers(t *testing.T) {
	for _, tc := range []struct {
		solver string
		nrW    int
		ours   bool
	}{
		{"L2R_LR", 1, false}, {"L2R_L2LOSS_SVC_DUAL", 1, true}, {"L2R_L2LOSS_SVC", 1, true},
		{"L2R_L1LOSS_SVC_DUAL", 1, false}, {"MCSVM_CS", 2, false}, {"L1R_L2LOSS_SVC", 1, false},
		{"L1R_LR", 1, false}, {"L2R_LR_DUAL", 1, false},
	} {
		row := strings.Repeat("-2 ", tc.nrW) + "\n"
		text := "solver_type " + tc.solver + "\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias -1\nw\n" + row
		m, err := ReadModel(strings.NewReader(text), "m")
		if err != nil {
			t.Errorf("%s: %v", tc.solver, err)
			continue
		}
		if len(m.W) != tc.nrW || m.L2LossSVM() != tc.ours {
			t.Errorf("%s: %d vectors, L2LossSVM %v; want %d, %v", tc.solver, len(m.W), m.L2LossSVM(), tc.nrW, tc.ours)
		}
		// w·x = -2 for x = (1): the second label, whatever the vectors.
		if got := m.Predict([]uint32{1}, []float64{1}, nil); got != -1 {
			t.Errorf("%s: predicted %d, want -1", tc.solver, got)
		}
	}
}

// Labels are stored as LIBLINEAR's 32-bit ints: every one of them is
// taken (both ends included), nothing else is.
func TestIntLabel(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string // "" for a label
	}{
		{1, ""}, {-1, ""}, {math.MaxInt32, ""}, {math.MinInt32, ""},
		{0.5, "label 0.5 is not an integer"},
		{math.MaxInt32 + 1, "label 2147483648 is outside the 32-bit integers"},
		{math.MinInt32 - 1, "label -2147483649 is outside the 32-bit integers"},
		{math.Inf(1), "outside the 32-bit integers"},
	} {
		l, err := IntLabel(tc.v)
		switch {
		case tc.want == "" && (err != nil || float64(l) != tc.v):
			t.Errorf("%v: got %d, %v", tc.v, l, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: got %v, want %q", tc.v, err, tc.want)
		}
	}
}

// TestWriteFormatsInBlocks: weights formatted side by side, a block at a
// time, give save_model's text: 17 digits and a space each, a line a
// coordinate, for shapes below, at and across the block and with more
// problems than a block holds.
func TestWriteFormatsInBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	for _, c := range []struct{ features, K int }{
		{0, 1}, {5, 1}, {formatBlock, 1}, {formatBlock + 7, 1}, {3000, 3}, {2, formatBlock + 1},
	} {
		m := &Model{Solver: SolverL2LossSVC, NFeature: c.features, Bias: 1}
		for k := range c.K {
			m.Labels = append(m.Labels, k+1)
			w := make([]float64, m.Dim())
			for j := range w {
				w[j] = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(40)-20))
			}
			if len(w) > 1 {
				w[0], w[1] = 0, math.Copysign(0, -1)
			}
			m.W = append(m.W, w)
		}
		if c.K == 1 {
			m.Labels = []int{1, -1}
		}
		var want strings.Builder
		fmt.Fprintf(&want, "solver_type %s\nnr_class %d\nlabel", m.Solver, len(m.Labels))
		for _, l := range m.Labels {
			fmt.Fprintf(&want, " %d", l)
		}
		fmt.Fprintf(&want, "\nnr_feature %d\nbias 1\nw\n", m.NFeature)
		for j := range m.Dim() {
			for k := range m.W {
				want.WriteString(strconv.FormatFloat(m.W[k][j], 'g', 17, 64) + " ")
			}
			want.WriteString("\n")
		}
		var got bytes.Buffer
		if err := m.Write(&got); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Fatalf("%d features, %d problems: the text differs from one weight at a time", c.features, c.K)
		}
	}
}

// BenchmarkWrite writes a model of 20 problems over 100,000 features.
func BenchmarkWrite(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	m := &Model{Solver: SolverL2LossSVC, NFeature: 100_000, Bias: -1}
	for k := range 20 {
		m.Labels = append(m.Labels, k)
		w := make([]float64, m.Dim())
		for j := range w {
			w[j] = rng.NormFloat64() * 1e-3
		}
		m.W = append(m.W, w)
	}
	b.SetBytes(int64(8 * 20 * m.Dim()))
	for b.Loop() {
		if err := m.Write(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}
