// Warm start: a model's weights as the methods' starting points.

package train

import (
	"fmt"

	"github.com/osgm-svm/osgm/pkg/libsvm"
)

// startPoints are the methods' x0 over their n coordinates: 0, or the
// initial model's weights on the live coordinates. A resumed run starts
// its problems yet to start (in batches) where the first run did; the
// others' x0 gives their dimensions only.
func startPoints(init *libsvm.Model, labels []int, K, dim, n int, live []int, bias float64) ([][]float64, error) {
	if init == nil {
		// One zero vector for every problem: the methods start from a
		// copy of theirs, and K of them would be a whole model's memory
		// from the first pass on, however few problems run at a time.
		zero, x0 := make([]float64, n), make([][]float64, K)
		for k := range x0 {
			x0[k] = zero
		}
		return x0, nil
	}
	x0, err := warmStart(init, labels, dim, bias)
	if err != nil {
		return nil, err
	}
	if live != nil { // dead coordinates start at their optimum, 0
		for k, x := range x0 {
			x0[k] = make([]float64, n)
			for i, j := range live {
				x0[k][i] = x[j]
			}
		}
	}
	return x0, nil
}

// CheckBias refuses an initial model trained with a bias feature for a
// run without one, or the other way round: what the command line alone
// decides, so it can say so before the data is read.
func CheckBias(m *libsvm.Model, bias float64) error {
	if (m.Bias >= 0) != (bias >= 0) {
		return fmt.Errorf("initial model has bias %v, training uses %v: use the same -B", m.Bias, bias)
	}
	return nil
}

// warmStart maps a model's weights onto this problem's classes.
func warmStart(m *libsvm.Model, labels []int, dim int, bias float64) ([][]float64, error) {
	if err := CheckBias(m, bias); err != nil {
		return nil, err
	}
	if len(m.Labels) != len(labels) {
		return nil, fmt.Errorf("initial model has %d classes, the data %d", len(m.Labels), len(labels))
	}
	for i := range labels {
		if m.Labels[i] != labels[i] {
			return nil, fmt.Errorf("initial model's labels %v differ from the data's %v", m.Labels, labels)
		}
	}
	features := dim // the data's; the model's past them are dropped
	if bias >= 0 {
		features--
	}
	x := make([][]float64, len(m.W))
	for k, w := range m.W {
		x[k] = make([]float64, dim)
		copy(x[k], w[:min(m.NFeature, features)])
		if bias >= 0 {
			x[k][dim-1] = w[m.NFeature]
		}
	}
	return x, nil
}
