package main

import (
	"bytes"
	"io"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/osgm-svm/osgm/pkg/libsvm"
)

// TestSameBytesWhateverTheCores: blocks are made in parallel and written
// in order from per-block streams, so the file depends on the flags only.
func TestSameBytesWhateverTheCores(t *testing.T) {
	p := params{rows: 5000, features: 3000, nnz: 20, classes: 3, noise: 0.05, zipf: 1.1, seed: 9}
	var outs []string
	for _, procs := range []int{1, 4} {
		old := runtime.GOMAXPROCS(procs)
		var b bytes.Buffer
		err := generate(&b, io.Discard, p)
		runtime.GOMAXPROCS(old)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, b.String())
	}
	if outs[0] != outs[1] {
		t.Fatal("the output depends on the number of cores")
	}
	lines := strings.Split(strings.TrimSuffix(outs[0], "\n"), "\n")
	if len(lines) != p.rows {
		t.Fatalf("%d rows, want %d", len(lines), p.rows)
	}
	// Every line is valid LIBSVM with labels 1..3.
	var row libsvm.Row
	for i, l := range lines {
		ok, err := libsvm.ParseLine([]byte(l), &row)
		if err != nil || !ok || row.Label < 1 || row.Label > 3 || len(row.Index) == 0 {
			t.Fatalf("line %d %q: ok %v, err %v", i+1, l, ok, err)
		}
	}
}

// TestSizeStopsAtTheFirstRowPastIt: -size writes whole rows until the file
// reaches the size.
func TestSizeStopsAtTheFirstRowPastIt(t *testing.T) {
	p := params{rows: 1 << 40, features: 1000, nnz: 10, classes: 2, zipf: 1.1, seed: 1, bytes: 100000}
	var b bytes.Buffer
	if err := generate(&b, io.Discard, p); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	last := strings.LastIndex(strings.TrimSuffix(text, "\n"), "\n")
	if len(text) < 100000 || last+1 >= 100000 || !strings.HasSuffix(text, "\n") {
		t.Fatalf("%d bytes, last row starts at %d: want the first row that reaches 100000 to be the last", len(text), last+1)
	}
}

// TestTestRowsFollowTheTrainingRows: -test holds the rows that come after
// the training rows, from the same hidden models: held out, not a copy.
func TestTestRowsFollowTheTrainingRows(t *testing.T) {
	p := params{rows: 3000, features: 2000, nnz: 15, classes: 2, noise: 0.05, zipf: 1.1, seed: 3}
	var whole, train, test bytes.Buffer
	all := p
	all.rows = 3700
	if err := generate(&whole, io.Discard, all); err != nil {
		t.Fatal(err)
	}
	p.testRows = 700
	if err := generate(&train, &test, p); err != nil {
		t.Fatal(err)
	}
	if train.String()+test.String() != whole.String() {
		t.Fatal("the training and test files are not the first 3000 and the next 700 rows")
	}
	if n := strings.Count(test.String(), "\n"); n != 700 {
		t.Fatalf("%d test rows, want 700", n)
	}
}

func TestParamsCheck(t *testing.T) {
	ok := params{rows: 10, features: 5, nnz: 5, classes: 2, noise: 0, zipf: 1.1}
	for _, tc := range []struct {
		name string
		edit func(*params)
		want string // "" means accepted
	}{
		{"as many nonzeros as features", func(p *params) {}, ""},
		{"no rows", func(p *params) { p.rows = 0 }, "-rows must be at least 1"},
		{"no features", func(p *params) { p.features = 0 }, "-features must be at least 1"},
		{"more nonzeros than features", func(p *params) { p.nnz = 6 }, "-nnz must be between 1 and -features (5)"},
		{"one class", func(p *params) { p.classes = 1 }, "-classes must be at least 2"},
		{"flat frequencies", func(p *params) { p.zipf = 1 }, "-zipf must be above 1"},
		{"noise above 1", func(p *params) { p.noise = 1.5 }, "-noise must be between 0 and 1"},
		{"images ignore -nnz", func(p *params) { p.images, p.nnz = true, 0 }, ""},
		{"binary images", func(p *params) { p.images, p.binary = true, true }, "-images and -binary exclude each other"},
		{"real ones", func(p *params) { p.real, p.binary = true, true }, "-real writes text-like rows"},
	} {
		p := ok
		tc.edit(&p)
		err := p.check()
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestImages: -images rows are dense integer pixels 0-255 with the dark
// ones left out, and each class's rows are nearer its own mean image
// than the others' (the classes are learnable, and correlated).
func TestImages(t *testing.T) {
	p := params{rows: 3000, features: 64, classes: 4, noise: 0, zipf: 1.1, seed: 2, images: true}
	var b bytes.Buffer
	if err := generate(&b, io.Discard, p); err != nil {
		t.Fatal(err)
	}
	var row libsvm.Row
	mean := make([][]float64, p.classes)
	count := make([]int, p.classes)
	for k := range mean {
		mean[k] = make([]float64, p.features)
	}
	nnz := 0
	for i, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		if ok, err := libsvm.ParseLine([]byte(l), &row); err != nil || !ok {
			t.Fatalf("line %d: %v", i+1, err)
		}
		k := int(row.Label) - 1
		count[k]++
		for q, j := range row.Index {
			v := row.Value[q]
			if v != float64(int(v)) || v < 30 || v > 255 {
				t.Fatalf("line %d: pixel %d = %g, want an integer in 30-255", i+1, j, v)
			}
			mean[k][j-1] += v
		}
		nnz += len(row.Index)
	}
	if d := float64(nnz) / float64(p.rows*p.features); d < 0.3 || d > 0.8 {
		t.Errorf("density %.2f, want an image's (0.3-0.8)", d)
	}
	for k := range mean {
		for j := range mean[k] {
			mean[k][j] /= float64(count[k])
		}
	}
	near := func(a, b []float64) float64 {
		s := 0.0
		for j := range a {
			s += (a[j] - b[j]) * (a[j] - b[j])
		}
		return s
	}
	for k := range mean {
		for c := range mean {
			if c != k && near(mean[k], mean[c]) < 100*float64(p.features) {
				t.Errorf("classes %d and %d have mean images %.0f apart per pixel: not separable", k+1, c+1, near(mean[k], mean[c])/float64(p.features))
			}
		}
	}
}

// TestRegressionTargets: with -regression every label is a real target,
// the hidden model's score plus noise: without noise, the score itself.
func TestRegressionTargets(t *testing.T) {
	p := params{rows: 500, features: 200, nnz: 10, classes: 2, zipf: 1.1, seed: 3, regression: true}
	var b bytes.Buffer
	if err := generate(&b, io.Discard, p); err != nil {
		t.Fatal(err)
	}
	var row libsvm.Row
	integers := 0
	for i, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		if ok, err := libsvm.ParseLine([]byte(l), &row); err != nil || !ok {
			t.Fatalf("line %d %q: ok %v, err %v", i+1, l, ok, err)
		}
		score := 0.0
		for q, j := range row.Index {
			score += p.weight(0, int(j)-1) * row.Value[q]
		}
		// The values are written to 6 digits, the target to 8.
		if math.Abs(row.Label-score) > 1e-4*(1+math.Abs(score)) {
			t.Fatalf("line %d: target %v, the hidden model's score %v", i+1, row.Label, score)
		}
		if row.Label == math.Trunc(row.Label) {
			integers++
		}
	}
	if integers > 5 {
		t.Fatalf("%d of %d targets are integers: class labels, not targets", integers, p.rows)
	}
}

// TestReal: -real values are real: unit rows whose values do not repeat
// and need float64's precision (no float32 or short decimal holds them),
// read back to the bit.
func TestReal(t *testing.T) {
	p := params{rows: 300, features: 2000, nnz: 30, classes: 2, noise: 0.05, zipf: 1.1, seed: 3, real: true}
	var b bytes.Buffer
	if err := generate(&b, io.Discard, p); err != nil {
		t.Fatal(err)
	}
	seen := map[float64]bool{}
	var row libsvm.Row
	for i, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		if ok, err := libsvm.ParseLine([]byte(l), &row); err != nil || !ok {
			t.Fatalf("line %d: %v", i+1, err)
		}
		norm := 0.0
		for _, v := range row.Value {
			if v == float64(float32(v)) || seen[v] {
				t.Fatalf("line %d: value %v is float32's or repeats", i+1, v)
			}
			seen[v], norm = true, norm+v*v
		}
		if math.Abs(norm-1) > 1e-12 {
			t.Fatalf("line %d: squared norm %v, want 1", i+1, norm)
		}
	}
}
