package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/osgm-svm/osgm/internal/s3test"
	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/shard"
)

// TestTrainFromS3: a training file read by range from a real
// S3-compatible server gives the model of the same file read from a
// path, in-process and with the embedded default's workers, and -t
// reads its test file from there too; -check names a missing object.
func TestTrainFromS3(t *testing.T) {
	srv := s3test.Start(t)
	srv.Env(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "three")
	var b strings.Builder
	for i := 0; i < 6000; i++ {
		c := i % 3
		fmt.Fprintf(&b, "%d %d:%g %d:1 %d:0.5\n", c+1, 1+i%89, 0.1*float64(i%7), 100+c, 200+(i*7)%41)
	}
	os.WriteFile(data, []byte(b.String()), 0o644)
	url := srv.Put(t, "train", "sets/three", data)
	train := func(args ...string) ([]byte, string) {
		t.Helper()
		model := filepath.Join(dir, "m.model")
		os.Remove(model)
		o, err := parse(append([]string{"-q", "-shards", "5"}, append(args, model)...))
		if err != nil {
			t.Fatal(err)
		}
		out := captureStdout(t, func() {
			if err := run(o); err != nil {
				t.Fatalf("%v: %v", args, err)
			}
		})
		got, _ := os.ReadFile(model)
		return got, out
	}
	want, wantAcc := train("-local", "-t", data, data)
	for _, args := range [][]string{{"-local", "-t", url, url}, {"-workers", "2", url}} {
		got, acc := train(args...)
		if !bytes.Equal(got, want) {
			t.Fatalf("%v: another model than the path's", args)
		}
		if args[1] == "-t" && acc != wantAcc {
			t.Fatalf("-t from s3 printed %q, from the path %q", acc, wantAcc)
		}
	}
	// The model put to the server: the same bytes, from in-process
	// workers whose finished classes wait in temporary files. A bucket
	// that is not there is found before training; the training file is
	// not overwritten.
	o, err := parse([]string{"-q", "-shards", "5", "-workers", "2", url, "s3://train/models/three.model"})
	if err != nil {
		t.Fatal(err)
	}
	if err := run(o); err != nil {
		t.Fatal(err)
	}
	if got := srv.Get(t, "train", "models/three.model"); !bytes.Equal(got, want) {
		t.Fatalf("the model put to S3 differs from the file's:\n%.300s", got)
	}
	for _, c := range []struct{ model, want string }{
		{"s3://nowhere/m.model", `no such bucket "nowhere"`},
		{url, "is an input"},
	} {
		o, err := parse([]string{"-q", "-local", url, c.model})
		if err != nil {
			t.Fatal(err)
		}
		if err := run(o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("model %s: %v, want an error saying %q", c.model, err, c.want)
		}
	}
	// A worker that loads its shards after the object was replaced
	// refuses it: no model mixes two versions of the data.
	id, err := input.Identify(url)
	if err != nil {
		t.Fatal(err)
	}
	changed := []byte(b.String())
	changed[0] = '3' // the same size: only the ETag tells
	os.WriteFile(data, changed, 0o644)
	srv.Put(t, "train", "sets/three", data)
	ranges := input.Layout(id.Size, 5)
	if _, err := shard.LoadChecked(url, ranges, shard.Options{}, id); !errors.Is(err, input.ErrChanged) {
		t.Fatalf("a load of a replaced object: %v", err)
	}
	o, err = parse([]string{"-check", "-local", "s3://train/sets/missing", filepath.Join(dir, "x.model")})
	if err != nil {
		t.Fatal(err)
	}
	if err := run(o); err == nil || !strings.Contains(err.Error(), "s3://train/sets/missing") || !strings.Contains(err.Error(), "no such object") {
		t.Fatalf("-check of a missing object: %v", err)
	}
}
