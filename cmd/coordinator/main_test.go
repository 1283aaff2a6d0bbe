package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/osgm-svm/osgm/internal/natstest"
	"github.com/osgm-svm/osgm/internal/testport"
	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/status"
	"github.com/osgm-svm/osgm/pkg/train"
	"github.com/osgm-svm/osgm/pkg/transport"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string // "" means success
	}{
		{[]string{"data"}, ""},
		{[]string{"-c", "0.5", "-e", "0.001", "-B", "1", "-method", "osgm-h", "data", "out.model"}, ""},
		{[]string{}, "need a training file"},
		{[]string{"a", "b", "c"}, "need a training file"},
		{[]string{"-c", "1", "-lambda", "0.1", "data"}, "either -c or -lambda"},
		{[]string{"-c", "0", "data"}, "-c must be positive"},
		{[]string{"-c", "-1", "data"}, "-c must be positive"},
		{[]string{"-lambda", "-1", "data"}, "-lambda must be positive"},
		{[]string{"-e", "0", "data"}, "-e must be positive"},
		{[]string{"-max-iter", "0", "data"}, "-max-iter must be at least 1"},
		{[]string{"-workers", "0", "data"}, "-workers must be at least 1"},
		{[]string{"-method", "simplex", "data"}, "unknown method"},
		{[]string{"-local", "-nats", "nats://x:4222", "data"}, "drop -nats"},
		{[]string{"-local", "-objstore", "data"}, "drop -local"},
		{[]string{"-compact", "-nats", "nats://x:4222", "data"}, "give it to the workers"},
		{[]string{"-compact=false", "-nats", "nats://x:4222", "data"}, "give it to the workers"},
		{[]string{"-compact=auto", "-nats", "nats://x:4222", "data"}, ""},
		{[]string{"-compact=auto", "data"}, ""},
		{[]string{"-compact=false", "data"}, ""},
		{[]string{"-compact=sometimes", "data"}, "want auto, true or false"},
		{[]string{"-shards", "-2", "data"}, "-shards must be"},
		{[]string{"-no-worker-timeout", "-1s", "data"}, "must not be negative"},
		{[]string{"-no-worker-timeout", "10m", "-nats", "nats://x:4222", "data"}, ""},
		{[]string{"-heartbeat-timeout", "0s", "data"}, "-heartbeat-timeout must be positive"},
		{[]string{"-load-stall", "-1m", "data"}, "-load-stall must be positive"},
		{[]string{"-load-stall", "5m", "-heartbeat-timeout", "10s", "data"}, ""},
		{[]string{"-v", "5", "-w1", "2", "-w-1", "0.5", "data"}, ""},
		{[]string{"-C", "-c", "0.01", "data"}, ""},
		{[]string{"-v", "1", "data"}, "-v needs at least 2 folds"},
		{[]string{"-C", "-lambda", "0.1", "data"}, "not -lambda"},
		{[]string{"-v", "5", "-compare", "hdm,lbfgs", "data"}, "run them separately"},
		{[]string{"-v", "5", "-checkpoint", "ck", "data"}, "drop -checkpoint"},
		{[]string{"-C", "-i", "m", "data"}, "drop -i"},
		{[]string{"-v", "3", "-t", "test", "data"}, "drop -t"},
		{[]string{"-resume", "data"}, "-resume needs -checkpoint"},
		{[]string{"-resume=auto", "data"}, "-resume needs -checkpoint"},
		{[]string{"-method", "gonum-lbfgs", "-checkpoint", "ck", "data"}, "-method gonum-lbfgs cannot be checkpointed"},
		{[]string{"-resume=auto", "-checkpoint", "ck", "data"}, ""},
		{[]string{"-resume=maybe", "-checkpoint", "ck", "data"}, "want false, true or auto"},
		{[]string{"-w1", "data"}, "the weight must be a positive number"},
		{[]string{"-w1", "0", "data"}, "the weight must be a positive number"},
		{[]string{"data", "-w1"}, "needs a weight"},
		{[]string{"-s", "2", "-c", "4", "data"}, ""},
		{[]string{"-s", "1", "data"}, "give -s 2"},
		{[]string{"-s", "0", "data"}, ""},
		{[]string{"-s", "3", "data"}, "L1-loss SVM (dual); this trainer trains -s 0"},
		{[]string{"-s", "11", "data"}, ""},
		{[]string{"-s", "9", "data"}, "no such solver"},
		{[]string{"-s", "11", "-p", "0", "data"}, ""},
		{[]string{"-s", "11", "-p", "-0.1", "data"}, "-p must be a number >= 0"},
		{[]string{"-s", "12", "data"}, "L2-loss support vector regression (dual); this trainer trains"},
	}
	for _, tc := range tests {
		o, err := parse(tc.args)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
		case tc.want == "" && o.model == "":
			t.Errorf("%v: no model file", tc.args)
		}
	}
	o, _ := parse([]string{"/some/dir/a9a"})
	if o.model != "a9a.model" {
		t.Errorf("default model %q, want LIBLINEAR's a9a.model", o.model)
	}
}

// TestRunEmbedded trains through the default path (embedded NATS server,
// in-process workers) and through -local, each with and without -compact
// (the values here, 22 distinct ones, become codes); all must write the
// same model, and it must classify the training data.
func TestRunEmbedded(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "train")
	var b strings.Builder
	for i := 0; i < 400; i++ {
		x := float64(i%17)/17 - 0.5
		lab := "+1"
		if x+0.1*float64(i%3) < 0.1 {
			lab = "-1"
		}
		b.WriteString(lab + " 1:" + ftoa(x) + " 3:" + ftoa(float64(i%5)) + "\n")
	}
	os.WriteFile(data, []byte(b.String()), 0o644)
	models := map[string][]byte{}
	for _, solver := range []string{"2", "0", "11"} {
		for _, mode := range []string{"embedded", "local", "embedded-compact", "local-compact"} {
			o, err := parse([]string{"-q", "-s", solver, "-e", "1e-4", "-B", "1", "-workers", "2",
				"-local=" + strconv.FormatBool(strings.HasPrefix(mode, "local")), "-compact=" + strconv.FormatBool(strings.HasSuffix(mode, "compact")),
				data, filepath.Join(dir, mode+solver+".model")})
			if err != nil {
				t.Fatal(err)
			}
			if err := run(o); err != nil {
				t.Fatalf("%s -s %s: %v", mode, solver, err)
			}
			models[mode+solver], _ = os.ReadFile(o.model)
		}
	}
	for mode, m := range models {
		local := models["local"+strings.TrimLeft(mode, "abcdefghijklmnopqrstuvwxyz-")]
		if !bytes.Equal(m, local) {
			t.Fatalf("%s and local runs wrote different models", mode)
		}
	}
	if bytes.Equal(models["local0"], models["local2"]) {
		t.Fatal("-s 0 and -s 2 wrote the same model")
	}
	m, err := libsvm.ReadModel(bytes.NewReader(models["local2"]), "m")
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(data)
	defer f.Close()
	acc, err := libsvm.PredictAll(f, data, m, nil)
	if err != nil || acc.Correct*10 < acc.Total*8 {
		t.Fatalf("training accuracy %v (%v)", acc, err)
	}
}

// TestRunReportsBadInput is the table of hostile or broken inputs: each
// ends with an error that names the file and the problem, never a panic
// and never a model.
func TestRunReportsBadInput(t *testing.T) {
	dir := t.TempDir()
	good := "1 1:1 2:0.5\n-1 1:-1 3:2\n1 2:1\n-1 3:1\n"
	var bz bytes.Buffer
	cmd := exec.Command("bzip2", "-c")
	cmd.Stdin, cmd.Stdout = strings.NewReader(strings.Repeat(good, 2000)), &bz
	haveBzip2 := cmd.Run() == nil
	cases := []struct {
		name, text string
		args       []string
		want       string
	}{
		{"zero-index", "1 1:1\n-1 0:2\n", nil, "zero-index:2: feature index 0 (indices start at 1)"},
		{"decreasing", "1 1:1\n-1 7:1 5:2\n", nil, "decreasing:2: index 5 after 7: indices must increase"},
		{"not-a-number", "1 1:abc\n", nil, `not-a-number:1: index 1: "abc" is not a number`},
		{"nan", "1 1:nan\n-1 2:1\n", nil, "nan:1: index 1: value is NaN"},
		{"qid", "1 qid:3 1:1\n", nil, "qid:1: qid is not supported"},
		{"index-overflow", "1 4294967296:1\n", nil, "index-overflow:1: index 4294967296 out of range"},
		{"huge-index", "1 1:1\n-1 4294967295:1\n", nil, "needs about 64.0 GiB"}, // the model alone is 32 GiB
		{"one-class", "1 1:1\n1 2:1\n", nil, "one-class: only one class"},
		{"labels-only", "1\n-1\n1 \n", nil, "labels-only: no row has a feature (each holds a label only) and there is no bias"},
		// heart_scale stalled at w = 0 from about C m = 1e200 on.
		{"huge-c", good, []string{"-c", "1e300"}, "huge-c: lambda = 2.5e-301 (C m = 4e+300) is below 1e-150"},
		{"tiny-lambda", good, []string{"-lambda", "1e-151"}, "lambda = 1e-151 (C m = 1e+151) is below 1e-150"},
		{"empty", "", nil, "empty: no data lines"},
		{"comments-only", "# nothing\n\n", nil, "comments-only: no data lines"},
		{"fraction-label", "0.5 1:1\n1 1:2\n", nil, "label 0.5 is not an integer"},
		{"test-labels", good, []string{"-t", "TESTFILE"}, "labels the training file does not have"},
		{"missing", "", []string{"-missing"}, "no such file"},
		{"directory", "", []string{"-dir"}, "is a directory"},
		// Regression targets are real numbers, and finite.
		{"nan-target", "1.5 1:1\nnan 1:2\n", []string{"-s", "11"}, "nan-target:2: label: value is NaN"},
		{"inf-target", "1.5 1:1\n-inf 1:2\n", []string{"-s", "11"}, "inf-target:2: label: value is infinite"},
		{"word-target", "1.5 1:1\nabc 1:2\n", []string{"-s", "11"}, `word-target:2: label: "abc" is not a number`},
		{"weighted-regression", good, []string{"-s", "11", "-w1", "2"}, "class weights (-wi) are for classification"},
		{"one-class-logistic", "1 1:1\n1 2:1\n", []string{"-s", "0"}, "one-class-logistic: only one class"},
	}
	if haveBzip2 {
		cases = append(cases, struct {
			name, text string
			args       []string
			want       string
		}{"truncated.bz2", string(bz.Bytes()[:bz.Len()/2]), nil, "truncated.bz2"})
	}
	testFile := filepath.Join(dir, "test-with-new-labels")
	os.WriteFile(testFile, []byte("7 1:1\n1 1:1\n"), 0o644)
	for _, tc := range cases {
		path := filepath.Join(dir, tc.name)
		os.WriteFile(path, []byte(tc.text), 0o644)
		var extra []string
		for _, a := range tc.args {
			switch a {
			case "TESTFILE":
				extra = append(extra, testFile)
			case "-missing":
				path = filepath.Join(dir, "does-not-exist")
			case "-dir":
				path = dir
			default:
				extra = append(extra, a)
			}
		}
		o, err := parse(append(append([]string{"-q", "-local"}, extra...), path, filepath.Join(dir, "m")))
		if err != nil {
			t.Fatal(err)
		}
		err = run(o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestRunRefusesUnwritableOutputs: a file the run would write that
// cannot be made, or an initial model or test file that cannot be read,
// is refused before anything is loaded (the training file here does not
// even exist), with the flag, the path and the reason.
func TestRunRefusesUnwritableOutputs(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-such-dir")
	data := filepath.Join(dir, "not-read")
	bad := filepath.Join(t.TempDir(), "lr.model")
	if err := os.WriteFile(bad, []byte("solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias -1\nw\n0.5 \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// LIBLINEAR's default solver's model is this problem's: it passes
	// the checks and the run gets as far as the (missing) data.
	dual := filepath.Join(filepath.Dir(bad), "dual.model")
	if err := os.WriteFile(dual, []byte("solver_type L2R_L2LOSS_SVC_DUAL\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias -1\nw\n0.5 \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	biased := filepath.Join(filepath.Dir(bad), "b.model")
	if err := os.WriteFile(biased, []byte("solver_type L2R_L2LOSS_SVC\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias 1\nw\n0.5 \n0.25 \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "m")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{data, filepath.Join(missing, "m")}, "model file " + missing + "/m: cannot create a file in " + missing + ": no such file or directory"},
		{[]string{data, dir}, "model file " + dir + " is a directory"},
		{[]string{"-checkpoint", filepath.Join(missing, "ck"), data, model}, "-checkpoint " + missing + "/ck: cannot create"},
		{[]string{"-plot", filepath.Join(missing, "p.png"), data, model}, "-plot " + missing + "/p.png: cannot create"},
		{[]string{"-trace", filepath.Join(missing, "t.csv"), data, model}, "-trace " + missing + "/t.csv: cannot create"},
		{[]string{"-v", "3", data, filepath.Join(missing, "m")}, "open " + data}, // -v writes no model
		// Data files are not outputs (LIBLINEAR would overwrite them).
		{[]string{bad, bad}, "model file " + bad + " is the training file: it would be overwritten"},
		{[]string{"-trace", bad, bad, model}, "-trace " + bad + " is the training file"},
		{[]string{"-t", bad, data, bad}, "model file " + bad + " is the -t file"},
		{[]string{"-checkpoint", model, data, model}, "-checkpoint and model file are both " + model},
		// Inputs other than the data are looked at before it is read.
		{[]string{"-t", filepath.Join(missing, "test"), data, model}, "-t: open " + missing + "/test: no such file"},
		{[]string{"-i", filepath.Join(missing, "init"), data, model}, "-i: open " + missing + "/init: no such file"},
		{[]string{"-i", bad, data, model}, "-i: " + bad + ": solver_type L2R_LR; a warm start needs a model of this problem"},
		{[]string{"-i", dual, data, model}, "not-read: no such file"},
		{[]string{"-s", "0", "-i", bad, data, model}, "not-read: no such file"},
		{[]string{"-s", "0", "-i", dual, data, model}, "solver_type L2R_L2LOSS_SVC_DUAL; a warm start needs a model of this problem, L2-regularised logistic regression (LIBLINEAR -s 0)"},
		{[]string{"-i", biased, data, model}, "-i " + biased + ": initial model has bias 1, training uses -1: use the same -B"},
	} {
		o, err := parse(append([]string{"-q", "-local"}, tc.args...))
		if err != nil {
			t.Fatal(err)
		}
		if err := run(o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the checks left files behind: %v", entries)
	}
}

// TestClassWeightFlags: LIBLINEAR's -wi pairs, negative labels included,
// come out of the arguments before the flag package sees them; -workers
// and friends are left alone.
func TestClassWeightFlags(t *testing.T) {
	tests := []struct {
		args []string
		rest []string
		ws   []train.ClassWeight
	}{
		{[]string{"-w1", "2", "data"}, []string{"data"}, []train.ClassWeight{{Label: 1, Weight: 2}}},
		{[]string{"-w-1", "0.5", "-workers", "3", "data"}, []string{"-workers", "3", "data"}, []train.ClassWeight{{Label: -1, Weight: 0.5}}},
		{[]string{"-w3=1.5", "-w3", "2", "data"}, []string{"data"}, []train.ClassWeight{{Label: 3, Weight: 1.5}, {Label: 3, Weight: 2}}},
		{[]string{"-c", "1", "data"}, []string{"-c", "1", "data"}, nil},
	}
	for _, tc := range tests {
		rest, ws, err := classWeights(tc.args)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if !slices.Equal(rest, tc.rest) || !slices.Equal(ws, tc.ws) {
			t.Errorf("%v: rest %v weights %v, want %v %v", tc.args, rest, ws, tc.rest, tc.ws)
		}
	}
}

// TestCrossValidationEverywhere: -v prints LIBLINEAR's line, and the
// embedded NATS cluster (workers numbering their own folds) gives the
// in-process accuracy to the last digit, with and without class weights;
// -C prints its search and writes no model.
func TestCrossValidationEverywhere(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "train")
	var b strings.Builder
	for i := 0; i < 500; i++ {
		x := float64(i%23)/23 - 0.5
		lab := "+1"
		if x+0.2*float64(i%3)-0.2 < 0.05*float64(i%5) {
			lab = "-1"
		}
		b.WriteString(lab + " 1:" + ftoa(x) + " 3:" + ftoa(float64(i%5)/5) + "\n")
	}
	os.WriteFile(data, []byte(b.String()), 0o644)
	for _, weights := range [][]string{nil, {"-w-1", "3"}, {"-s", "11"}} {
		outs := map[string]string{}
		for _, mode := range []string{"embedded", "local"} {
			args := append([]string{"-q", "-v", "4", "-e", "1e-6", "-shards", "5", "-workers", "2", "-local=" + strconv.FormatBool(mode == "local")}, weights...)
			o, err := parse(append(args, data, filepath.Join(dir, "m")))
			if err != nil {
				t.Fatal(err)
			}
			outs[mode] = captureStdout(t, func() {
				if err := run(o); err != nil {
					t.Fatal(err)
				}
			})
		}
		if !strings.HasPrefix(outs["local"], "Cross Validation ") || outs["local"] != outs["embedded"] {
			t.Fatalf("weights %v: in-process %q, embedded NATS %q", weights, outs["local"], outs["embedded"])
		}
		t.Logf("weights %v: %s", weights, strings.TrimSpace(outs["local"]))
	}
	// LIBLINEAR's -C prints a line per C unless -q, and its first and
	// last lines always; for -s 11 its lines name p too.
	for _, solver := range [][]string{nil, {"-s", "11", "-p", "0.1"}} {
		for _, quiet := range []bool{false, true} {
			args := append([]string{"-q=" + strconv.FormatBool(quiet), "-C", "-v", "3", "-workers", "2"}, solver...)
			o, err := parse(append(args, data, filepath.Join(dir, "m")))
			if err != nil {
				t.Fatal(err)
			}
			out := captureStdout(t, func() {
				if err := run(o); err != nil {
					t.Fatal(err)
				}
			})
			checkSearchOutput(t, out, quiet, solver != nil)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "m")); err == nil {
		t.Fatal("-v/-C wrote a model, as LIBLINEAR does not")
	}
}

var (
	searchStep  = regexp.MustCompile(`^log2c=[ 0-9.-]{7}\trate=[0-9.]+$`)
	searchStepP = regexp.MustCompile(`^log2c=[ 0-9.-]{7}\tp=[ 0-9.]{7}\tMean squared error=[0-9.e+-]+$`)
	searchBest  = regexp.MustCompile(`^Best C = [0-9.e+-]+  CV accuracy = [0-9.]+%$`)
	searchBestP = regexp.MustCompile(`^Best C = [0-9.e+-]+ Best p = [0-9.e+-]+  CV MSE = [0-9.e+-]+$`)
)

// checkSearchOutput checks -C's lines against LIBLINEAR's formats.
func checkSearchOutput(t *testing.T, out string, quiet, regression bool) {
	t.Helper()
	step, best := searchStep, searchBest
	if regression {
		step, best = searchStepP, searchBestP
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if lines[0] != "Doing parameter search with 3-fold cross validation." || !best.MatchString(lines[len(lines)-1]) || (quiet && len(lines) != 2) {
		t.Fatalf("-C output with -q=%v:\n%s", quiet, out)
	}
	steps := 0
	for _, l := range lines[1 : len(lines)-1] {
		if step.MatchString(l) {
			steps++
		} else if l != "warning: maximum C reached." {
			t.Fatalf("-C output with -q=%v: line %q", quiet, l)
		}
	}
	if (steps == 0) != quiet {
		t.Fatalf("-C output with -q=%v: %d steps:\n%s", quiet, steps, out)
	}
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// TestCompare runs several methods on the same shards: the table names
// each, the plot decodes, and the model written is the best one.
func TestCompare(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "train")
	var b strings.Builder
	for i := 0; i < 300; i++ {
		lab := "+1"
		if i%3 == 0 {
			lab = "-1"
		}
		b.WriteString(lab + " 1:" + ftoa(float64(i%7)/7) + " 2:" + ftoa(float64(i%3)) + "\n")
	}
	os.WriteFile(data, []byte(b.String()), 0o644)
	plot := filepath.Join(dir, "c.png")
	o, err := parse([]string{"-q", "-local", "-e", "1e-4", "-compare", "gd,hdm,lbfgs", "-plot", plot, data, filepath.Join(dir, "m")})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	backendOut := captureStdout(t, func() {
		if err := run(o); err != nil {
			t.Fatal(err)
		}
	})
	out.WriteString(backendOut)
	for _, m := range []string{"| gd |", "| hdm |", "| lbfgs |", "f* ="} {
		if !strings.Contains(out.String(), m) {
			t.Errorf("comparison table lacks %q:\n%s", m, out.String())
		}
	}
	if st, err := os.Stat(plot); err != nil || st.Size() == 0 {
		t.Fatalf("no plot: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "m")); err != nil {
		t.Fatal("no model written")
	}
}

func captureStdout(t *testing.T, fn func()) string {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		var b bytes.Buffer
		b.ReadFrom(r)
		done <- b.String()
	}()
	fn()
	w.Close()
	os.Stdout = old
	return <-done
}

// TestResumeAuto: -resume needs the checkpoint to exist; -resume=auto
// starts without one, and the same command run again resumes (here from
// the state at the end: the same model). Other flags are refused with
// the way out named.
func TestResumeAuto(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "train")
	var b strings.Builder
	for i := range 300 {
		b.WriteString(fmt.Sprintf("%d 1:%s 2:%s\n", 2*(i%2)-1, ftoa(float64(i%7)/7), ftoa(float64(i%11)/11-float64(i%2)/3)))
	}
	os.WriteFile(data, []byte(b.String()), 0o644)
	ck := filepath.Join(dir, "ck")
	runWith := func(model string, args ...string) error {
		o, err := parse(append(append([]string{"-q", "-local", "-e", "1e-4", "-method", "lbfgs", "-checkpoint", ck, "-checkpoint-every", "3"}, args...), data, filepath.Join(dir, model)))
		if err != nil {
			t.Fatal(err)
		}
		return run(o)
	}
	if err := runWith("m0", "-resume"); err == nil || !strings.Contains(err.Error(), ck+": no checkpoint there") {
		t.Fatalf("-resume without a checkpoint: %v", err)
	}
	if err := runWith("m1", "-resume=auto"); err != nil {
		t.Fatal(err)
	}
	if fileSize(ck) <= 0 {
		t.Fatal("no checkpoint written")
	}
	if err := runWith("m2", "-resume=auto"); err != nil {
		t.Fatal(err)
	}
	m1, _ := os.ReadFile(filepath.Join(dir, "m1"))
	m2, _ := os.ReadFile(filepath.Join(dir, "m2"))
	if len(m1) == 0 || !bytes.Equal(m1, m2) {
		t.Fatal("the resumed run wrote another model")
	}
	if err := runWith("m3", "-resume=auto", "-c", "2"); err == nil || !strings.Contains(err.Error(), "remove "+ck+" to train from the start") {
		t.Fatalf("-resume=auto with other flags: %v", err)
	}
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return fi.Size()
}

// TestWarnShort: each problem that stops short of -e is warned about
// with the reason its method gave.
func TestWarnShort(t *testing.T) {
	for _, c := range []struct {
		name string
		stop []osgm.Stop
		want []string // the warnings' first words, in order
	}{
		{"all converged", []osgm.Stop{osgm.Converged, osgm.Converged}, nil},
		{"at the limit", []osgm.Stop{osgm.Converged, osgm.MaxIter}, []string{"stopped at -max-iter"}},
		{"at precision", []osgm.Stop{osgm.Stalled, osgm.Converged}, []string{"stopped before reaching -e: steps no longer change"}},
		{"both", []osgm.Stop{osgm.MaxIter, osgm.Stalled, osgm.Converged}, []string{"stopped at -max-iter", "stopped before reaching -e: steps no longer change"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			core, logs := observer.New(zap.WarnLevel)
			warnShort(zap.New(core), &osgm.Result{Stop: c.stop}, 100)
			got := logs.All()
			if len(got) != len(c.want) {
				t.Fatalf("%d warnings, want %d: %v", len(got), len(c.want), got)
			}
			for i, w := range c.want {
				if !strings.HasPrefix(got[i].Message, w) {
					t.Errorf("warning %d: %q, want it to begin %q", i, got[i].Message, w)
				}
			}
		})
	}
}

// A model or checkpoint is streamed to a temporary file, so a write that
// fails half way must leave the old file whole and no temporary behind.
func TestWriteAtomic(t *testing.T) {
	tests := []struct {
		name  string
		write func(w io.Writer) error
		want  string // the file's content after
		err   string
	}{
		{"replaces", func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }, "new", ""},
		{"fails half way", func(w io.Writer) error {
			io.WriteString(w, "ne")
			return errors.New("disk full")
		}, "old", "disk full"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "a.model")
			if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			err := writeAtomic(path, tt.write)
			if (err == nil) != (tt.err == "") || err != nil && !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("error %v, want %q", err, tt.err)
			}
			if b, _ := os.ReadFile(path); string(b) != tt.want {
				t.Errorf("file holds %q, want %q", b, tt.want)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Errorf("%d files left in the directory, want the model only", len(ents))
			}
		})
	}
	t.Run("mode", func(t *testing.T) {
		// LIBLINEAR's fopen gives 0666 less the umask: a model another
		// user's predictor reads. The test's umask is the process's.
		umask := syscall.Umask(0o022)
		defer syscall.Umask(umask)
		path := filepath.Join(t.TempDir(), "b.model")
		if err := writeAtomic(path, func(w io.Writer) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
			t.Fatalf("mode %v (%v), want -rw-r--r--", fi.Mode().Perm(), err)
		}
	})
}

// A stopped run (SIGINT, SIGTERM: the context) does not wait for a -local
// load to finish; the embedded path's waits are TestWaitConnectedEnds and
// the cluster's own.
func TestLocalLoadStops(t *testing.T) {
	data := filepath.Join(t.TempDir(), "train")
	var b strings.Builder
	for i := range 100_000 { // a few megabytes: the load takes milliseconds
		fmt.Fprintf(&b, "%d 1:%d 2:0.5 7:%d\n", 2*(i%2)-1, i%13, i%7)
	}
	os.WriteFile(data, []byte(b.String()), 0o644)
	o, err := parse([]string{"-q", "-local", data})
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(data)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	be, _, closeBackend, err := openBackend(ctx, o.train, &o.backend, input.Layout(info.Size(), 0), &shard.Shared{}, zap.NewNop())
	if !errors.Is(err, context.Canceled) {
		if err == nil {
			closeBackend()
		}
		t.Fatalf("got %v (backend %v), want the context's error", err, be)
	}
}

func TestCVError(t *testing.T) {
	o := &options{train: "a9a"}
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("fold 2: %w", osgm.ErrInterrupted), "interrupted; cross-validation keeps no state"},
		{errors.New("worker lost"), "a9a: worker lost"},
	} {
		if got := cvError(o, c.err).Error(); !strings.Contains(got, c.want) {
			t.Errorf("%v: got %q, want %q", c.err, got, c.want)
		}
	}
}

// Rows of labels only, with a bias: the one weight is the classes'
// balance, 2/7 here as LIBLINEAR 2.30 gives it (0.2857142857142857),
// over NATS and in-process alike (the reduction of a pass without
// feature columns once panicked).
func TestBiasAlone(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "labels")
	os.WriteFile(data, []byte("1\n-1\n1 \n"), 0o644)
	for _, local := range []bool{true, false} {
		model := filepath.Join(dir, fmt.Sprintf("m%v", local))
		o, err := parse([]string{"-q", "-B", "1", "-e", "1e-8", "-local=" + strconv.FormatBool(local), data, model})
		if err != nil {
			t.Fatal(err)
		}
		if err := run(o); err != nil {
			t.Fatalf("-local=%v: %v", local, err)
		}
		m, err := readModel(model, shard.SquaredHinge)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.W) != 1 || len(m.W[0]) != 1 || math.Abs(m.W[0][0]-2.0/7) > 1e-12 {
			t.Errorf("-local=%v: weights %v, want [[2/7]]", local, m.W)
		}
		// Cross-validation counts each fold's rows with a point of no
		// feature, which workers refused.
		o, err = parse([]string{"-q", "-B", "1", "-v", "3", "-local=" + strconv.FormatBool(local), data})
		if err != nil {
			t.Fatal(err)
		}
		out := captureStdout(t, func() {
			if err := run(o); err != nil {
				t.Errorf("-v 3 -local=%v: %v", local, err)
			}
		})
		if !strings.HasPrefix(out, "Cross Validation Accuracy = ") {
			t.Errorf("-v 3 -local=%v: %q", local, out)
		}
	}
}

// More folds than rows is leave-one-out, and the log says so, as
// LIBLINEAR warns.
func TestCrossValidateWarnsOfFewRows(t *testing.T) {
	data := filepath.Join(t.TempDir(), "three")
	os.WriteFile(data, []byte("1 1:1\n-1 2:1\n1 1:0.5\n"), 0o644)
	for _, folds := range []int{3, 5} {
		o, err := parse([]string{"-q", "-local", "-v", strconv.Itoa(folds), data})
		if err != nil {
			t.Fatal(err)
		}
		info, _ := os.Stat(data)
		b, _, closeBackend, err := openBackend(context.Background(), o.train, &o.backend, input.Layout(info.Size(), 0), &shard.Shared{}, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		core, logs := observer.New(zap.WarnLevel)
		cfg := train.Config{Problem: train.Problem{C: 1, Bias: -1}, Settings: train.Settings{Options: osgm.Options{Method: osgm.DefaultMethod, MaxIter: 1000}, MaxBytes: 1 << 30, Eps: 0.01}}
		if err := crossValidate(o, b, cfg, zap.New(core), io.Discard); err != nil {
			t.Fatal(err)
		}
		closeBackend()
		if warned := logs.FilterMessage("more folds than rows: leave-one-out cross-validation").Len() == 1; warned != (folds > 3) {
			t.Errorf("%d folds of 3 rows: warned %v", folds, warned)
		}
	}
}

// In-process workers log their warnings to the coordinator's log: when a
// round gives up with "see their logs", there are logs to see.
func TestInProcessWorkersLog(t *testing.T) {
	srv, err := transport.Embedded("")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	inProcess := []nats.Option{nats.InProcessServer(srv)}
	core, logs := observer.New(zap.WarnLevel)
	stop, err := startWorker(context.Background(), srv.ClientURL(), 1, shard.CompactAuto, &shard.Shared{}, inProcess, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	nc, err := transport.Connect(srv.ClientURL(), "test", transport.Auth{}, zap.NewNop(), inProcess...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync(wire.SubjectHeartbeat)
	if err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, payload, err := wire.DecodeChunk(m.Data)
	var hb wire.Heartbeat
	if err != nil || json.Unmarshal(payload, &hb) != nil || hb.ID == "" {
		t.Fatalf("heartbeat %q: %v", m.Data, err)
	}
	nc.Publish(wire.WorkerSubject(hb.ID), []byte("not a message"))
	natstest.WaitFor(t, 10*time.Second, "the worker's warning about a bad message in the log", func() bool { return logs.Len() > 0 })
	if e := logs.All()[0]; e.LoggerName != "local0" {
		t.Errorf("warning from logger %q: %s", e.LoggerName, e.Message)
	}
}

// TestEveryFlagInOneGroup: -h lists options by group, so a flag added
// without a group would vanish from the help, and one in two groups
// would be listed twice.
func TestEveryFlagInOneGroup(t *testing.T) {
	fs, _, _ := newFlags(&options{})
	groups := map[string]int{}
	for _, g := range flagGroups {
		for _, name := range g.names {
			if fs.Lookup(name) == nil {
				t.Errorf("group %q names -%s, which is no flag", g.title, name)
			}
			groups[name]++
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if groups[f.Name] != 1 {
			t.Errorf("-%s is in %d groups of -h, not one", f.Name, groups[f.Name])
		}
	})
	var b strings.Builder
	usage(&b, fs)
	for _, want := range []string{"LIBLINEAR's options:\n  -s int", "  -wi weight", "Security", "  -nats string"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("-h lacks %q:\n%s", want, b.String())
		}
	}
}

// talliesCounted is a backend that counts its tallies.
type talliesCounted struct {
	objective.Backend
	n int
}

func (b *talliesCounted) Tally(p *shard.Point) (shard.Tally, error) {
	b.n++
	return b.Backend.Tally(p)
}

// TestTrainAccuracyOnlyAtOnce: the training accuracy predicts with every
// problem's weights at once, a K x features point on every worker, so it
// is tallied and logged only where the problems were minimised at once,
// not where batches kept the methods' state within the data's size.
func TestTrainAccuracyOnlyAtOnce(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&b, "%d 1:%g 2:%g\n", 1+i%3, float64(i%3)+0.1*float64(i%7), float64(i%5)/5)
	}
	path := filepath.Join(t.TempDir(), "three")
	os.WriteFile(path, []byte(b.String()), 0o644)
	shards, err := shard.Load(path, input.Layout(int64(b.Len()), 2), shard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	backend := &talliesCounted{Backend: objective.NewLocal(shards, 1)}
	res, err := train.Train(backend, train.Config{Problem: train.Problem{C: 1, Bias: 1}, Settings: train.Settings{Options: osgm.Options{Method: "lbfgs", MaxIter: 100}, Eps: 0.01}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		batch int
		want  bool
	}{{0, true}, {1, false}, {2, false}} {
		res.Batch, backend.n = c.batch, 0
		got := false
		for _, f := range trainedFields(res, &built{Backend: backend}, timeSplit{}, 0, 0, time.Second) {
			if f.Key == "train_accuracy" {
				got = f.Interface == nil && math.Float64frombits(uint64(f.Integer)) > 0.5
			}
		}
		if got != c.want || backend.n != map[bool]int{true: 1}[c.want] {
			t.Errorf("batch %d: train accuracy logged %v after %d tallies, want %v", c.batch, got, backend.n, c.want)
		}
	}
}

// TestShelvedModel: a multi-class set wide enough to train a class at a
// time writes the same model whether its finished classes wait on the
// shelf (plain runs, in process or over NATS) or are read back to test
// the model (-t), and the shelf leaves nothing beside the model.
func TestShelvedModel(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "wide")
	var b strings.Builder
	// A class's L-BFGS state over 40,000 live features is past what
	// one batch may hold (train.batchFloor).
	for i := 0; i < 40000; i++ {
		c := i % 4
		fmt.Fprintf(&b, "%d %d:1 %d:%g\n", c+1, 1+i, 40001+c, 0.2+0.1*float64(i%3))
	}
	os.WriteFile(data, []byte(b.String()), 0o644)
	shards, err := shard.Load(data, input.Layout(int64(b.Len()), 2), shard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := train.Train(objective.NewLocal(shards, 1), train.Config{Problem: train.Problem{C: 1, Bias: -1}, Settings: train.Settings{Options: osgm.Options{Method: "auto", MaxIter: 1000}, Eps: 0.01}})
	if err != nil || res.Batch == 0 {
		t.Fatalf("the set trains all classes at once (batch %d, %v): it shelves nothing", res.Batch, err)
	}
	var want []byte
	for _, args := range [][]string{{"-local"}, {"-local", "-t", data}, {"-workers", "2"}} {
		model := filepath.Join(dir, "m.model")
		o, err := parse(append(append([]string{"-q", "-shards", "2"}, args...), data, model))
		if err != nil {
			t.Fatal(err)
		}
		captureStdout(t, func() {
			if err := run(o); err != nil {
				t.Fatalf("%v: %v", args, err)
			}
		})
		got, _ := os.ReadFile(model)
		if want == nil {
			want = got
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%v: another model than -local's", args)
		}
		ents, _ := os.ReadDir(dir)
		if len(ents) != 2 {
			t.Fatalf("%v: %d names beside the data and the model", args, len(ents)-2)
		}
	}
	m, err := libsvm.ReadModel(bytes.NewReader(want), "m")
	if err != nil || len(m.W) != 4 {
		t.Fatalf("model of %d classes (%v)", len(m.W), err)
	}
	f, _ := os.Open(data)
	defer f.Close()
	if acc, err := libsvm.PredictAll(f, data, m, nil); err != nil || acc.Correct*10 < acc.Total*9 {
		t.Fatalf("training accuracy %v (%v)", acc, err)
	}
}

// TestInitFeaturesSaysWhatWasFitted: the warning for a warm start of
// other features than the data's names both counts and what was done.
func TestInitFeaturesSaysWhatWasFitted(t *testing.T) {
	for _, c := range []struct {
		n, dim int
		bias   float64
		want   string
	}{
		{20000, 13, -1, "-i: the model has 20000 features, the data 13: the weights of features 14-20000, which no row has, are dropped"},
		{20000, 14, 1, "-i: the model has 20000 features, the data 13: the weights of features 14-20000"},
		{10, 13, -1, "-i: the model has 10 features, the data 13: features 11-13 start at 0"},
	} {
		if got := initFeatures(c.n, c.dim, c.bias); !strings.HasPrefix(got, c.want) {
			t.Errorf("initFeatures(%d, %d, %g) = %q, want it to begin %q", c.n, c.dim, c.bias, got, c.want)
		}
	}
}

// TestProfiles: -cpuprofile and -memprofile leave pprof profiles, the
// heap's with its in-use and allocated samples.
func TestProfiles(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "train")
	os.WriteFile(data, []byte("+1 1:1 2:0.5\n-1 1:-1 3:0.25\n+1 2:1\n-1 3:-1\n"), 0o644)
	cpu, mem := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "mem.prof")
	o, err := parse([]string{"-q", "-local", "-cpuprofile", cpu, "-memprofile", mem, data, filepath.Join(dir, "m")})
	if err != nil {
		t.Fatal(err)
	}
	if err := run(o); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want []string
	}{{cpu, []string{"cpu"}}, {mem, []string{"inuse_space", "alloc_space"}}} {
		f, err := os.Open(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		zr, err := gzip.NewReader(f) // pprof's protobuf, gzipped
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		b, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		for _, w := range tc.want {
			if !bytes.Contains(b, []byte(w)) {
				t.Errorf("%s has no %q samples", filepath.Base(tc.path), w)
			}
		}
	}
}

// TestStatusPageFlag: -http serves the run's state while it lingers
// after the model (the job, passes, the embedded workers, the end with
// the model and the -t accuracy); a bad address is refused naming -http.
func TestStatusPageFlag(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "train")
	os.WriteFile(data, []byte("+1 1:1 2:0.5\n-1 1:-1 3:0.25\n+1 2:1\n-1 3:-1\n"), 0o644)
	addr := fmt.Sprintf("127.0.0.1:%d", testport.Free(t))
	o, err := parse([]string{"-q", "-workers", "2", "-http", addr, "-http-linger", "3s", "-t", data, data, filepath.Join(dir, "m")})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- run(o) }()
	var s status.Status
	natstest.WaitFor(t, time.Minute, "the status page to say the run is done", func() bool {
		r, err := http.Get("http://" + addr + "/api/status")
		if err != nil {
			return false
		}
		defer r.Body.Close()
		return json.NewDecoder(r.Body).Decode(&s) == nil && s.Phase == status.PhaseDone
	})
	if s.End == nil || s.End.Model != o.model || !strings.HasPrefix(s.End.Accuracy, "Accuracy = ") {
		t.Fatalf("the end: phase %q, %+v", s.Phase, s.End)
	}
	if s.Job.Rows != 4 || s.Job.File != data || s.Passes == 0 || len(s.Workers) != 1 || len(s.Curve) == 0 {
		t.Fatalf("job %+v, %d passes, workers %+v, %d points", s.Job, s.Passes, s.Workers, len(s.Curve))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := parse([]string{"-http", "8080", data}); err == nil || !strings.Contains(err.Error(), "-http") {
		t.Fatalf("-http 8080: %v", err)
	}
}
