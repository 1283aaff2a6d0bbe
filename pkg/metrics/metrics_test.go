package metrics

import (
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestScrape serves the coordinator's metrics, scrapes them over HTTP and
// parses the text format back.
func TestScrape(t *testing.T) {
	c := NewCoordinator()
	c.Iterations.Add(7)
	c.Objective.WithLabelValues(Problem(0)).Set(13742.5)
	c.Round.Observe(0.002)
	c.Bytes.WithLabelValues("up").Add(1024)
	c.Workers.Set(3)
	c.Resends.Add(2)
	c.TreeHops.Set(3)
	addr, stop, err := Serve("127.0.0.1:0", c.Registry, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	checks := map[string]float64{"osgm_iterations_total": 7, "osgm_objective": 13742.5, "osgm_workers_alive": 3, "osgm_bus_bytes_total": 1024, "osgm_round_resends_total": 2, "osgm_tree_hops": 3}
	for name, want := range checks {
		f := families[name]
		if f == nil || len(f.Metric) == 0 {
			t.Fatalf("%s missing from the scrape", name)
		}
		m := f.Metric[0]
		var got float64
		switch {
		case m.Counter != nil:
			got = m.Counter.GetValue()
		case m.Gauge != nil:
			got = m.Gauge.GetValue()
		}
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if h := families["osgm_round_seconds"]; h == nil || h.Metric[0].Histogram.GetSampleCount() != 1 {
		t.Error("round histogram missing or empty")
	}
	if _, ok := families["go_goroutines"]; ok {
		t.Error("process collectors leaked into the private registry")
	}
}

// TestHealthz: /healthz follows what the server is told of readiness,
// with the reason in the body a probe's failure shows.
func TestHealthz(t *testing.T) {
	var why error
	addr, stop, err := Serve("127.0.0.1:0", NewWorker().Registry, func() error { return why })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, c := range []struct {
		why  error
		code int
		body string
	}{
		{nil, http.StatusOK, "ok\n"},
		{errors.New("not connected to NATS (RECONNECTING)"), http.StatusServiceUnavailable, "not connected to NATS (RECONNECTING)\n"},
		{nil, http.StatusOK, "ok\n"},
	} {
		why = c.why
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || string(b) != c.body {
			t.Errorf("ready() = %v: %d %q, want %d %q", c.why, resp.StatusCode, b, c.code, c.body)
		}
	}
}
