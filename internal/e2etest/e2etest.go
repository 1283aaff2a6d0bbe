// Package e2etest is what the end-to-end test packages share: this
// module's commands built once per test binary (Main) and run as
// separate processes, their output kept for polling and killed when the
// test ends; and the probes of a worker's NATS permissions.
package e2etest

import (
	"bytes"
	"compress/bzip2"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osgm-svm/osgm/internal/testport"
)

var (
	bin  string // directory of the built binaries
	root string // the module's root, relative to the test's package
)

// Main builds the commands and nats-server, runs setup, then the tests,
// and exits; a package's TestMain calls it with the module's root
// relative to it. What Main does before the tests is outside Go's test
// timeout, which is the tests' own: on a fresh machine the builds alone
// take minutes.
func Main(m *testing.M, moduleRoot string, setup ...func()) {
	flag.Parse() // for setup: testing.Short, -run
	root = moduleRoot
	dir, err := os.MkdirTemp("", "osgm-e2e-*")
	if err != nil {
		panic(err)
	}
	bin = dir
	// Built as go test builds the packages' own tests, whose compiled
	// dependencies it then reuses: on a fresh machine another kind of
	// build of every dependency takes minutes.
	build := exec.Command("go", "build", "-o", dir+"/", "./cmd/coordinator", "./cmd/worker",
		"./cmd/predict", "./cmd/svmgen", "github.com/nats-io/nats-server/v2")
	build.Dir, build.Stderr = root, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build failed:", err)
		os.Exit(1)
	}
	for _, f := range setup {
		f()
	}
	code := m.Run()
	for i := len(afterTests) - 1; i >= 0; i-- {
		afterTests[i]()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

var afterTests []func()

// AfterTests has Main call f once the tests have run, in the reverse
// order of the calls: the teardown of what a setup made for all tests.
func AfterTests(f func()) { afterTests = append(afterTests, f) }

// Bin is the path of a built command.
func Bin(name string) string { return filepath.Join(bin, name) }

// Proc is a running binary whose output is kept for polling.
type Proc struct {
	Cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

func (p *Proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is how the process exited, once Done is closed.
func (p *Proc) Err() error { return p.err }

// Output is what the process has written so far, both streams.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// Start runs one of the built binaries with JSON logs.
func Start(t *testing.T, name string, args ...string) *Proc {
	t.Helper()
	return Launch(t, exec.Command(Bin(name), args...), fmt.Sprint(name, " ", args))
}

// Launch starts cmd, keeps its output, and kills it when the test ends,
// showing the output if the test failed.
func Launch(t *testing.T, cmd *exec.Cmd, label string) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	p.Cmd.Stdout, p.Cmd.Stderr = p, p
	p.Cmd.Env = append(append(os.Environ(), p.Cmd.Env...), "OSGM_LOG_FORMAT=json")
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.Cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s output:\n%s", label, Tail(p.Output(), 4000))
		}
	})
	return p
}

// Tail is the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// Wait blocks until the process exits, failing on a non-zero status.
func (p *Proc) Wait(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%v did not finish in %v:\n%s", p.Cmd.Args, timeout, Tail(p.Output(), 3000))
	}
	if p.err != nil {
		t.Fatalf("%v: %v\n%s", p.Cmd.Args, p.err, Tail(p.Output(), 3000))
	}
}

// CheckFor polls cond until it holds or the time is up, like the
// nats-server tests do; no test sleeps for a fixed time.
func CheckFor(t *testing.T, total time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(total)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", total, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FreePort is a loopback port for a server the test starts (testport.Free).
func FreePort(t *testing.T) int {
	t.Helper()
	return testport.Free(t)
}

// SharedData is the directory of the shared data sets beside the module.
func SharedData() string {
	dir, _ := filepath.Abs(filepath.Join(root, "../shared/data"))
	return dir
}

// Dataset returns a plain copy of a shared data set, or skips.
func Dataset(t *testing.T, name string) string {
	f, err := os.Open(filepath.Join(SharedData(), name+".bz2"))
	if err != nil {
		t.Skipf("../shared/data/%s.bz2 is not here", name)
	}
	defer f.Close()
	dst := filepath.Join(t.TempDir(), name)
	out, _ := os.Create(dst)
	defer out.Close()
	if _, err := io.Copy(out, bzip2.NewReader(f)); err != nil {
		t.Fatal(err)
	}
	return dst
}

func ReadFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Train runs the coordinator to the end and returns the model's bytes.
func Train(t *testing.T, data string, args ...string) []byte {
	t.Helper()
	model := filepath.Join(t.TempDir(), "model")
	c := Start(t, "coordinator", append(args, data, model)...)
	c.Wait(t, 5*time.Minute)
	return ReadFile(t, model)
}

// localModels holds the local runs' models by file and flags: a
// package's cluster tests share theirs. (Its tests run one at a time.)
var localModels = map[string][]byte{}

// LocalModel is `coordinator -q -local flags data`'s model, the bytes a
// cluster's run must end in, trained once per data and flags.
func LocalModel(t *testing.T, data string, flags []string) []byte {
	t.Helper()
	key := data + "\x00" + strings.Join(flags, " ")
	if m, ok := localModels[key]; ok {
		return m
	}
	m := Train(t, data, append([]string{"-q", "-local"}, flags...)...)
	localModels[key] = m
	return m
}
