package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/report"
	"github.com/osgm-svm/osgm/pkg/train"
)

// curve collects one run's records into a plot series: after every round
// (the record of the last problem), the sum of the problems' objectives
// and the worst ratio of gradient norm to tolerance.
type curve struct {
	k      int
	f      []float64
	ratio  []float64
	series report.Series // Value: gradient ratio, until objective gaps are known
	objs   []float64     // summed objective at each point
}

func newCurve(name string) *curve { return &curve{series: report.Series{Name: name}} }

func (c *curve) record(r osgm.Record) {
	for len(c.f) <= r.Problem {
		c.f = append(c.f, 0)
		c.ratio = append(c.ratio, 0)
	}
	c.k = max(c.k, r.Problem+1)
	c.f[r.Problem], c.ratio[r.Problem] = r.F, r.GradNorm/r.GradTol
	if r.Problem != c.k-1 {
		return
	}
	sum, worst := 0.0, 0.0
	for i := range c.f {
		sum += c.f[i]
		worst = math.Max(worst, c.ratio[i])
	}
	c.objs = append(c.objs, sum)
	c.series.Points = append(c.series.Points, report.Point{Iter: r.Iter, Elapsed: r.Elapsed, Value: worst})
}

// gaps turns the series into relative objective gaps against fstar.
func (c *curve) gaps(fstar float64) report.Series {
	s := report.Series{Name: c.series.Name}
	for i, p := range c.series.Points {
		p.Value = (c.objs[i] - fstar) / math.Abs(fstar)
		s.Points = append(s.Points, p)
	}
	return s
}

// compare runs every method on the same loaded shards, tightens the best
// objective further with L-BFGS from the best model, and draws f - f*
// against iterations and seconds with a table, as the paper's SVM figure.
// It returns the best model it saw.
func compare(b objective.Backend, cfg train.Config, methods []string, plotPath string, out io.Writer) (*train.Result, error) {
	type row struct {
		name          string
		iters, passes int
		took          time.Duration
		f             float64
		conv          bool
	}
	var rows []row
	var curves []*curve
	var best *train.Result
	bestF := math.Inf(1)
	sum := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s
	}
	for _, m := range methods {
		c := newCurve(m)
		run := cfg
		run.Method, run.Trace = m, c.record
		start := time.Now()
		res, err := train.Train(b, run)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m, err)
		}
		conv := true
		for _, ok := range res.Opt.Converged {
			conv = conv && ok
		}
		f := sum(res.Primal)
		rows = append(rows, row{m, maxInt(res.Opt.Iters), res.Opt.Evals, time.Since(start), f, conv})
		curves = append(curves, c)
		if f < bestF {
			best, bestF = res, f
		}
	}
	// f*: the best run, tightened by L-BFGS warm-started from it.
	tight := cfg
	tight.Method, tight.Eps, tight.MaxIter, tight.Init, tight.Trace = "lbfgs", 1e-12, 2000, best.Model, nil
	if res, err := train.Train(b, tight); err == nil && sum(res.Primal) < bestF {
		best, bestF = res, sum(res.Primal)
	}
	fmt.Fprintf(out, "| method | iterations | passes | seconds | objective | gap to f* | converged |\n|---|---|---|---|---|---|---|\n")
	series := make([]report.Series, len(curves))
	for i, r := range rows {
		series[i] = curves[i].gaps(bestF)
		fmt.Fprintf(out, "| %s | %d | %d | %.2f | %.10g | %.2e | %t |\n", r.name, r.iters, r.passes, r.took.Seconds(), r.f, (r.f-bestF)/math.Abs(bestF), r.conv)
	}
	fmt.Fprintf(out, "\nf* = %.15g (best run, tightened by L-BFGS)\n", bestF)
	if plotPath != "" {
		if err := report.Write(plotPath, "(f - f*) / f*", "relative objective gap", series); err != nil {
			return nil, err
		}
	}
	return best, nil
}

// plotRun draws one run's gradient norm against its tolerance.
func plotRun(path, name string, c *curve) error {
	return report.Write(path, name+": gradient norm / stopping tolerance (done at 1)", "‖∇f‖ / tolerance", []report.Series{c.series})
}

func methodList(s string) ([]string, error) {
	var out []string
	for _, m := range strings.Split(s, ",") {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		if _, err := osgm.New(m, osgm.Problem{}, osgm.Params{}); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-compare needs a list of methods, e.g. gd,agd,sagd,adagrad,osgm-r,osgm-h,hdm,lbfgs")
	}
	return out, nil
}
