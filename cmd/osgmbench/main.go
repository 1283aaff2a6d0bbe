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
// reached. Both sides run as separate processes; the objectives are
// computed here from the model files, so both are measured the same way.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
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

func main() {
	c := flag.Float64("c", 1, "cost C")
	gap := flag.Float64("gap", 1e-6, "relative objective gap that counts as reached")
	workers := flag.Int("workers", 2, "workers of our trainer (embedded NATS)")
	coordinator := flag.String("coordinator", "coordinator", "our coordinator binary")
	liblinear := flag.String("liblinear", "liblinear-train", "LIBLINEAR's train binary")
	method := flag.String("method", "", "our method (default: the trainer's default)")
	svmeval := flag.String("svmeval", "", "our svmeval binary (default: beside -coordinator)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: osgmbench [options] file...\n\nTimes our coordinator and liblinear-train on each file in one run and prints the ratios.\n\nOptions:\n")
		flag.PrintDefaults()
		fmt.Fprintf(os.Stderr, "\nExample: osgmbench -coordinator ./coordinator -method newton gen100k.svm\n")
	}
	flag.Parse()
	if *svmeval == "" {
		*svmeval = filepath.Join(filepath.Dir(*coordinator), "svmeval")
		if !strings.Contains(*coordinator, "/") {
			*svmeval = "svmeval"
		}
	}
	fmt.Printf("| file | nnz | load LIBLINEAR | load ours | ratio | first gradient ours | ratio | RSS B/nnz LIBLINEAR | ours | ratio | to %.0e: LIBLINEAR | ours | ratio |\n", *gap)
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, file := range flag.Args() {
		if err := bench(file, *c, *gap, *workers, *coordinator, *liblinear, *svmeval, *method); err != nil {
			fmt.Fprintln(os.Stderr, "osgmbench:", err)
			os.Exit(1)
		}
	}
}

func bench(file string, c, gap float64, workers int, coordinator, liblinear, svmeval, method string) error {
	dir, err := os.MkdirTemp("", "osgmbench-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cs := strconv.FormatFloat(c, 'g', -1, 64)
	ours := func(extra ...string) (run, error) {
		args := append([]string{"-c", cs, "-workers", strconv.Itoa(workers)}, extra...)
		if method != "" {
			args = append(args, "-method", method)
		}
		return execTimed(coordinator, append(args, file, filepath.Join(dir, "ours.model"))...)
	}
	theirs := func(eps string) (run, error) {
		return execTimed(liblinear, "-q", "-s", "2", "-c", cs, "-e", eps, file, filepath.Join(dir, "ll.model"))
	}

	llLoad, err := theirs("1000")
	if err != nil {
		return err
	}
	ourLoad, err := ours("-max-iter", "1", "-e", "1000")
	if err != nil {
		return err
	}
	nnz := logField(ourLoad.log, "loaded", "nnz")

	// Objectives of both sides' models, computed the same way by svmeval
	// in a process of its own: loading data here would raise this
	// process's resident size, which Linux carries into the peak RSS it
	// reports for every later child.
	objective := func(model string) (float64, error) {
		out, err := exec.Command(svmeval, "-c", cs, file, model).CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("%s: %v\n%s", svmeval, err, out)
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
			return 0, fmt.Errorf("%s printed no objective:\n%s", svmeval, out)
		}
		return total, nil
	}
	type point struct {
		eps    string
		wall   time.Duration
		f      float64
		maxRSS int64
	}
	var llRuns, ourRuns []point
	best := math.Inf(1)
	for e := 1; e <= 9; e++ {
		eps := fmt.Sprintf("1e-%d", e)
		r, err := theirs(eps)
		if err != nil {
			return err
		}
		f, err := objective(filepath.Join(dir, "ll.model"))
		if err != nil {
			return err
		}
		llRuns = append(llRuns, point{eps, r.wall, f, r.maxRSS})
		best = math.Min(best, f)
		r, err = ours("-e", eps, "-max-iter", "100000")
		if err != nil {
			return err
		}
		f, err = objective(filepath.Join(dir, "ours.model"))
		if err != nil {
			return err
		}
		ourRuns = append(ourRuns, point{eps, r.wall, f, r.maxRSS})
		best = math.Min(best, f)
		if (llRuns[len(llRuns)-1].f-best)/best <= gap/10 && (f-best)/best <= gap/10 {
			break // both are well past the target
		}
	}
	first := func(runs []point) (point, bool) {
		for _, p := range runs {
			if (p.f-best)/best <= gap {
				return p, true
			}
		}
		return point{}, false
	}
	ll, okL := first(llRuns)
	our, okO := first(ourRuns)
	tta := func(p point, ok bool) string {
		if !ok {
			return "not reached"
		}
		return fmt.Sprintf("%.2f s (-e %s)", p.wall.Seconds(), p.eps)
	}
	ratio := "-"
	if okL && okO {
		ratio = fmt.Sprintf("%.2f", our.wall.Seconds()/ll.wall.Seconds())
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
	fmt.Printf("| %s | %.0f | %.2f s | %.2f s | %.2f | %.2f s | %.2f | %.1f | %.1f | %.2f | %s | %s | %s |\n",
		filepath.Base(file), nnz, llLoad.wall.Seconds(), ourLoad.wall.Seconds(), ourLoad.wall.Seconds()/llLoad.wall.Seconds(),
		firstGrad, firstGrad/llLoad.wall.Seconds(),
		float64(llRSS)/nnz, float64(ourRSS)/nnz, float64(ourRSS)/float64(llRSS),
		tta(ll, okL), tta(our, okO), ratio)
	return nil
}
