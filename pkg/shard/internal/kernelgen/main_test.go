package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestGenerated fails when zkernels.go is not what the templates make:
// edited by hand, or a template changed without go generate.
func TestGenerated(t *testing.T) {
	want, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../zkernels.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("pkg/shard/zkernels.go is not what its templates make: run go generate in pkg/shard")
	}
}

// TestVariants: a ones kernel reads no values and no scale, and a values
// kernel reads its values.
func TestVariants(t *testing.T) {
	src, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Split(string(src), "\nfunc ")[1:] {
		name := f[:strings.IndexAny(f, "[(")]
		var code strings.Builder // the body without its comments
		for _, line := range strings.Split(f[strings.Index(f, "{"):], "\n") {
			code.WriteString(strings.SplitN(line, "//", 2)[0])
		}
		body := code.String()
		reads := strings.Contains(body, "m.val(") || strings.Contains(body, "m.dot(")
		if ones := strings.HasSuffix(name, "Ones"); ones {
			if reads || strings.Contains(body, "vs.") {
				t.Errorf("%s reads values", name)
			}
		} else if !reads {
			t.Errorf("%s reads no values", name)
		}
	}
}
