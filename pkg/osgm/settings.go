// What a run of Minimize is given (Settings, Hooks, Options) and what it
// gives back (Result, Record, Stop).

package osgm

import (
	"errors"
	"time"
)

// Settings control a run of Minimize: the Options a user picks, and what
// the caller works out for the run. They are plain values: a problem
// placed on another host takes them as they are (wire.Solve), and the
// caller's Hooks stay with the caller.
type Settings struct {
	Options
	// Shape describes the data, for resolving Auto (see Choose).
	Shape Shape
	// GradTol is each problem's stopping threshold on ||grad f||_2.
	GradTol []float64
	// MaxGap, when positive, also holds each problem to a certified
	// relative gap: it converges only once ||grad f||^2 <= 2 Mu f MaxGap
	// as well, which for a Mu-strongly convex f >= 0 bounds (f - f*)/f
	// by MaxGap whatever path the method took.
	MaxGap float64
	// F0 and G0, when set, are the value and gradient at x0, which saves
	// the first evaluation.
	F0 []float64
	G0 [][]float64

	// Resume continues a run from a snapshot instead of starting at x0
	// (which then only gives the dimensions).
	Resume *Snapshot
	// Batch, when positive and below the number of problems, minimises
	// them this many at a time (see minimizeBatches): the same result,
	// with the methods' memory bounded by the batch.
	Batch int
}

// Hooks are how the caller observes and steers a run of Minimize, as
// gonum's Recorder observes one: callbacks into the caller's process.
// Each may be nil.
type Hooks struct {
	// Trace receives a record after every iteration.
	Trace func(Record)
	// Now is the clock (time.Now when nil); tests replace it.
	Now func() time.Time
	// Checkpoint receives a snapshot every CheckpointEvery passes
	// (Options) and when Interrupt reports true. Interrupt is polled
	// between rounds; once it reports true Minimize returns
	// ErrInterrupted. A pass that fails while Interrupt reports true (the
	// evaluation was stopped too: a round waiting on workers that never
	// came) also ends with ErrInterrupted, the last snapshot taken before
	// it holding the state: a method between its request and the reply
	// is not one to save.
	Checkpoint func(*Snapshot) error
	Interrupt  func() bool
	// BatchStart runs before each batch that begins at x0 (in batches;
	// not the batch a snapshot resumes), in place of F0 and G0. It makes
	// one pass over the batch's problems ks alone on obj (the objective,
	// or the fork the batch runs on), counted among the passes, and
	// gives their value and gradient at x0 (nil: Minimize evaluates x0
	// itself), their GradTol, and their Diag (nil: the problems' own),
	// so that what such a pass brings is held a batch at a time too.
	BatchStart func(obj Objective, ks []int) (Start, error)
	// Shelf takes each batch's points once the batch is finished, and
	// the Result's X holds nil for them: a wide multi-class model need
	// not stay in memory while the rest train.
	Shelf Shelf
}

// interrupted is whether Interrupt asks the run to stop.
func (h *Hooks) interrupted() bool { return h.Interrupt != nil && h.Interrupt() }

// Options are what a user picks of a minimisation (train.Settings
// carries them from the flags): the method and its parameters, the
// iterations, how many problems run side by side, and how often the
// state is saved.
type Options struct {
	Method string
	Params Params
	// MaxIter bounds the iterations of each problem.
	MaxIter int
	// Parallel, with Batch 1 and an objective that forks (its Fork is not nil), is how
	// many problems are minimised side by side, each alone on its own
	// fork (see minimizeSide): one-vs-rest classes on the cores of the
	// machine that holds the data, with the bits of one at a time.
	Parallel int
	// CheckpointEvery is how many passes go between snapshots (see
	// Hooks.Checkpoint).
	CheckpointEvery int
	// CheckpointShare, when positive, also spaces snapshots in time: the
	// next is not taken before the last one (its encoding and what
	// Checkpoint did with it) has cost at most this share of the time
	// since it began. A state is as large as the problems (news20.t's
	// L-BFGS: 150 MB), and written every 50 passes it doubled the run.
	CheckpointShare float64
}

// Shelf keeps the points of the problems a batched run has finished,
// outside memory (a file): Put copies x before returning, and Get fills
// x with what problem k's Put gave. Minimize takes them back only to
// write a checkpoint.
type Shelf interface {
	Put(k int, x []float64) error
	Get(k int, x []float64) error
}

// Start is what BatchStart gives a batch.
type Start struct {
	F0      []float64
	G0      [][]float64
	GradTol []float64
	Diag    [][]float64
}

// ErrInterrupted is returned when Interrupt stopped a run; the last
// snapshot holds its state.
var ErrInterrupted = errors.New("osgm: interrupted")

// Record describes one iteration of one problem.
type Record struct {
	Problem   int
	Iter      int
	Evals     int // data passes so far, shared by all problems
	F         float64
	GradNorm  float64
	GradTol   float64 // the problem's stopping threshold on GradNorm
	Accepted  bool
	Elapsed   time.Duration
	Converged bool
}

// Result is the outcome of Minimize: the best point of every problem
// (nil where Hooks.Shelf holds it).
type Result struct {
	X         [][]float64
	F         []float64
	GradNorm  []float64
	Iters     []int
	Converged []bool
	// Stop says why each problem ended.
	Stop  []Stop
	Evals int // data passes, including one at x0 unless F0 was given
}

// Stop is why a problem's minimisation ended.
type Stop uint8

const (
	Running   Stop = iota // not ended (not in a Result)
	Converged             // the gradient met its tolerance
	MaxIter               // Settings.MaxIter came first
	Stalled               // the method's steps no longer change the objective
)

func (s Stop) String() string {
	return [...]string{"running", "converged", "max-iter", "stalled"}[s]
}

// stopOf is why a problem with this state ended.
func stopOf(converged, stalled bool, iters, maxIter int) Stop {
	switch {
	case converged:
		return Converged
	case iters >= maxIter:
		return MaxIter
	case stalled:
		return Stalled
	}
	return Running
}
