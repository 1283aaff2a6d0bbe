package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/osgm-svm/osgm/internal/browser"
	"github.com/osgm-svm/osgm/internal/e2etest"
)

// TestStatusPage watches a real run in headless Chromium: a coordinator
// with -http and three worker processes on a nats-server. The page must
// load with no request beyond the coordinator, plot more points at a
// second look, list every worker, show a killed worker as lost and its
// shards with their new owners, and end with the test accuracy.
func TestStatusPage(t *testing.T) {
	p := browser.Open(t, 5*time.Minute)
	dir := t.TempDir()
	data, test := filepath.Join(dir, "gen.svm"), filepath.Join(dir, "gen.t")
	gen := exec.Command(e2etest.Bin("svmgen"), "-rows", "60000", "-features", "50000", "-nnz", "40", "-seed", "3", "-o", data, "-test", test)
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("svmgen: %v\n%s", err, out)
	}
	url := natsServer(t)
	ws := workers(t, url, 3, "s")
	port := freePort(t)
	origin := fmt.Sprintf("http://127.0.0.1:%d/", port)
	c := start(t, "coordinator", "-nats", url, "-min-workers", "3", "-shards", "12", "-method", "hdm", "-e", "1e-5",
		"-heartbeat-timeout", "1s", "-http", fmt.Sprintf(":%d", port), "-http-linger", "2m",
		"-t", test, data, filepath.Join(dir, "model"))
	checkFor(t, time.Minute, "the status page", func() bool { return strings.Contains(c.Output(), `"msg":"status page"`) })
	if err := p.Go(origin); err != nil {
		t.Fatal(err)
	}
	points := func() int {
		n, _ := browser.Eval[string](p, `document.getElementById("gplot").dataset.points`)
		v, _ := strconv.Atoi(n)
		return v
	}
	checkFor(t, time.Minute, "points on the plot", func() bool { return points() >= 2 })
	first := points()
	checkFor(t, 30*time.Second, "the plot to grow", func() bool { return points() > first })

	rows := func() map[string][2]string { return workerRows(t, p) }
	checkFor(t, 10*time.Second, "three workers listed", func() bool { return len(rows()) == 3 })
	var killed string
	for name := range rows() {
		if strings.HasPrefix(name, "s1-") {
			killed = name
		}
	}
	if killed == "" {
		t.Fatalf("no worker s1 in %v", rows())
	}
	ws[1].Cmd.Process.Signal(syscall.SIGKILL)
	checkFor(t, 30*time.Second, "the killed worker lost and its shards with the others", func() bool {
		r := rows()
		if r[killed][0] != "lost" {
			return false
		}
		var all []int
		for name, row := range r {
			if name != killed && row[0] == "ready" {
				all = append(all, shardList(row[1])...)
			}
		}
		slices.Sort(all)
		return slices.Equal(all, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
	})
	t.Logf("after the kill: %v", rows())
	p.Screenshot(t, "status-page-midrun.png")
	checkFor(t, 3*time.Minute, "the accuracy at the end", func() bool {
		acc, _ := browser.Eval[string](p, `(document.getElementById("accuracy") || {}).textContent || ""`)
		return strings.HasPrefix(acc, "Accuracy = ")
	})
	p.Screenshot(t, "status-page-end.png")
	for _, u := range p.Requests() {
		if !strings.HasPrefix(u, origin) {
			t.Fatalf("the page requested %s, outside %s", u, origin)
		}
	}
	c.Cmd.Process.Signal(syscall.SIGTERM) // ends the linger
	c.Wait(t, time.Minute)
}

// workerRows reads the page's workers table: name -> (state, shards).
func workerRows(t *testing.T, p *browser.Page) map[string][2]string {
	cells, err := browser.Eval[[][]string](p, `[...document.querySelectorAll("#workers tr")].map(r =>
		[r.dataset.name, r.dataset.state, r.querySelector(".shards").textContent])`)
	if err != nil {
		t.Logf("reading the workers: %v", err)
	}
	out := map[string][2]string{}
	for _, c := range cells {
		out[c[0]] = [2]string{c[1], c[2]}
	}
	return out
}

// shardList reads the page's shard ranges ("0-3,7"; what follows a space
// is shards still loading).
func shardList(s string) []int {
	s, _, _ = strings.Cut(s, " ")
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, found := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			continue
		}
		b := a
		if found {
			b, _ = strconv.Atoi(hi)
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out
}
