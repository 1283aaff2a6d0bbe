package main

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/osgm-svm/osgm/pkg/metrics"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/transport/cluster"
)

// progressEvery is how often the info-level progress line comes.
const progressEvery = 3 * time.Second

// progress turns the optimiser's per-iteration records into log lines: all
// of them at debug level, a summary every few seconds at info level.
type progress struct {
	log     *zap.Logger
	alive   func() int // workers alive, or nil in-process
	metrics *metrics.Coordinator
	bus     func() cluster.Stats // nil in-process
	passAt  time.Time
	start   time.Time
	last    time.Time
	ratio   []float64 // per problem: ||g|| / tolerance (done at <= 1)
	first   []float64 // the first ratio seen, for the time estimate
	accept  int
	null    int
	evals   int
	lastEvs int
}

func newProgress(log *zap.Logger, alive func() int) *progress {
	now := time.Now()
	return &progress{log: log, alive: alive, start: now, last: now, passAt: now}
}

// export updates the Prometheus metrics from one record.
func (p *progress) export(r osgm.Record) {
	m := p.metrics
	m.Iterations.Inc()
	if d := r.Evals - p.evals; d > 0 {
		now := time.Now()
		m.Passes.Add(float64(d))
		per := now.Sub(p.passAt).Seconds() / float64(d)
		for i := 0; i < d; i++ {
			m.Round.Observe(per)
		}
		p.passAt = now
	}
	m.Objective.WithLabelValues(metrics.Problem(r.Problem)).Set(r.F)
	m.GradientRatio.WithLabelValues(metrics.Problem(r.Problem)).Set(r.GradNorm / r.GradTol)
	if p.alive != nil {
		m.Workers.Set(float64(p.alive()))
	}
	if p.bus != nil {
		st := p.bus()
		setCounter(m.Bytes.WithLabelValues("down"), float64(st.BytesDown))
		setCounter(m.Bytes.WithLabelValues("up"), float64(st.BytesUp))
		setCounter(m.Bytes.WithLabelValues("to_workers"), float64(st.BytesToWorkers))
		setCounter(m.Reassignments, float64(st.Reassignments))
		setCounter(m.Resends, float64(st.Resends))
		setCounter(m.BusRounds, float64(st.Rounds))
		setCounter(m.TreeRounds, float64(st.TreeRounds))
		m.TreeHops.Set(float64(st.Hops))
	}
}

// setCounter raises a counter to a running total kept elsewhere.
func setCounter(c prometheus.Counter, total float64) {
	var cur dto.Metric
	if c.Write(&cur) == nil && total > cur.GetCounter().GetValue() {
		c.Add(total - cur.GetCounter().GetValue())
	}
}

func (p *progress) record(r osgm.Record) {
	for len(p.ratio) <= r.Problem {
		p.ratio = append(p.ratio, math.Inf(1))
		p.first = append(p.first, 0)
	}
	ratio := r.GradNorm / r.GradTol
	p.ratio[r.Problem] = ratio
	if p.first[r.Problem] == 0 {
		p.first[r.Problem] = ratio
	}
	if r.Accepted {
		p.accept++
	} else {
		p.null++
	}
	if p.metrics != nil {
		p.export(r)
	}
	p.evals = r.Evals
	if p.log.Core().Enabled(zapcore.DebugLevel) {
		p.log.Debug("iteration", zap.Int("problem", r.Problem), zap.Int("iter", r.Iter), zap.Int("passes", r.Evals),
			zap.Float64("f", r.F), zap.Float64("grad_norm", r.GradNorm), zap.Bool("accepted", r.Accepted))
	}
	if time.Since(p.last) < progressEvery {
		return
	}
	now := time.Now()
	worst, k := 0.0, 0
	for i, v := range p.ratio {
		if v > worst {
			worst, k = v, i
		}
	}
	fields := []zap.Field{zap.Int("iter", r.Iter), zap.Int("passes", r.Evals), zap.Float64("f", r.F),
		zap.Float64("grad_vs_tolerance", worst), zap.Int("accepted", p.accept), zap.Int("null", p.null),
		zap.Float64("passes_per_s", float64(p.evals-p.lastEvs)/now.Sub(p.last).Seconds())}
	if p.alive != nil {
		fields = append(fields, zap.Int("workers", p.alive()))
	}
	// Linear convergence: the log of the ratio falls at a steady rate.
	if f0 := p.first[k]; worst > 1 && f0 > worst {
		rate := math.Log(f0/worst) / now.Sub(p.start).Seconds()
		fields = append(fields, zap.Duration("eta", time.Duration(math.Log(worst)/rate*float64(time.Second)).Round(time.Second)))
	}
	p.log.Info("training", fields...)
	p.last, p.lastEvs = now, p.evals
}
