package shard

import (
	"fmt"
	"math"
)

// Loss is the loss φ of one row's margin z = a·w for its label y, the
// part of the objective the kernels sum (weighted by the row's class
// weight c). Every kernel calls it on each row, so a new loss is a case
// here and nothing else in the kernels.
//
// It is a value with a switch, not a type parameter of the kernels: Go
// 1.26 calls a type parameter's methods through its dictionary, which
// does not inline them, and a hinge kernel took 2.5 times as long that
// way. The squared hinge is inlined (see hingeGrad); the others are one
// call a row.
type Loss uint8

const (
	// SquaredHinge is max(0, 1 - y z)^2: LIBLINEAR's -s 2.
	SquaredHinge Loss = iota
	// Logistic is log(1 + e^(-y z)): LIBLINEAR's -s 0.
	Logistic
	// SquaredEpsilon is max(0, |y - z| - eps)^2, y a real target:
	// LIBLINEAR's -s 11, support vector regression.
	SquaredEpsilon
	numLosses
)

// String names the loss.
func (l Loss) String() string {
	switch l {
	case SquaredHinge:
		return "squared-hinge"
	case Logistic:
		return "logistic"
	case SquaredEpsilon:
		return "squared-epsilon-insensitive"
	}
	return fmt.Sprintf("loss(%d)", uint8(l))
}

// Valid reports whether l is one of the losses.
func (l Loss) Valid() bool { return l < numLosses }

// Regression reports whether the loss's labels are real targets rather
// than classes.
func (l Loss) Regression() bool { return l == SquaredEpsilon }

// grad is c φ(z), c φ'(z) and whether the row is active: whether its
// second derivative is nonzero (a row that is not has zero loss and
// gradient too). eps is SquaredEpsilon's width.
func (l Loss) grad(y, z, c, eps float64) (loss, dz float64, active bool) {
	switch l {
	case SquaredHinge:
		return hingeGrad(y, z, c)
	case SquaredEpsilon:
		return epsilonGrad(y, z, c, eps)
	}
	return logisticGrad(y, z, c)
}

// curv is c φ”(z)/2, the kernels' Hessian weight (the objective doubles
// their sums: the squared hinge's weight is then c itself), and whether
// the row is active.
func (l Loss) curv(y, z, c, eps float64) (float64, bool) {
	switch l {
	case SquaredHinge:
		return hingeCurv(y, z, c)
	case SquaredEpsilon:
		_, _, ok := epsilonGrad(y, z, c, eps)
		return c, ok
	}
	return logisticCurv(y, z, c), true
}

// hingeGrad and hingeCurv are the squared hinge's grad and curv. The
// kernels call them directly and the others' through Loss only when
// the loss is another: a function that holds the hinge's arithmetic and
// a call is too large for Go's inliner, and a call a row is a large
// share of a pass over short rows.
func hingeGrad(y, z, c float64) (loss, dz float64, active bool) {
	d := 1 - float64(y*z)
	if d <= 0 {
		return 0, 0, false
	}
	return float64(c * d * d), float64(-2 * c * y * d), true
}

func hingeCurv(y, z, c float64) (float64, bool) {
	if 1-float64(y*z) <= 0 {
		return 0, false
	}
	return c, true
}

// Cached reports whether a row's Hessian weight follows from whether it
// is active alone, so that passes at one point can remember which rows
// are (see Point.Stamp) instead of their margins.
func (l Loss) Cached() bool { return l != Logistic }

// CurvBound bounds φ”/2 over every margin: the Hessian's scale against
// the data's norms (see Objective.LipschitzBound).
func (l Loss) CurvBound() float64 {
	if l == Logistic {
		return 0.125
	}
	return 1
}

// epsilonGrad is LIBLINEAR's l2r_l2_svr_fun: d = z - y, the loss
// (|d| - eps)^2 outside the tube and its derivative 2 (d ∓ eps).
func epsilonGrad(y, z, c, eps float64) (loss, dz float64, active bool) {
	d := z - y
	switch {
	case d > eps:
		d -= eps
	case d < -eps:
		d += eps
	default:
		return 0, 0, false
	}
	return float64(c * d * d), float64(2 * c * d), true
}

// logisticGrad is log(1 + e^(-yz)) without overflow for either sign of
// yz, as LIBLINEAR writes it, and φ' = -y σ(-yz), from one exponential:
// the pass's cost is its exponentials and logarithms.
func logisticGrad(y, z, c float64) (loss, dz float64, active bool) {
	yz := float64(y * z)
	e := math.Exp(-math.Abs(yz)) // e^(-|yz|), in (0, 1]
	s := 1 / (1 + e)             // σ(-yz) for yz < 0
	if yz >= 0 {
		loss = math.Log1p(e)
		s = float64(e * s)
	} else {
		loss = -yz + math.Log1p(e)
	}
	return float64(c * loss), float64(-c * y * s), true
}

func logisticCurv(y, z, c float64) float64 {
	e := math.Exp(-math.Abs(float64(y * z)))
	s := 1 / (1 + e) // σ(|yz|); σ(yz)σ(-yz) is symmetric in yz
	return float64(c * float64(s*float64(e*s)) / 2)
}
