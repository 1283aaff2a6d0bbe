package status

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// clock is a test clock that moves by step at every reading.
func clock(step time.Duration) func() time.Time {
	t := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	return func() time.Time { t = t.Add(step); return t }
}

// TestStatusJSON: /api/status carries what scripts rely on (docs/
// PROTOCOL.md): passes as a number, workers as a list of objects with a
// name and a state, the curve as points, the end once finished.
func TestStatusJSON(t *testing.T) {
	b := NewBoard(clock(time.Second))
	b.SetJob(Job{File: "a9a", Rows: 32561, Classes: 2, Problems: 1, Method: "lbfgs", C: 1, Eps: 0.01}, []string{"+1"})
	b.SetWorkers(func() []Worker {
		return []Worker{{Name: "w0", State: "ready", Shards: []int{0, 1}}, {Name: "w1", State: "lost"}}
	})
	b.SetPhase(PhaseTraining)
	b.SetStore("osgm-shards", 1)
	b.SetStore("osgm-checkpoints", 3)
	b.SetStore("osgm-shards", 3) // scaled up
	b.Record(Record{Problem: 0, Passes: 1, F: 100, GradNorm: 10, GradTol: 0.1})
	b.Record(Record{Problem: 0, Passes: 3, F: 50, GradNorm: 0.05, GradTol: 0.1, Converged: true})
	b.Finish(End{Model: "m", Accuracy: "Accuracy = 85% (85/100)", Load: 1})
	var got map[string]any
	body := get(t, b.Handler(), "/api/status", http.StatusOK)
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if p, ok := got["passes"].(float64); !ok || p != 3 {
		t.Fatalf("passes = %#v, want the number 3", got["passes"])
	}
	ws, ok := got["workers"].([]any)
	if !ok || len(ws) != 2 {
		t.Fatalf("workers = %#v, want a list of 2", got["workers"])
	}
	for i, want := range []string{"w0", "w1"} {
		w := ws[i].(map[string]any)
		if w["name"] != want || w["state"] == "" {
			t.Fatalf("worker %d = %v", i, w)
		}
	}
	stores, ok := got["stores"].([]any)
	if !ok || len(stores) != 2 || stores[0].(map[string]any)["bucket"] != "osgm-shards" || stores[0].(map[string]any)["replicas"] != 3.0 ||
		stores[1].(map[string]any)["replicas"] != 3.0 {
		t.Fatalf("stores = %#v, want osgm-shards and osgm-checkpoints of 3 copies", got["stores"])
	}
	var s Status
	json.Unmarshal([]byte(body), &s)
	if len(s.Curve) != 2 || s.Curve[1] != (Point{3, 2, 50, 0.05}) || s.Tolerance != 0.1 {
		t.Fatalf("curve %v, tolerance %v", s.Curve, s.Tolerance)
	}
	if s.Phase != PhaseDone || s.Done != 1 || s.Classes[0].State != "done" || s.End == nil || s.End.Accuracy == "" {
		t.Fatalf("the end: phase %q, done %d, classes %+v, end %+v", s.Phase, s.Done, s.Classes, s.End)
	}
}

// TestClassStates: one-vs-rest classes go waiting, training, done; those
// still training at the end stopped; ?problem picks a curve.
func TestClassStates(t *testing.T) {
	b := NewBoard(clock(time.Millisecond))
	b.SetJob(Job{Classes: 3, Problems: 3}, []string{"a", "b", "c"})
	b.Record(Record{Problem: 0, Passes: 1, F: 3, GradNorm: 3, GradTol: 1})
	b.Record(Record{Problem: 0, Passes: 2, F: 2, GradNorm: 0.5, GradTol: 1, Converged: true})
	b.Record(Record{Problem: 1, Passes: 5, F: 9, GradNorm: 4, GradTol: 1})
	s := b.Snapshot(-1)
	states := fmt.Sprint(s.Classes[0].State, s.Classes[1].State, s.Classes[2].State)
	if states != "donetrainingwaiting" || s.Problem != 1 || s.Done != 1 || s.Classes[1].Ratio != 4 {
		t.Fatalf("states %s, problem %d, done %d, %+v", states, s.Problem, s.Done, s.Classes)
	}
	if s0 := b.Snapshot(0); len(s0.Curve) != 2 || s0.Curve[1][2] != 2 {
		t.Fatalf("problem 0's curve: %v", s0.Curve)
	}
	b.Finish(End{})
	if s := b.Snapshot(-1); s.Classes[1].State != "stopped" || s.Classes[2].State != "waiting" {
		t.Fatalf("after the end: %+v", s.Classes)
	}
}

// TestCurveThinned: a long run's curve stays within maxPoints, keeps
// its first and last points, and its passes in order.
func TestCurveThinned(t *testing.T) {
	b := NewBoard(clock(time.Millisecond))
	const n = 5000
	for i := 1; i <= n; i++ {
		b.Record(Record{Passes: i, F: float64(n - i + 1), GradNorm: 1, GradTol: 1e-3})
	}
	c := b.Snapshot(-1).Curve
	if len(c) > maxPoints || len(c) < maxPoints/2 || c[0][0] != 1 || c[len(c)-1][0] != n {
		t.Fatalf("%d points from %v to %v", len(c), c[0], c[len(c)-1])
	}
	for i := 1; i < len(c); i++ {
		if c[i][0] <= c[i-1][0] {
			t.Fatalf("passes out of order at %d: %v", i, c[i-1:i+1])
		}
	}
}

// TestEvents: the last events, oldest first, the older ones counted.
func TestEvents(t *testing.T) {
	now := clock(time.Second)
	b := NewBoard(now)
	for i := 0; i < 1234; i++ {
		b.Event("moved", now(), fmt.Sprint("shard moved ", i))
	}
	s := b.Snapshot(-1)
	if len(s.Events) != eventsShown || s.EventsDropped != 1234-eventsShown {
		t.Fatalf("%d events, %d dropped", len(s.Events), s.EventsDropped)
	}
	if first, last := s.Events[0].Text, s.Events[len(s.Events)-1].Text; last != "shard moved 1233" || first != fmt.Sprint("shard moved ", 1234-eventsShown) {
		t.Fatalf("events from %q to %q", first, last)
	}
	if s.Events[0].Seconds <= 0 {
		t.Fatalf("event seconds %v", s.Events[0].Seconds)
	}
}

// TestNotFinite: a diverging method's NaN and infinity do not break the
// JSON.
func TestNotFinite(t *testing.T) {
	b := NewBoard(clock(time.Millisecond))
	b.Record(Record{F: math.NaN(), GradNorm: math.Inf(1), GradTol: 1})
	if _, err := json.Marshal(b.Snapshot(-1)); err != nil {
		t.Fatal(err)
	}
}

// TestHandler: the page with a policy that allows no other host, the
// API's bad requests, and nothing but reading.
func TestHandler(t *testing.T) {
	h := NewBoard(time.Now).Handler()
	r := httptest.NewRecorder()
	h.ServeHTTP(r, httptest.NewRequest("GET", "/", nil))
	if r.Code != 200 || !strings.Contains(r.Body.String(), "<canvas") || !strings.Contains(r.Header().Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("GET /: %d, policy %q", r.Code, r.Header().Get("Content-Security-Policy"))
	}
	get(t, h, "/api/status?problem=x", http.StatusBadRequest)
	get(t, h, "/nothing", http.StatusNotFound)
	r = httptest.NewRecorder()
	h.ServeHTTP(r, httptest.NewRequest("POST", "/api/status", nil))
	if r.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", r.Code)
	}
}

// TestPageSelfContained: the page stays under 200 KB and names no other
// host.
func TestPageSelfContained(t *testing.T) {
	html, _ := page.ReadFile("page/index.html")
	if len(html) > 200<<10 {
		t.Fatalf("the page is %d bytes", len(html))
	}
	for _, s := range []string{"http://", "https://", `src="//`, `href="//`, "@import"} {
		if strings.Contains(string(html), s) {
			t.Fatalf("the page holds %q", s)
		}
	}
}

func TestAddr(t *testing.T) {
	for _, tc := range []struct {
		flag, want string
		loopback   bool
	}{
		{":8080", "127.0.0.1:8080", true},
		{"127.0.0.1:0", "127.0.0.1:0", true},
		{"localhost:9", "localhost:9", true},
		{"[::1]:80", "[::1]:80", true},
		{"0.0.0.0:8080", "0.0.0.0:8080", false},
		{"10.1.2.3:8080", "10.1.2.3:8080", false},
	} {
		got, err := Addr(tc.flag)
		if err != nil || got != tc.want || Loopback(got) != tc.loopback {
			t.Errorf("Addr(%q) = %q, %v; loopback %v, want %q, %v", tc.flag, got, err, Loopback(got), tc.want, tc.loopback)
		}
	}
	if _, err := Addr("8080"); err == nil || !strings.Contains(err.Error(), "-http") {
		t.Errorf("Addr(8080): %v", err)
	}
}

func get(t *testing.T, h http.Handler, path string, code int) string {
	t.Helper()
	r := httptest.NewRecorder()
	h.ServeHTTP(r, httptest.NewRequest("GET", path, nil))
	if r.Code != code {
		t.Fatalf("GET %s: %d, want %d: %s", path, r.Code, code, r.Body)
	}
	return r.Body.String()
}

// BenchmarkStatusRequest is what one /api/status read costs the run's
// process at 32 workers and 1,000 classes, with full curves and events:
// an open page reads twice a second, so a read of d costs 2d per second
// of the run's CPU (the pass benchmark, transport's BenchmarkStatusPage,
// cannot resolve it within this machine's noise).
func BenchmarkStatusRequest(b *testing.B) {
	board := NewBoard(time.Now)
	labels := make([]string, 1000)
	for i := range labels {
		labels[i] = fmt.Sprint(i)
	}
	board.SetJob(Job{Classes: 1000, Problems: 1000}, labels)
	workers := make([]Worker, 32)
	for i := range workers {
		workers[i] = Worker{Name: fmt.Sprint("worker-", i), Host: "host", State: "ready", Shards: []int{2 * i, 2*i + 1}, LastSeen: time.Now()}
	}
	board.SetWorkers(func() []Worker { return workers })
	for pass := 1; pass <= 100_000; pass++ {
		board.Record(Record{Problem: pass % 1000, Passes: pass, F: 1 / float64(pass), GradNorm: 1, GradTol: 1e-3})
	}
	for i := range maxEvents {
		board.Event("moved", time.Now(), fmt.Sprint("shard moved shard=", i))
	}
	h := board.Handler()
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRecorder()
		h.ServeHTTP(r, httptest.NewRequest("GET", "/api/status", nil))
		b.SetBytes(int64(r.Body.Len()))
	}
}
