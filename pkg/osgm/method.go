// Package osgm minimises smooth objectives with the online scaled gradient
// method (OSGM) and the baselines it is compared with.
//
// Methods never evaluate anything themselves, as in gonum/optimize: a Method
// is a state machine that says which point it needs evaluated next (Next)
// and is handed the result (Tell). The driver, Minimize, batches the
// requests of several independent problems (the one-vs-rest problems of a
// multi-class data set) into one evaluation of an Objective, which may run
// over local shards or over a cluster: the methods cannot tell.
package osgm

import (
	"errors"
	"fmt"
	"sort"
)

// Op says what an evaluation computes, as a bitmask (gonum/optimize's
// Operation): methods ask for one, objectives say which they can do.
type Op uint8

const (
	OpValue   Op = 1 << iota // f(X)
	OpGrad                   // the gradient at X
	OpDiag                   // the (generalised) Hessian's diagonal at X
	OpHess                   // the whole (generalised) Hessian at X, one problem a pass
	OpHessVec                // the Hessian at X applied to V

	OpEval     = OpValue | OpGrad
	OpEvalDiag = OpEval | OpDiag
	OpEvalHess = OpEval | OpHess
)

func (op Op) String() string {
	switch op {
	case OpEval:
		return "eval"
	case OpEvalDiag:
		return "eval+diag"
	case OpEvalHess:
		return "eval+hess"
	case OpHessVec:
		return "hessvec"
	}
	return fmt.Sprintf("op(%#x)", uint8(op))
}

// passOrder is the order in which Minimize makes a round's passes, one
// for each kind the methods asked for.
var passOrder = [...]Op{OpEval, OpHessVec, OpEvalDiag, OpEvalHess}

// Pass is one pass over the data: Op for the problems Ks at X (and V).
// The vectors are indexed like Ks; the objective fills those Op names.
type Pass struct {
	Op Op
	// Ks are the problems evaluated, in the order of the vectors; nil
	// means every problem, in order.
	Ks   []int
	X, V [][]float64
	F    []float64   // OpValue
	G    [][]float64 // OpGrad
	D    [][]float64 // OpDiag
	H    [][]float64 // OpHess: Dim x Dim, row by row
	HV   [][]float64 // OpHessVec
	// At names each problem's X (Request.At; 0: unnamed); objectives
	// read it for OpHessVec and OpEvalDiag.
	At []uint64
}

// Objective evaluates K independent problems that share one pass over
// the data; a pass costs in proportion to the problems it carries. Ops
// is what Evaluate can compute (OpEval at least); Evaluate computes
// b.Op, one of OpEval, OpEvalDiag, OpEvalHess and OpHessVec.
type Objective interface {
	Ops() Op
	Evaluate(b *Pass) error
	// Fork is a copy for another goroutine: it evaluates the same
	// problems to the same bits, side by side with the original and
	// other forks (each used by one goroutine); nil where none can be
	// made (the data is not in this process).
	Fork() Objective
	// Place minimises problem k where its data is, in another process
	// (a worker that holds every shard): Solve of problem k from x0
	// there, to the same bits, with h's callbacks (Trace, Checkpoint,
	// Interrupt) called here. ok is false where it cannot place the
	// problem, which is then minimised here.
	Place(k int, x0 []float64, p Problem, s Settings, h Hooks) (r *Result, ok bool, err error)
}

// Here is an Objective's Fork and Place for one evaluated here alone,
// which neither forks nor places: embed it.
type Here struct{}

// Fork is nil: no fork.
func (Here) Fork() Objective { return nil }

// Place declines: the problem is minimised here.
func (Here) Place(int, []float64, Problem, Settings, Hooks) (*Result, bool, error) {
	return nil, false, nil
}

// Solve minimises problem k of obj alone from x0: what a side-by-side
// run does with each problem, and what a Placer's far end runs.
func Solve(obj Objective, k int, x0 []float64, p Problem, s Settings, h Hooks) (*Result, error) {
	return Minimize(&subset{obj: obj, ks: []int{k}}, [][]float64{x0}, []Problem{p}, s, h)
}

// ErrUnsupported is returned for an Op an objective cannot compute.
var ErrUnsupported = errors.New("osgm: the objective cannot compute this")

// Request is the evaluation a method needs next. X and V belong to the
// method and stay unchanged until the following Tell.
type Request struct {
	Op   Op
	X, V []float64
	// At, when nonzero, names X: the method gives every request at the
	// same point the same At, and other points other ones. An objective
	// may keep what it learnt at a point (which rows are active) for the
	// next request at it, without comparing the vectors.
	At uint64
}

// Reply is the evaluation of a Request: F and G for OpEval, HV for
// OpHessVec, F, G and D for OpEvalDiag, F, G and H (Dim x Dim, row by
// row) for OpEvalHess. The method copies what it keeps; the vectors are
// the driver's, written anew by each pass, so a method may also use them
// as scratch once Tell has read them (Newton keeps z = M^-1 r in HV's
// memory, where a vector of its own would cost 8 MB a million features).
type Reply struct {
	F           float64
	G, HV, D, H []float64
}

// Step tells the driver what a Tell completed.
type Step struct {
	Iterated bool // an iteration ended: check the stopping test
	Accepted bool // the iterate moved
	Stalled  bool // the method can make no more progress
}

// Method optimises one problem. Init is called once with the start point,
// then Next and Tell alternate. Init's slices, like a Reply's, are the
// caller's, reused once it returns: the method copies what it keeps.
type Method interface {
	Init(x []float64, f float64, g []float64)
	Next() Request
	Tell(r Reply) Step
	// Best returns the best point seen with its value and gradient; the
	// slices belong to the method.
	Best() (x []float64, f float64, g []float64)
}

// Problem describes a problem to the method: what it may assume.
type Problem struct {
	Dim int
	L   float64 // an upper bound on the Lipschitz constant of the gradient
	Mu  float64 // strong convexity (lambda here)
	// Diag is the diagonal of the Hessian at the start, when known (see
	// UsesStartDiag): OSGM starts its scaling from it, Newton its first
	// preconditioner.
	Diag []float64
	// HessPasses is what a Hessian pass costs, in ordinary passes (see
	// Shape.HessPasses): newton-full holds the Hessian once a CG solve has
	// taken more steps (zero: after any solve).
	HessPasses float64
	// EvalDiag says the objective computes the Hessian's diagonal with an
	// evaluation (it has OpDiag); Minimize sets it.
	EvalDiag bool
}

// Params are the experts' knobs; zero values mean the defaults.
type Params struct {
	// Eta is the online learner's step size for the scaling P. Zero means
	// EtaScale/L with L re-estimated from observed curvature.
	Eta      float64
	EtaScale float64 // default DefaultEtaScale
	// EtaBeta is HDM's step size for the momentum weight (default 1).
	EtaBeta float64
	// Z is OSGM-R's lower bound on the optimum (0 is valid for the SVM).
	Z float64
	// Memory is L-BFGS's history length (default 10).
	Memory int
	// NoDiag starts OSGM's scaling at zero instead of from the diagonal.
	NoDiag bool
}

// Auto is the default method's name: the choice is made once the number
// of problems is known (Choose).
const Auto = "auto"

// DefaultMethod is the method used when none is named.
const DefaultMethod = Auto

// Shape is what Choose knows of the data; zero when nothing is known.
type Shape struct {
	Dim    int // a problem's coordinates: the features, and the bias
	NNZ    int
	Pairs  int // sum over rows of r(r+1)/2, r the row's nonzeros (bias included)
	Shards int
}

// MaxFullDim is the most coordinates newton-full takes: its passes carry
// a packed Hessian, 4 MB at 1,024.
const MaxFullDim = 1024

// HessPasses is what a pass that brings the whole Hessian costs, in
// ordinary passes over the data: each row of r nonzeros makes r(r+1)/2
// products (each worth 1.25 nonzeros' work, as measured), and every
// shard's Hessian is added up and carried (4 per entry). Zero when the
// data's shape is not known.
func (s Shape) HessPasses() float64 {
	if s.NNZ <= 0 {
		return 0
	}
	d := float64(s.Dim)
	return (float64(1.25*float64(s.Pairs)) + float64(4*float64(s.Shards)*d*(d+1)/2) + float64(s.NNZ)) / float64(s.NNZ)
}

// fullPays reports whether newton-full can hold the Hessian, and whether
// a CG solve may cost more than a Hessian pass: TRON's longest take tens
// of steps.
func (s Shape) fullPays() bool {
	return s.Dim > 0 && s.Dim <= MaxFullDim && s.NNZ > 0 && s.HessPasses() <= 64
}

// Choose resolves Auto (or no name) for a run of K problems on data of
// the given shape, from measurements on every shared LIBSVM set and
// generated data (BENCHMARKS.md). A single (binary) problem gets
// LIBLINEAR's trust-region Newton-CG, which needs the fewest passes on
// large data; where a Hessian pass is cheap enough (few features, short
// rows) in its newton-full form, which brings the Hessian back when CG
// solves cost more than that. One-vs-rest problems get Newton-CG too:
// stopped by LIBLINEAR's gradient test, L-BFGS's path ends 2.5% to 5.8%
// above LIBLINEAR's objective summed over the classes (pendigits,
// dna.scale, a 60,000-row image set), TRON's steps at it. HDM, the best
// OSGM variant, needs 2 to 20 times the passes of L-BFGS, so the OSGM
// family is one flag away rather than the default. Other names are
// returned as they are.
func Choose(name string, problems int, shape Shape) string {
	if name != "" && name != Auto {
		return name
	}
	if problems == 1 && shape.fullPays() {
		return "newton-full"
	}
	return "newton"
}

// ErrUnknownMethod is returned by New for a name it does not know.
var ErrUnknownMethod = errors.New("osgm: unknown method")

// spec is a method: how to make one, and what it asks of the objective
// beyond OpEval.
type spec struct {
	make  func(Problem, Params) Method
	needs Op
	// startDiag: reads Problem.Diag unless Params.NoDiag (the OSGM
	// family), or always (Newton, whose first solve at 0 is
	// preconditioned with it).
	startDiag, diagAlways bool
}

func osgmSpec(s surrogate) spec {
	return spec{make: func(p Problem, q Params) Method { return newOSGM(p, q, s) }, startDiag: true}
}

var methods = map[string]spec{
	"osgm-h": osgmSpec(hypergrad),
	"osgm-r": osgmSpec(ratio),
	// OSGM-G's surrogate needs the Hessian along the gradient.
	"osgm-g":  {make: func(p Problem, q Params) Method { return newOSGM(p, q, gradNorm) }, needs: OpHessVec, startDiag: true},
	"hdm":     osgmSpec(momentum),
	"gd":      {make: newGD},
	"adagrad": {make: newAdaGrad},
	"agd":     {make: func(p Problem, q Params) Method { return newAGD(p, false) }},
	"sagd":    {make: func(p Problem, q Params) Method { return newAGD(p, true) }},
	"lbfgs":   {make: newLBFGS},
	// Trust-region Newton-CG, LIBLINEAR's own -s 2 method, as a baseline
	// and for the fewest passes.
	"newton": {make: newNewton, needs: OpHessVec, diagAlways: true},
	// Newton with the whole Hessian, solved exactly: few passes where
	// there are few features.
	"newton-full": {make: newNewtonFull, needs: OpHessVec | OpHess, diagAlways: true},
	// gonum's L-BFGS with More-Thuente line search, for comparison; its
	// state is private, so checkpoints restart it from the best point.
	"gonum-lbfgs": {make: newGonumLBFGS},
}

// Methods lists the method names New accepts.
func Methods() []string {
	out := []string{Auto}
	for name := range methods {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// New returns the named method for problem p.
func New(name string, p Problem, q Params) (Method, error) {
	sp, ok := methods[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %v)", ErrUnknownMethod, name, Methods())
	}
	return sp.make(p, q), nil
}

// Needs is what the named method may ask of an objective beyond OpEval:
// OpHessVec, OpHess. OpDiag it takes when the objective has it.
func Needs(name string) Op { return methods[name].needs }

// UsesStartDiag reports whether the named method reads Problem.Diag, so a
// caller computes the diagonal (a pass over the data) only for those that
// do.
func UsesStartDiag(name string, q Params) bool {
	sp := methods[name]
	return sp.diagAlways || sp.startDiag && !q.NoDiag
}
