// The problems this package trains, by LIBLINEAR's -s.

package train

import (
	"fmt"

	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/shard"
)

// losses are the problems this package trains, by LIBLINEAR's -s.
var losses = map[int]shard.Loss{0: shard.Logistic, 2: shard.SquaredHinge, 11: shard.SquaredEpsilon}

// SolverOf is the LIBLINEAR solver whose problem loss l makes: its model
// files' solver_type.
func SolverOf(l shard.Loss) libsvm.Solver {
	for t, lt := range losses {
		if lt == l {
			s, _ := libsvm.SolverNumbered(t)
			return s
		}
	}
	panic(fmt.Sprintf("train: no solver for the %v loss", l))
}

// LossOf is the loss of a model's problem, and whether this package
// trains it: a warm start needs the same problem's model (LIBLINEAR's
// -s 1 and -s 2 are one problem).
func LossOf(m *libsvm.Model) (shard.Loss, bool) {
	if m.L2LossSVM() {
		return shard.SquaredHinge, true
	}
	if s, ok := libsvm.SolverNamed(m.Solver); ok {
		l, ok := losses[s.Type]
		return l, ok
	}
	return 0, false
}

// LossNumbered is the loss of LIBLINEAR's -s t, and whether this package
// trains it.
func LossNumbered(t int) (shard.Loss, bool) {
	l, ok := losses[t]
	return l, ok
}
