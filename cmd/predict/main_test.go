package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPredictWritesLabelsAndAccuracy(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m")
	os.WriteFile(model, []byte("solver_type L2R_L2LOSS_SVC\nnr_class 2\nlabel 1 -1\nnr_feature 2\nbias -1\nw\n1 \n-1 \n"), 0o644)
	test := filepath.Join(dir, "t")
	os.WriteFile(test, []byte("1 1:2\n-1 2:1\n1 2:3\n-1 1:1 2:1\n"), 0o644)
	out := filepath.Join(dir, "out")
	if err := run(test, model, out, true); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(out)
	// w·x: 2 > 0 -> 1; -1 -> -1; -3 -> -1; 0 -> label[1] = -1.
	if string(got) != "1\n-1\n-1\n-1\n" {
		t.Fatalf("predictions %q", got)
	}
}

func TestPredictErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.model")
	os.WriteFile(bad, []byte("solver_type L2R_LR\n"), 0o644)
	test := filepath.Join(dir, "t")
	os.WriteFile(test, []byte("1 1:1\n"), 0o644)
	cases := []struct{ test, model, want string }{
		{test, bad, "only L2R_L2LOSS_SVC"},
		{test, filepath.Join(dir, "missing"), "no such file"},
		{filepath.Join(dir, "nothing"), bad, ""},
	}
	for _, c := range cases {
		err := run(c.test, c.model, filepath.Join(dir, "o"), true)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: got %v, want %q", c.test, c.model, err, c.want)
		}
	}
}

// An output file that is one of the inputs is refused, and left whole:
// creating it would have truncated the rows being read.
func TestPredictRefusesToOverwriteAnInput(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m")
	modelText := "solver_type L2R_L2LOSS_SVC\nnr_class 2\nlabel 1 -1\nnr_feature 2\nbias -1\nw\n1 \n-1 \n"
	os.WriteFile(model, []byte(modelText), 0o644)
	test := filepath.Join(dir, "t")
	os.WriteFile(test, []byte("1 1:2\n-1 2:1\n"), 0o644)
	for _, out := range []string{test, model} {
		before, _ := os.ReadFile(out)
		err := run(test, model, out, true)
		if err == nil || !strings.Contains(err.Error(), "it would be overwritten") {
			t.Errorf("output %s: got %v", out, err)
		}
		if after, _ := os.ReadFile(out); string(after) != string(before) {
			t.Errorf("%s changed to %q", out, after)
		}
	}
}

func TestProbabilityFlag(t *testing.T) {
	for _, c := range []struct {
		b    int
		want string
	}{{0, ""}, {1, "only supported for logistic regression"}, {2, "want 0 or 1"}} {
		err := checkProbability(c.b)
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("-b %d: got %v, want %q", c.b, err, c.want)
		}
	}
}
