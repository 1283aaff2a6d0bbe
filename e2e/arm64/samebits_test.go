// Package arm64 checks that the arm64 build writes the amd64 build's
// model bytes, its binaries and its image run under qemu. Its two tests
// share one arm64 build of every dependency (the image's goes first), and
// the package has Go's test timeout to itself.
package arm64

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/osgm-svm/osgm/internal/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m, "../..", buildArm64) }

// arm64 is the directory of the arm64 build of the coordinator and
// worker (armErr, why there is none), made before the tests: the first
// arm64 build of every dependency takes minutes, which are not the
// tests' own.
var (
	arm64  string
	armErr error
)

func buildArm64() {
	if runtime.GOARCH != "amd64" {
		return
	}
	dir := e2etest.Bin("arm64") // removed with the amd64 binaries
	// -trimpath as scripts/images.sh -arm64 (TestArm64Image) builds: the
	// two share the build cache, and only the link differs (this one
	// keeps the symbols objdump needs).
	build := exec.Command("go", "build", "-trimpath", "-o", dir+"/", "./cmd/coordinator", "./cmd/worker")
	build.Dir, build.Env = "../..", append(os.Environ(), "GOARCH=arm64", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		armErr = fmt.Errorf("%v\n%s", err, out)
		return
	}
	arm64 = dir
}

// TestArm64SameBits: the arm64 build writes the amd64 build's model
// bytes. Its code has no fused multiply-add in this module's functions
// (Go fuses x*y + z on arm64 unless a conversion rounds the product; see
// the determinism rule in docs/ARCHITECTURE.md), and under
// qemu-aarch64-static it trains binary and one-vs-rest sets, in process
// and embedded, and one set over NATS with the CPUs mixed either way,
// to the same bytes.
func TestArm64SameBits(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("compares an amd64 host's builds with arm64's")
	}
	if armErr != nil {
		t.Fatalf("arm64 build: %v", armErr)
	}
	for _, name := range []string{"coordinator", "worker"} {
		if fused := fusedFunctions(t, filepath.Join(arm64, name)); len(fused) > 0 {
			t.Fatalf("arm64 %s fuses multiply-adds in %d functions, whose bits then differ from amd64's: %s", name, len(fused), strings.Join(fused, ", "))
		}
	}
	qemu, err := exec.LookPath("qemu-aarch64-static")
	if err != nil {
		t.Skip("no qemu-aarch64-static (apt-get install qemu-user-static): the arm64 build is checked for fused multiply-adds only")
	}
	a9a, dna := e2etest.Dataset(t, "a9a"), e2etest.Dataset(t, "dna.scale")
	for _, c := range []struct {
		data string
		args []string
	}{
		{a9a, []string{"-local", "-method", "newton", "-e", "1e-6"}},
		{a9a, []string{"-local", "-method", "lbfgs", "-e", "1e-6"}},
		{a9a, []string{"-local", "-method", "hdm", "-e", "1e-4", "-max-iter", "600"}},
		{dna, []string{"-local"}},
		{dna, nil}, // embedded: classes side by side on the workers' shards
	} {
		want := e2etest.Train(t, c.data, c.args...)
		model := filepath.Join(t.TempDir(), "model")
		p := e2etest.Launch(t, exec.Command(qemu, append([]string{filepath.Join(arm64, "coordinator")}, append(c.args, c.data, model)...)...), "arm64 coordinator")
		p.Wait(t, 10*time.Minute)
		if !bytes.Equal(e2etest.ReadFile(t, model), want) {
			t.Fatalf("%s %v: the arm64 model differs from amd64's", filepath.Base(c.data), c.args)
		}
	}
	resumedAcross(t, qemu, a9a)
	mixedNATS(t, qemu, a9a)
}

// resumedAcross interrupts an amd64 run once it has written a
// checkpoint, resumes it on arm64, and wants the uninterrupted model.
func resumedAcross(t *testing.T, qemu, data string) {
	args := []string{"-local", "-method", "hdm", "-e", "1e-8", "-max-iter", "2000", "-checkpoint-every", "100"}
	want := e2etest.Train(t, data, args...)
	dir := t.TempDir()
	ck, model := filepath.Join(dir, "ck"), filepath.Join(dir, "model")
	args = append(args, "-checkpoint", ck)
	e2etest.InterruptAtCheckpoint(t, e2etest.Start(t, "coordinator", append(args, data, model)...), ck, model)
	r := e2etest.Launch(t, exec.Command(qemu, append([]string{filepath.Join(arm64, "coordinator"), "-resume"}, append(args, data, model)...)...), "arm64 coordinator, resumed")
	r.Wait(t, 10*time.Minute)
	if !strings.Contains(r.Output(), `"resuming"`) || !bytes.Equal(e2etest.ReadFile(t, model), want) {
		t.Fatal("an amd64 checkpoint resumed on arm64 does not give the uninterrupted model")
	}
}

// mixedNATS trains over a nats-server with one amd64 and one arm64
// worker, the coordinator on either CPU.
func mixedNATS(t *testing.T, qemu, data string) {
	want := e2etest.Train(t, data, "-local", "-shards", "4", "-e", "1e-4")
	for _, coordArm := range []bool{false, true} {
		url := e2etest.NATSServer(t)
		e2etest.Start(t, "worker", "-nats", url, "-name", "amd64", "-parallel", "1")
		e2etest.Launch(t, exec.Command(qemu, filepath.Join(arm64, "worker"), "-nats", url, "-name", "arm64", "-parallel", "1"), "arm64 worker")
		args := []string{"-nats", url, "-min-workers", "2", "-shards", "4", "-e", "1e-4", data, filepath.Join(t.TempDir(), "model")}
		var c *e2etest.Proc
		if coordArm {
			c = e2etest.Launch(t, exec.Command(qemu, append([]string{filepath.Join(arm64, "coordinator")}, args...)...), "arm64 coordinator")
		} else {
			c = e2etest.Start(t, "coordinator", args...)
		}
		c.Wait(t, 10*time.Minute)
		if !bytes.Equal(e2etest.ReadFile(t, args[len(args)-1]), want) {
			t.Fatalf("over NATS, arm64 coordinator %v: the model differs from the in-process one", coordArm)
		}
	}
}

var fusedOp = regexp.MustCompile(`\bF(N?M(ADD|SUB))[DS]\b`)

// fusedFunctions lists this module's functions whose arm64 code holds a
// fused multiply-add or -subtract.
func fusedFunctions(t *testing.T, binary string) []string {
	out, err := exec.Command("go", "tool", "objdump", binary).Output()
	if err != nil {
		t.Fatalf("objdump %s: %v", binary, err)
	}
	var fused []string
	fn := ""
	for _, line := range bytes.Split(out, []byte("\n")) {
		if f, ok := bytes.CutPrefix(line, []byte("TEXT ")); ok {
			fn = string(bytes.Fields(f)[0])
			continue
		}
		if strings.HasPrefix(fn, "github.com/osgm-svm/osgm/") && fusedOp.Match(line) && !slices.Contains(fused, fn) {
			fused = append(fused, fn)
		}
	}
	return fused
}
