// Package metrics exposes training progress to Prometheus on a private
// registry, so nothing else in the process leaks into the scrape.
package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Coordinator holds the coordinator's metrics.
type Coordinator struct {
	Registry      *prometheus.Registry
	Iterations    prometheus.Counter
	Passes        prometheus.Counter
	Objective     *prometheus.GaugeVec // by problem, LIBLINEAR's scale
	GradientRatio *prometheus.GaugeVec // ||g|| / tolerance, by problem
	Round         prometheus.Histogram // seconds per pass over the data
	Bytes         *prometheus.CounterVec
	Reassignments prometheus.Counter
	Resends       prometheus.Counter // rounds broadcast again (lost points, reconnections)
	Workers       prometheus.Gauge
	// Rounds on the bus, those the workers added along the tree, and the
	// last such round's longest chain of messages: bytes a round are
	// osgm_bus_bytes_total's rate over osgm_bus_rounds_total's.
	BusRounds, TreeRounds prometheus.Counter
	TreeHops              prometheus.Gauge
}

// NewCoordinator registers the coordinator's metrics.
func NewCoordinator() *Coordinator {
	r := prometheus.NewRegistry()
	c := &Coordinator{
		Registry:   r,
		Iterations: prometheus.NewCounter(prometheus.CounterOpts{Name: "osgm_iterations_total", Help: "Iterations of the optimiser, all problems."}),
		Passes:     prometheus.NewCounter(prometheus.CounterOpts{Name: "osgm_passes_total", Help: "Passes over the data (evaluations and Hessian-vector products)."}),
		Objective: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "osgm_objective",
			Help: "Best objective so far, in LIBLINEAR's scale, per one-vs-rest problem."}, []string{"problem"}),
		GradientRatio: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "osgm_gradient_norm_ratio",
			Help: "Gradient norm over the stopping tolerance (converged at 1), per problem."}, []string{"problem"}),
		Round: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "osgm_round_seconds",
			Help: "Wall time of one pass over the data.", Buckets: prometheus.ExponentialBuckets(1e-4, 2, 20)}),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "osgm_bus_bytes_total",
			Help: "Bytes on the NATS bus, by direction."}, []string{"direction"}),
		Reassignments: prometheus.NewCounter(prometheus.CounterOpts{Name: "osgm_shard_reassignments_total", Help: "Shards moved between workers."}),
		Resends: prometheus.NewCounter(prometheus.CounterOpts{Name: "osgm_round_resends_total",
			Help: "Rounds whose point was broadcast again: results missing, a worker without x, or clients back after a NATS outage."}),
		Workers:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "osgm_workers_alive", Help: "Workers currently alive."}),
		BusRounds: prometheus.NewCounter(prometheus.CounterOpts{Name: "osgm_bus_rounds_total", Help: "Rounds over the workers' shards."}),
		TreeRounds: prometheus.NewCounter(prometheus.CounterOpts{Name: "osgm_tree_rounds_total",
			Help: "Rounds whose sums the workers added among themselves, the coordinator receiving the root alone."}),
		TreeHops: prometheus.NewGauge(prometheus.GaugeOpts{Name: "osgm_tree_hops",
			Help: "In the last round added along the workers' tree, the most messages between a shard's sum and the coordinator."}),
	}
	r.MustRegister(c.Iterations, c.Passes, c.Objective, c.GradientRatio, c.Round, c.Bytes, c.Reassignments, c.Resends, c.Workers,
		c.BusRounds, c.TreeRounds, c.TreeHops)
	return c
}

// Problem labels a problem's series.
func Problem(k int) string { return strconv.Itoa(k) }

// Worker holds a worker's metrics.
type Worker struct {
	Registry *prometheus.Registry
	Eval     prometheus.Histogram // seconds to evaluate the held shards once
	Shards   prometheus.Gauge
	Bytes    *prometheus.CounterVec
}

// NewWorker registers a worker's metrics.
func NewWorker() *Worker {
	r := prometheus.NewRegistry()
	w := &Worker{
		Registry: r,
		Eval: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "osgm_worker_eval_seconds",
			Help: "Time to evaluate the held shards at one point.", Buckets: prometheus.ExponentialBuckets(1e-4, 2, 20)}),
		Shards: prometheus.NewGauge(prometheus.GaugeOpts{Name: "osgm_worker_shards", Help: "Shards held."}),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "osgm_worker_bus_bytes_total",
			Help: "Bytes this worker sent on the bus."}, []string{"direction"}),
	}
	r.MustRegister(w.Eval, w.Shards, w.Bytes)
	return w
}

// Serve exposes reg on addr at /metrics, and /healthz, until the returned
// stop is called; it returns the address actually bound (for port 0).
// /healthz answers 200 while ready (nil: always) returns nil, else 503
// and the error: an orchestrator's readiness probe (Kubernetes') then
// takes a worker cut off from NATS out of service, and says why.
func Serve(addr string, reg *prometheus.Registry, ready func() error) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if ready != nil {
			if err := ready(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		io.WriteString(w, "ok\n")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the scrape endpoint is best effort; training goes on
		}
	}()
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}
