package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMain runs this command's main instead of the tests when a test
// starts the test binary with OSGM_TEST_MAIN=1: the only way to see what
// the process itself writes, including what zap writes past the
// logger's level.
func TestMain(m *testing.M) {
	if os.Getenv("OSGM_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestQuietIsQuiet: with -q, as with liblinear-train -q, a training
// prints nothing, a cross-validation its accuracy line alone and bad
// input one line naming the file and line, in process and over the
// embedded server. In-process workers log at the
// coordinator's level or above it; asking zap to lower a quiet logger's
// level to theirs printed "failed to IncreaseLevel" twice a run.
func TestQuietIsQuiet(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "train")
	var b strings.Builder
	for i := range 300 {
		x := float64(i%13)/13 - 0.5
		fmt.Fprintf(&b, "%+d 1:%s 2:%d\n", 1-2*(i%2), ftoa(x), i%7)
	}
	if err := os.WriteFile(data, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("+1 1:0.5\n-1 2:x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "model")
	accuracy := regexp.MustCompile(`^Cross Validation Accuracy = [0-9.]+%\n$`)
	badLine := regexp.MustCompile(`^coordinator: [^ ]*bad:2: index 2: "x" is not a number( \(read by worker [^)]+\))?\n$`)
	for _, tc := range []struct {
		name   string
		args   []string
		stdout *regexp.Regexp // nil: nothing
		stderr *regexp.Regexp // nil: nothing, and a zero exit status
	}{
		{"embedded", []string{"-q", data, model}, nil, nil},
		{"local", []string{"-q", "-local", data, model}, nil, nil},
		{"embedded -v", []string{"-q", "-v", "3", data}, accuracy, nil},
		{"local -v", []string{"-q", "-local", "-v", "3", data}, accuracy, nil},
		// Bad input: one line saying where, as liblinear-train's.
		{"embedded, bad input", []string{"-q", bad, model}, nil, badLine},
		{"local, bad input", []string{"-q", "-local", bad, model}, nil, badLine},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], tc.args...)
			cmd.Env = append(os.Environ(), "OSGM_TEST_MAIN=1")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if tc.stderr != nil {
				if err == nil || !tc.stderr.Match(stderr.Bytes()) {
					t.Errorf("%v: %v, stderr %q", tc.args, err, stderr.String())
				}
				if _, err := os.Stat(model); err == nil {
					t.Error("a model was written")
				}
				return
			}
			if err != nil {
				t.Fatalf("%v: %v\n%s", tc.args, err, stderr.String())
			}
			if tc.stdout == nil {
				if _, err := os.Stat(model); err != nil {
					t.Fatalf("no model written: %v", err)
				}
				os.Remove(model)
			}
			if stderr.Len() > 0 {
				t.Errorf("stderr: %q", stderr.String())
			}
			if tc.stdout == nil && stdout.Len() > 0 || tc.stdout != nil && !tc.stdout.Match(stdout.Bytes()) {
				t.Errorf("stdout: %q", stdout.String())
			}
		})
	}
}
