package status

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/osgm-svm/osgm/internal/browser"
	"github.com/osgm-svm/osgm/internal/natstest"
)

// atScale is a board of 32 workers and 1,000 classes, with full curves
// and events: the page's worst case in the terms.
func atScale() *Board {
	b := NewBoard(time.Now)
	labels := make([]string, 1000)
	for i := range labels {
		labels[i] = fmt.Sprint(i)
	}
	b.SetJob(Job{File: "big.svm", Rows: 1e6, Classes: 1000, Problems: 1000, Method: "lbfgs", C: 1, Eps: 0.01}, labels)
	workers := make([]Worker, 32)
	for i := range workers {
		workers[i] = Worker{Name: fmt.Sprint("w", i), Host: "h", State: "ready", Shards: []int{2 * i, 2*i + 1}, LastSeen: time.Now()}
	}
	b.SetWorkers(func() []Worker { return workers })
	b.SetStore("osgm-shards", 3)
	for pass := 1; pass <= 3000; pass++ {
		b.Record(Record{Problem: pass % 1000, Passes: pass, F: 1e4 / float64(pass), GradNorm: 100 / float64(pass), GradTol: 0.01, Converged: pass > 2000})
	}
	for i := 0; i < 300; i++ {
		b.Event("moved", time.Now(), fmt.Sprint("shard moved shard=", i))
	}
	return b
}

// firstPaint opens b's page in p and returns when it first painted and
// when it drew the board's state, in ms from navigation.
func firstPaint(t testing.TB, p *browser.Page, origin string) (painted, rendered float64) {
	if err := p.Go(origin); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, "the page to draw the board's state", func() bool {
		rendered, _ = browser.Eval[float64](p, `(performance.getEntriesByName("rendered")[0] || {startTime: 0}).startTime`)
		return rendered != 0
	})
	painted, _ = browser.Eval[float64](p, `(performance.getEntriesByName("first-contentful-paint")[0] || {startTime: 0}).startTime`)
	return painted, rendered
}

// TestPageAtScale opens the page in Chromium on a board of 32 workers
// and 1,000 classes: it must draw the state, list every worker and
// class, and request nothing from another host. (Its first paint is
// BenchmarkFirstPaint's to measure.)
func TestPageAtScale(t *testing.T) {
	p := browser.Open(t, time.Minute)
	b := atScale()
	addr, stop, err := b.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	origin := "http://" + addr + "/"
	painted, rendered := firstPaint(t, p, origin)
	t.Logf("first contentful paint %.0f ms, the state drawn at %.0f ms", painted, rendered)
	rows, _ := browser.Eval[int](p, `document.querySelectorAll("#workers tr").length`)
	cells, _ := browser.Eval[int](p, `document.querySelectorAll("#cells .cell").length`)
	points, _ := browser.Eval[string](p, `document.getElementById("gplot").dataset.points`)
	classRows, _ := browser.Eval[int](p, `document.querySelectorAll("#classrows tr").length`)
	if rows != 32 || cells != 1000 || points == "0" || classRows == 0 {
		t.Fatalf("%d worker rows, %d class cells, %s points plotted, %d classes listed", rows, cells, points, classRows)
	}
	if store, _ := browser.Eval[string](p, `document.querySelector("#stores [data-bucket=osgm-shards]").textContent`); store != "object store osgm-shards: 3 copies" {
		t.Fatalf("the page shows the store as %q", store)
	}
	for _, u := range p.Requests() {
		if !strings.HasPrefix(u, origin) {
			t.Fatalf("the page requested %s, outside %s", u, origin)
		}
	}
	p.Screenshot(t, "status-1000-classes.png")
}

// BenchmarkFirstPaint measures the page's first paint and the drawing of
// the board's state at 32 workers and 1,000 classes (issue 57's target:
// under 1 s), a fresh browser tab each time.
func BenchmarkFirstPaint(b *testing.B) {
	board := atScale()
	addr, stop, err := board.Serve("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	var paint, state float64
	for range b.N {
		p := browser.Open(b, time.Minute)
		pt, st := firstPaint(b, p, "http://"+addr+"/")
		paint, state = paint+pt, state+st
	}
	b.ReportMetric(paint/float64(b.N), "paint-ms")
	b.ReportMetric(state/float64(b.N), "state-ms")
}
