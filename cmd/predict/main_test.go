package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
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
	if err := run(test, model, out, true, false); err != nil {
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
	os.WriteFile(bad, []byte("solver_type L2R_L2LOSS_SVR\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias -1\nw\n1\n"), 0o644)
	test := filepath.Join(dir, "t")
	os.WriteFile(test, []byte("1 1:1\n"), 0o644)
	cases := []struct{ test, model, want string }{
		{test, bad, "a regression model has nr_class 2 and no labels"},
		{test, filepath.Join(dir, "missing"), "no such file"},
		{filepath.Join(dir, "nothing"), bad, ""},
	}
	for _, c := range cases {
		err := run(c.test, c.model, filepath.Join(dir, "o"), true, false)
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
		err := run(test, model, out, true, false)
		if err == nil || !strings.Contains(err.Error(), "it would be overwritten") {
			t.Errorf("output %s: got %v", out, err)
		}
		if after, _ := os.ReadFile(out); string(after) != string(before) {
			t.Errorf("%s changed to %q", out, after)
		}
	}
}

// Models of every LIBLINEAR solver, trained by liblinear-train on a
// two-class and a three-class set, give liblinear-predict's labels to the
// byte (a regression's values and errors too): a user's existing models (LIBLINEAR's default is -s 1) work here.
// With -b 1, logistic regression's models give its probabilities to the
// byte, and the others are refused as liblinear-predict refuses them.
func TestPredictMatchesLIBLINEAR(t *testing.T) {
	for _, c := range []string{"liblinear-train", "liblinear-predict"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("%s not installed (apt-get install liblinear-tools)", c)
		}
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 6))
	sets := map[string]int{"two": 2, "three": 3}
	for name, classes := range sets {
		var b strings.Builder
		for range 300 {
			y := rng.IntN(classes)
			fmt.Fprintf(&b, "%d", []int{1, -1, 7}[y])
			for j := 1; j <= 6; j++ {
				if rng.IntN(3) > 0 {
					fmt.Fprintf(&b, " %d:%.3g", j, rng.NormFloat64()+float64(y*j%3))
				}
			}
			b.WriteByte('\n')
		}
		os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644)
	}
	for name := range sets {
		data := filepath.Join(dir, name)
		for _, s := range []string{"0", "1", "2", "3", "4", "5", "6", "7", "11", "12", "13"} {
			model := filepath.Join(dir, name+s+".model")
			train := exec.Command("liblinear-train", "-q", "-s", s, "-B", "1", data, model)
			if out, err := train.CombinedOutput(); err != nil {
				t.Fatalf("%v: %v\n%s", train.Args, err, out)
			}
			for _, b := range []string{"0", "1"} {
				predict := exec.Command("liblinear-predict", "-b", b, data, model, model+".theirs")
				out, theirErr := predict.CombinedOutput()
				err := run(data, model, model+".ours", true, b == "1")
				if theirErr != nil {
					if err == nil || !strings.Contains(string(out), strings.TrimPrefix(err.Error(), model+": ")) {
						t.Errorf("%s -s %s -b %s: liblinear-predict says %q, we %v", name, s, b, out, err)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s -s %s -b %s: %v", name, s, b, err)
					continue
				}
				ours, _ := os.ReadFile(model + ".ours")
				theirs, _ := os.ReadFile(model + ".theirs")
				if len(ours) == 0 || !bytes.Equal(ours, theirs) {
					t.Errorf("%s -s %s -b %s: predictions differ from liblinear-predict's", name, s, b)
				}
			}
		}
	}
}
