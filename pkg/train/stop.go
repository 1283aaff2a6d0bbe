// Stopping: LIBLINEAR's gradient test, per problem.

package train

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/shard"
)

// stopping is LIBLINEAR's stopping test, ||g|| <= eps * max(min(#pos,
// #neg), 1) / m * ||g(0)||, for each problem: counts are the rows per
// class that training sees, rows their sum, and tol[k] the threshold once
// g0norm[k] is known.
type stopping struct {
	// mu guards g0norm and tol, which problems side by side set at once
	// (their pass at 0) and checkpoints read.
	mu          sync.Mutex
	eps         float64
	counts      []int
	rows        int
	g0norm, tol []float64
}

func (s *stopping) set(k int) {
	if s.counts == nil { // a regression: LIBLINEAR's -s 11 test
		s.tol[k] = float64(s.eps * s.g0norm[k])
		return
	}
	pos := s.counts[k]
	s.tol[k] = float64(s.eps * math.Max(float64(min(pos, s.rows-pos)), 1) / float64(s.rows) * s.g0norm[k])
}

// trainingRows counts the rows per class that training sees: all of
// them, or all but the held-out fold's.
func trainingRows(b objective.Backend, sum shard.Summary, order []float64, holdout int, loss shard.Loss) (*stopping, error) {
	s := &stopping{rows: sum.Rows}
	if order != nil {
		s.counts = make([]int, len(order))
	}
	for c, l := range order {
		s.counts[c] = countOf(sum, l)
	}
	if holdout <= 0 {
		return s, nil
	}
	// The tally counts rows by class whatever the weights: one zero
	// vector, not K, which a batched run could not hold at once (of one
	// weight at least: a point carries one).
	zero := [][]float64{make([]float64, max(sum.MaxIndex, 1))}
	t, err := b.Tally(&shard.Point{W: zero, Terms: shard.Terms{Bias: -1, Holdout: holdout, Loss: loss}})
	if err != nil {
		return nil, err
	}
	for c := range s.counts {
		s.counts[c] -= t.Rows[c]
	}
	held, _ := t.Total()
	s.rows -= held
	if s.rows == 0 {
		return nil, fmt.Errorf("fold %d holds every row", holdout)
	}
	return s, nil
}

// regularisation is lambda: given, or LIBLINEAR's 1/(C m).
func regularisation(cfg Config, rows int) (float64, error) {
	lambda := cfg.Lambda
	if lambda == 0 {
		if !(cfg.C > 0) {
			return 0, errors.New("the cost C must be positive")
		}
		lambda = 1 / (cfg.C * float64(rows))
	}
	if !(lambda >= minLambda) {
		return 0, fmt.Errorf("lambda = %.3g (C m = %.3g) is below %g, where the objective's arithmetic overflows double precision; the model stops changing long before (heart_scale: the same weights to 13 digits from C = 1e20 to 1e100): use a smaller C", lambda, 1/lambda, minLambda)
	}
	return lambda, nil
}
