// Command osgmbench times this trainer and liblinear-train -s 2 on the same
// files in one run and prints the ratios BENCHMARKS.md records:
//
//	osgmbench [-c 1] [-gap 1e-6] [-workers 2] file...
//
// For each file: load (a run that evaluates once and writes a model, on
// each side; ours also logs when its first gradient was known, the
// issue's measure), peak resident memory per nonzero of the runs that
// reached the target (of the load runs when one side did not), and time to
// accuracy: the wall time of the first run, trying -e 1e-1, 1e-2, ..., whose
// objective is within -gap (relative) of the best objective either side
// reached. The tolerances go on until both sides are well within the gap
// and a tenfold tighter tolerance no longer moved the best objective:
// with Newton, which follows LIBLINEAR's path, both sides can stop at the
// same loose point, and the best of two equal runs says nothing about
// the optimum. A side that two tenfold steps in a row left where it was
// is not run again: LIBLINEAR at its iteration limit stops short of the
// optimum however tight -e is. Its time is then "not reached", and our
// ratio is bounded by its slowest run. Both sides run as separate
// processes; the objectives are
// computed here from the model files, so both are measured the same way.
// With -runs n, the two runs that reached the target are then repeated n
// times, alternating, and the times are the medians: runs of a tenth of
// a second vary by a third on a small virtual machine.
//
// The memory target is per worker: with -worker (default: beside
// -coordinator), the run that reached the target is repeated with
// standalone worker processes (-parallel 1 each) against a NATS server in
// a child process (with -worker-flags, e.g. -compact, added to each),
// and their peak resident memory per nonzero held is
// reported against LIBLINEAR's.
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/osgm-svm/osgm/internal/cli"
	"github.com/osgm-svm/osgm/pkg/transport"
)

type run struct {
	wall   time.Duration
	maxRSS int64 // bytes
	log    string
}

func execTimed(name string, args ...string) (run, error) {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), "OSGM_LOG_FORMAT=json")
	start := time.Now()
	err := cmd.Run()
	r := run{wall: time.Since(start), log: out.String()}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.maxRSS = ru.Maxrss << 10
	}
	if err != nil {
		return r, fmt.Errorf("%s %v: %v\n%s", name, args, err, out.String())
	}
	return r, nil
}

// logField finds a numeric field of the first JSON log line with msg.
func logField(log, msg, field string) float64 {
	for _, line := range strings.Split(log, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != msg {
			continue
		}
		if v, ok := m[field].(float64); ok {
			return v
		}
	}
	return math.NaN()
}

// point is one run at a tolerance: its wall time, the objective of its
// model and its peak resident memory.
type point struct {
	eps    string
	wall   time.Duration
	f      float64
	maxRSS int64
}

// setup is what every file's benchmark runs with.
type setup struct {
	c, gap                                          float64
	workers, runs                                   int
	coordinator, worker, liblinear, svmeval, method string
	workerFlags                                     []string
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == serveFlag {
		serveNATS(os.Args[2])
		return
	}
	var t setup
	flag.Float64Var(&t.c, "c", 1, "cost C")
	flag.Float64Var(&t.gap, "gap", 1e-6, "relative objective gap that counts as reached")
	flag.IntVar(&t.workers, "workers", 2, "workers of our trainer (embedded NATS)")
	flag.IntVar(&t.runs, "runs", 1, "time to accuracy: the median of this many alternated runs of each side")
	flag.StringVar(&t.coordinator, "coordinator", "coordinator", "our coordinator binary")
	flag.StringVar(&t.worker, "worker", "", "our worker binary, for the per-worker memory (default: beside -coordinator; \"none\": skip)")
	flag.Func("worker-flags", "flags for those workers, space-separated (e.g. -compact)", func(v string) error {
		t.workerFlags = strings.Fields(v)
		return nil
	})
	flag.StringVar(&t.liblinear, "liblinear", "liblinear-train", "LIBLINEAR's train binary")
	flag.StringVar(&t.method, "method", "", "our method (default: the trainer's default)")
	flag.StringVar(&t.svmeval, "svmeval", "", "our svmeval binary (default: beside -coordinator)")
	cli.Simple("osgmbench [options] file...", "Times our coordinator and liblinear-train on each file in one run and prints the ratios.",
		"osgmbench -coordinator ./coordinator -method newton gen100k.svm", -1)
	beside := func(name string) string {
		if !strings.Contains(t.coordinator, "/") {
			return name
		}
		return filepath.Join(filepath.Dir(t.coordinator), name)
	}
	if t.svmeval == "" {
		t.svmeval = beside("svmeval")
	}
	if t.worker == "" {
		t.worker = beside("worker")
	}
	fmt.Printf("| file | nnz | load LIBLINEAR | load ours | ratio | first gradient ours | ratio | RSS B/nnz LIBLINEAR | ours | ratio | worker | ratio | to %.0e: LIBLINEAR | ours | ratio |\n", t.gap)
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, file := range flag.Args() {
		if err := bench(file, t); err != nil {
			fmt.Fprintln(os.Stderr, "osgmbench:", err)
			os.Exit(1)
		}
	}
}

// bench measures one file: load-only runs, then each side's sweep of
// tolerances to the target gap, then one table row.
func bench(file string, t setup) error {
	dir, err := os.MkdirTemp("", "osgmbench-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b := &benchFile{t: t, file: file, dir: dir, cs: strconv.FormatFloat(t.c, 'g', -1, 64)}
	llLoad, err := b.theirs("1000")
	if err != nil {
		return err
	}
	ourLoad, err := b.ours("-max-iter", "1", "-e", "1000")
	if err != nil {
		return err
	}
	nnz := logField(ourLoad.log, "loaded", "nnz")
	if err := b.sweep(); err != nil {
		return err
	}
	ll, okL := b.first(b.llRuns)
	our, okO := b.first(b.ourRuns)
	if okL && okO && t.runs > 1 {
		if ll.wall, our.wall, err = b.retime(ll.eps, our.eps); err != nil {
			return err
		}
	}
	ratio := "-"
	switch {
	case okL && okO:
		ratio = fmt.Sprintf("%.2f", our.wall.Seconds()/ll.wall.Seconds())
	case okO:
		// LIBLINEAR would need longer than every run it made.
		slowest := slices.MaxFunc(b.llRuns, func(a, b point) int { return cmp.Compare(a.wall, b.wall) })
		ratio = fmt.Sprintf("< %.2f", our.wall.Seconds()/slowest.wall.Seconds())
	}
	// The load target: from start until the first gradient is
	// known (the log's first_gradient, in seconds), against LIBLINEAR's
	// load-only run.
	firstGrad := logField(ourLoad.log, "trained", "first_gradient")
	// Memory is the peak of the runs that reached the target: ours grows
	// after loading (the reduction's buffers), LIBLINEAR's hardly does.
	llRSS, ourRSS := llLoad.maxRSS, ourLoad.maxRSS
	if okL && okO {
		llRSS, ourRSS = ll.maxRSS, our.maxRSS
	}
	worker, workerRatio := "-", "-"
	if t.worker != "none" && okO {
		peaks, err := workerPeaks(t, b.ourArgs("-e", our.eps, "-max-iter", "100000", "-min-workers", strconv.Itoa(t.workers)))
		if err != nil {
			return err
		}
		// Each worker holds about nnz/workers nonzeros; the largest peak
		// per nonzero held is the figure.
		perNNZ := float64(slices.Max(peaks)) / (nnz / float64(len(peaks)))
		worker = fmt.Sprintf("%.1f", perNNZ)
		workerRatio = fmt.Sprintf("%.2f", perNNZ/(float64(llRSS)/nnz))
	}
	fmt.Printf("| %s | %.0f | %.2f s | %.2f s | %.2f | %.2f s | %.2f | %.1f | %.1f | %.2f | %s | %s | %s | %s | %s |\n",
		filepath.Base(file), nnz, llLoad.wall.Seconds(), ourLoad.wall.Seconds(), ourLoad.wall.Seconds()/llLoad.wall.Seconds(),
		firstGrad, firstGrad/llLoad.wall.Seconds(),
		float64(llRSS)/nnz, float64(ourRSS)/nnz, float64(ourRSS)/float64(llRSS), worker, workerRatio,
		b.reached(ll, okL, b.llRuns), b.reached(our, okO, b.ourRuns), ratio)
	return nil
}

// benchFile is one file's measurement: both sides' runs at the
// tolerances tried, and the best objective either reached.
type benchFile struct {
	t               setup
	file, dir, cs   string
	llRuns, ourRuns []point
	best            float64
}

func (b *benchFile) ourArgs(extra ...string) []string {
	args := append([]string{"-c", b.cs}, extra...)
	if b.t.method != "" {
		args = append(args, "-method", b.t.method)
	}
	return append(args, b.file, filepath.Join(b.dir, "ours.model"))
}

func (b *benchFile) ours(extra ...string) (run, error) {
	return execTimed(b.t.coordinator, b.ourArgs(append([]string{"-workers", strconv.Itoa(b.t.workers)}, extra...)...)...)
}

func (b *benchFile) theirs(eps string) (run, error) {
	return execTimed(b.t.liblinear, "-q", "-s", "2", "-c", b.cs, "-e", eps, b.file, filepath.Join(b.dir, "ll.model"))
}

// objective is the model's objective summed over its problems, computed
// by svmeval in a process of its own: loading data here would raise this
// process's resident size, which Linux carries into the peak RSS it
// reports for every later child.
func (b *benchFile) objective(model string) (float64, error) {
	out, err := exec.Command(b.t.svmeval, "-c", b.cs, b.file, model).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%s: %v\n%s", b.t.svmeval, err, out)
	}
	total, n := 0.0, 0
	for _, line := range strings.Split(string(out), "\n") {
		var k int
		var f float64
		if _, err := fmt.Sscanf(line, "problem %d objective %g", &k, &f); err == nil {
			total += f
			n++
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("%s printed no objective:\n%s", b.t.svmeval, out)
	}
	return total, nil
}

// sweep tightens both sides' tolerance tenfold at a time until each is
// finished. Both sides are tried the same way: a run at the tolerance,
// then its model's objective.
func (b *benchFile) sweep() error {
	b.best = math.Inf(1)
	sides := []struct {
		runs  *[]point
		model string
		train func(eps string) (run, error)
	}{
		{&b.llRuns, "ll.model", b.theirs},
		{&b.ourRuns, "ours.model", func(eps string) (run, error) { return b.ours("-e", eps, "-max-iter", "100000") }},
	}
	for e := 1; e <= 9; e++ {
		eps := fmt.Sprintf("1e-%d", e)
		var todo []int
		for i, sd := range sides {
			if !finished(*sd.runs, b.best, b.t.gap) {
				todo = append(todo, i)
			}
		}
		if len(todo) == 0 {
			return nil
		}
		for _, i := range todo {
			sd := sides[i]
			r, err := sd.train(eps)
			if err != nil {
				return err
			}
			f, err := b.objective(filepath.Join(b.dir, sd.model))
			if err != nil {
				return err
			}
			*sd.runs = append(*sd.runs, point{eps, r.wall, f, r.maxRSS})
			b.best = math.Min(b.best, f)
		}
	}
	return nil
}

// first is the side's first run within the target gap of the best.
func (b *benchFile) first(runs []point) (point, bool) {
	for _, p := range runs {
		if (p.f-b.best)/b.best <= b.t.gap {
			return p, true
		}
	}
	return point{}, false
}

// retime runs both sides again at the tolerances that reached the
// target, and gives their median times.
func (b *benchFile) retime(llEps, ourEps string) (ll, our time.Duration, err error) {
	var llWalls, ourWalls []time.Duration
	for range b.t.runs {
		r, err := b.theirs(llEps)
		if err != nil {
			return 0, 0, err
		}
		llWalls = append(llWalls, r.wall)
		if r, err = b.ours("-e", ourEps, "-max-iter", "100000"); err != nil {
			return 0, 0, err
		}
		ourWalls = append(ourWalls, r.wall)
	}
	return median(llWalls), median(ourWalls), nil
}

// reached is a side's time to the target, or how far above it stopped.
func (b *benchFile) reached(p point, ok bool, runs []point) string {
	if !ok {
		last := runs[len(runs)-1]
		return fmt.Sprintf("not reached: stops %.1e above at -e %s (%.2f s)", (last.f-b.best)/b.best, last.eps, last.wall.Seconds())
	}
	return fmt.Sprintf("%.2f s (-e %s)", p.wall.Seconds(), p.eps)
}

// finished says a side needs no tighter tolerance: its last tenfold step
// moved its objective by less than a tenth of the gap, and it is that
// close to the best, or two steps in a row did not move it (it stalls
// short of the best: LIBLINEAR at its iteration limit). One unmoved step
// alone is no sign: with Newton, loose tolerances can all stop at the
// same early iterate.
func finished(runs []point, best, gap float64) bool {
	moved := func(a, b float64) bool { return math.Abs(a-b)/math.Abs(best) > gap/10 }
	n := len(runs)
	if n < 2 || moved(runs[n-1].f, runs[n-2].f) {
		return false
	}
	return !moved(runs[n-1].f, best) || (n >= 3 && !moved(runs[n-2].f, runs[n-3].f))
}

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	if n := len(d); n%2 == 0 {
		return (d[n/2-1] + d[n/2]) / 2
	}
	return d[len(d)/2]
}

// serveFlag makes osgmbench a NATS server (its own child): a server in
// the benchmarking process would raise that process's resident size,
// which Linux carries into the peak it reports for every later child.
const serveFlag = "-serve-nats"

// serveNATS runs an embedded server with JetStream in dir, prints its URL
// on one line and serves until its input closes.
func serveNATS(dir string) {
	srv, err := transport.Embedded(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "osgmbench:", err)
		os.Exit(1)
	}
	fmt.Println(srv.ClientURL())
	io.Copy(io.Discard, os.Stdin)
	srv.Shutdown()
}

// workerPeaks trains with args against t.workers standalone worker
// processes and a NATS server of their own, and returns each worker's
// peak resident memory in bytes.
func workerPeaks(t setup, args []string) ([]int64, error) {
	dir, err := os.MkdirTemp("", "osgmbench-nats-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	server := exec.Command(self, serveFlag, dir)
	stdin, err := server.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := server.StdoutPipe()
	if err != nil {
		return nil, err
	}
	server.Stderr = os.Stderr
	if err := server.Start(); err != nil {
		return nil, err
	}
	defer func() { stdin.Close(); server.Wait() }()
	url, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("the NATS server did not start: %v", err)
	}
	url = strings.TrimSpace(url)
	var workers []*exec.Cmd
	var logs []*bytes.Buffer
	stop := func() []int64 {
		var peaks []int64
		for _, w := range workers {
			w.Process.Signal(syscall.SIGTERM)
			w.Wait()
			if ru, ok := w.ProcessState.SysUsage().(*syscall.Rusage); ok {
				peaks = append(peaks, ru.Maxrss<<10)
			}
		}
		return peaks
	}
	for range t.workers {
		w := exec.Command(t.worker, append([]string{"-nats", url, "-parallel", "1", "-q"}, t.workerFlags...)...)
		var log bytes.Buffer
		w.Stdout, w.Stderr = &log, &log
		if err := w.Start(); err != nil {
			stop()
			return nil, err
		}
		workers, logs = append(workers, w), append(logs, &log)
	}
	if _, err := execTimed(t.coordinator, append([]string{"-nats", url}, args...)...); err != nil {
		stop()
		return nil, err
	}
	peaks := stop()
	if len(peaks) != len(workers) {
		return nil, fmt.Errorf("no resource usage for the workers:\n%s", logs[0])
	}
	return peaks, nil
}
