package libsvm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// SolverL2LossSVC is LIBLINEAR's name for the primal L2-regularised
// squared-hinge SVM (`-s 2`), the problem this project solves.
const SolverL2LossSVC = "L2R_L2LOSS_SVC"

// SolverL2LossSVCDual is LIBLINEAR's default solver (`-s 1`): the same
// problem solved through its dual, so its model is this problem's too.
const SolverL2LossSVCDual = "L2R_L2LOSS_SVC_DUAL"

// Solver is one of LIBLINEAR 2.30's solver types. Every classifier
// predicts from w·x as this package does, whatever loss trained it; a
// regression predicts values, not labels.
type Solver struct {
	Type       int    // its -s number
	Name       string // its solver_type in model files
	About      string
	Regression bool
}

// Solvers lists LIBLINEAR 2.30's solver types.
var Solvers = []Solver{
	{0, "L2R_LR", "L2-regularised logistic regression", false},
	{1, SolverL2LossSVCDual, "the L2-loss SVM's dual solver", false},
	{2, SolverL2LossSVC, "the L2-loss SVM (primal)", false},
	{3, "L2R_L1LOSS_SVC_DUAL", "the L1-loss SVM (dual)", false},
	{4, "MCSVM_CS", "Crammer and Singer's multi-class SVM", false},
	{5, "L1R_L2LOSS_SVC", "the L1-regularised L2-loss SVM", false},
	{6, "L1R_LR", "L1-regularised logistic regression", false},
	{7, "L2R_LR_DUAL", "L2-regularised logistic regression (dual)", false},
	{11, "L2R_L2LOSS_SVR", "L2-loss support vector regression", true},
	{12, "L2R_L2LOSS_SVR_DUAL", "L2-loss support vector regression (dual)", true},
	{13, "L2R_L1LOSS_SVR_DUAL", "L1-loss support vector regression (dual)", true},
}

// SolverNumbered returns the solver of `-s t`.
func SolverNumbered(t int) (Solver, bool) {
	return find(func(s Solver) bool { return s.Type == t })
}

// SolverNamed returns the solver whose model files say solver_type name.
func SolverNamed(name string) (Solver, bool) {
	return find(func(s Solver) bool { return s.Name == name })
}

func find(match func(Solver) bool) (Solver, bool) {
	if i := slices.IndexFunc(Solvers, match); i >= 0 {
		return Solvers[i], true
	}
	return Solver{}, false
}

// Model is a linear classifier or regression in LIBLINEAR's format.
type Model struct {
	Solver   string // any LIBLINEAR solver; see L2LossSVM and Regression
	Labels   []int  // class labels (none for a regression); Labels[0] is predicted when w·x > 0 for two classes
	NFeature int    // features, not counting the bias
	Bias     float64
	// W holds one weight vector per trained problem: one for two classes,
	// one per class otherwise (and for MCSVM_CS always). Each has
	// NFeature entries, plus the bias weight last when Bias >= 0
	// (LIBLINEAR's rule: -1 means no bias).
	W [][]float64
}

// L2LossSVM reports whether the model solves this project's problem (the
// L2-regularised L2-loss SVM, in the primal or the dual), so that it can
// start a training or be scored by its objective; any classifier can
// predict.
func (m *Model) L2LossSVM() bool {
	return m.Solver == SolverL2LossSVC || m.Solver == SolverL2LossSVCDual
}

// Regression reports whether the model predicts values (LIBLINEAR's
// -s 11 to 13) rather than class labels.
func (m *Model) Regression() bool {
	s, ok := SolverNamed(m.Solver)
	return ok && s.Regression
}

// Dim is the length of each weight vector.
func (m *Model) Dim() int {
	if m.Bias >= 0 {
		return m.NFeature + 1
	}
	return m.NFeature
}

// IntLabel converts a class label to the integer LIBLINEAR stores, refusing
// labels that would be silently truncated.
func IntLabel(v float64) (int, error) {
	text := strconv.FormatFloat(v, 'f', -1, 64)
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("label %s is not an integer; LIBLINEAR models need integer class labels", text)
	}
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, fmt.Errorf("label %s is outside the 32-bit integers LIBLINEAR models store", text)
	}
	return int(v), nil
}

// Weights gives WriteWeights a model's weights a coordinate at a time.
type Weights interface {
	// Problems is how many weight vectors there are.
	Problems() int
	// Coordinate fills dst, one entry per problem, with coordinate j's
	// weights (the bias's last); j goes up from 0 by one.
	Coordinate(j int, dst []float64) error
}

// Write saves the model the way LIBLINEAR's save_model does (17 significant
// digits, a space after every number), so liblinear-predict loads it.
func (m *Model) Write(w io.Writer) error { return m.WriteWeights(w, dense(m.W)) }

// WriteWeights is Write with the weights ws gives instead of W: a trainer
// writes a model it does not hold laid out in full.
func (m *Model) WriteWeights(w io.Writer, ws Weights) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	if m.Regression() { // LIBLINEAR's: two "classes" and no labels
		fmt.Fprintf(bw, "solver_type %s\nnr_class 2", m.Solver)
	} else {
		fmt.Fprintf(bw, "solver_type %s\nnr_class %d\nlabel", m.Solver, len(m.Labels))
		for _, l := range m.Labels {
			fmt.Fprintf(bw, " %d", l)
		}
	}
	fmt.Fprintf(bw, "\nnr_feature %d\nbias %s\nw\n", m.NFeature, strconv.FormatFloat(m.Bias, 'g', 17, 64))
	K := ws.Problems()
	if K == 0 {
		bw.WriteString(strings.Repeat("\n", m.Dim()))
		return bw.Flush()
	}
	rows := max(1, formatBlock/K)
	vals := make([]float64, rows*K)
	parts := make([][]byte, runtime.GOMAXPROCS(0))
	for j0 := 0; j0 < m.Dim(); j0 += rows {
		n := min(rows, m.Dim()-j0)
		for j := range n {
			if err := ws.Coordinate(j0+j, vals[j*K:(j+1)*K]); err != nil {
				return err
			}
		}
		formatRows(parts, vals[:n*K], K)
		for _, b := range parts {
			bw.Write(b)
		}
	}
	return bw.Flush()
}

// formatBlock is how many weights a model's writer formats at once, side
// by side: 17-digit formatting is most of writing a large model (70 ns a
// weight; 20 M weights for 20 classes of a million features), and the
// block bounds the memory it holds.
const formatBlock = 1 << 16

// formatRows formats rows of K weights the way save_model does into
// parts, a contiguous run of rows each, side by side.
func formatRows(parts [][]byte, vals []float64, K int) {
	n := len(vals) / K
	var wg sync.WaitGroup
	for p := range parts {
		lo, hi := p*n/len(parts), (p+1)*n/len(parts)
		wg.Go(func() { parts[p] = appendRows(parts[p][:0], vals[lo*K:hi*K], K) })
	}
	wg.Wait()
}

func appendRows(b []byte, vals []float64, K int) []byte {
	for i, v := range vals {
		b = strconv.AppendFloat(b, v, 'g', 17, 64)
		b = append(b, ' ')
		if (i+1)%K == 0 {
			b = append(b, '\n')
		}
	}
	return b
}

// dense is W as Weights.
type dense [][]float64

func (d dense) Problems() int { return len(d) }

func (d dense) Coordinate(j int, dst []float64) error {
	for k, x := range d {
		dst[k] = x[j]
	}
	return nil
}

// ReadModelFile reads the LIBLINEAR model file at path.
func ReadModelFile(path string) (*Model, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadModel(f, path)
}

// ReadModel parses a LIBLINEAR model file; name is used in errors.
func ReadModel(r io.Reader, name string) (*Model, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<26)
	m := &Model{Bias: -1}
	line := 0
	fail := func(format string, a ...any) error {
		return &ParseError{File: name, Line: line, Err: fmt.Errorf(format, a...)}
	}
	nrClass := -1
	for {
		if !sc.Scan() {
			if err := sc.Err(); err != nil {
				return nil, fail("%v", err)
			}
			return nil, fail("missing \"w\" line")
		}
		line++
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		key, args := fields[0], fields[1:]
		if key == "w" {
			break
		}
		if len(args) == 0 && key != "label" {
			return nil, fail("%s has no value", key)
		}
		if err := m.setHeader(key, args, &nrClass); err != nil {
			return nil, fail("%w", err)
		}
	}
	if m.Solver == "" {
		return nil, fail("missing solver_type")
	}
	if m.Regression() {
		if nrClass != 2 || len(m.Labels) != 0 {
			return nil, fail("a regression model has nr_class 2 and no labels, not %d and %d", nrClass, len(m.Labels))
		}
	} else if nrClass < 0 || len(m.Labels) != nrClass {
		return nil, fail("nr_class %d but %d labels", nrClass, len(m.Labels))
	}
	if nrClass < 2 {
		return nil, fail("a model needs at least two classes")
	}
	// LIBLINEAR's rule: one vector for two classes, except for Crammer and
	// Singer's multi-class SVM, which keeps one per class.
	nrW := nrClass
	if nrClass == 2 && m.Solver != "MCSVM_CS" {
		nrW = 1
	}
	// The weights grow with the rows read, not with the header's claim:
	// a file that promises more features than it holds ends in an error,
	// not in an allocation the size of the promise.
	dim := m.Dim()
	m.W = make([][]float64, nrW)
	for j := 0; j < dim; j++ {
		if !sc.Scan() {
			if err := sc.Err(); err != nil {
				return nil, fail("%v", err)
			}
			return nil, fail("%d weight rows, expected %d", j, dim)
		}
		line++
		fields := strings.Fields(sc.Text())
		if len(fields) != nrW {
			return nil, fail("%d weights on the line, expected %d", len(fields), nrW)
		}
		for k, f := range fields {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fail("weight %q is not a finite number", f)
			}
			m.W[k] = append(m.W[k], v)
		}
	}
	return m, nil
}

// setHeader sets what a header line key args says; nr_class goes to
// nrClass, which the labels are checked against once the header ends.
func (m *Model) setHeader(key string, args []string, nrClass *int) error {
	switch key {
	case "solver_type":
		m.Solver = args[0]
		return checkSolver(m.Solver)
	case "nr_class":
		n, err := strconv.Atoi(args[0])
		if err != nil || n < 1 {
			return fmt.Errorf("nr_class %q is not a positive integer", args[0])
		}
		*nrClass = n
	case "label":
		for _, a := range args {
			l, err := strconv.Atoi(a)
			if err != nil {
				return fmt.Errorf("label %q is not an integer", a)
			}
			if slices.Contains(m.Labels, l) {
				return fmt.Errorf("label %d appears twice", l)
			}
			m.Labels = append(m.Labels, l)
		}
	case "nr_feature":
		n, err := strconv.Atoi(args[0])
		if err != nil || n < 0 || n > math.MaxInt32 {
			return fmt.Errorf("nr_feature %q is not an integer from 0 to %d", args[0], math.MaxInt32)
		}
		m.NFeature = n
	case "bias":
		b, err := strconv.ParseFloat(args[0], 64)
		if err != nil || math.IsNaN(b) || math.IsInf(b, 0) {
			return fmt.Errorf("bias %q is not a finite number", args[0])
		}
		m.Bias = b
	default:
		return fmt.Errorf("unknown header %q", key)
	}
	return nil
}

func checkSolver(name string) error {
	if _, ok := SolverNamed(name); !ok {
		return fmt.Errorf("solver_type %q is not one of LIBLINEAR's", name)
	}
	return nil
}

// Decision returns w_k·x (with the bias term) for every weight vector.
func (m *Model) Decision(idx []uint32, val []float64, out []float64) []float64 {
	out = out[:0]
	for _, wk := range m.W {
		s := 0.0
		for q, j := range idx {
			if int(j) <= m.NFeature { // features unseen in training have no weight
				s += float64(wk[j-1] * val[q])
			}
		}
		if m.Bias >= 0 {
			s += float64(wk[m.NFeature] * m.Bias)
		}
		out = append(out, s)
	}
	return out
}

// Predict returns the label LIBLINEAR's predict would give.
func (m *Model) Predict(idx []uint32, val []float64, scratch []float64) int {
	return m.label(m.Decision(idx, val, scratch))
}

// label is the class a row of decision values dec is predicted.
func (m *Model) label(dec []float64) int {
	if len(m.Labels) == 2 { // LIBLINEAR's rule, even for MCSVM_CS's two vectors
		if dec[0] > 0 {
			return m.Labels[0]
		}
		return m.Labels[1]
	}
	best := 0
	for k := range dec {
		if dec[k] > dec[best] {
			best = k
		}
	}
	return m.Labels[best]
}

// ErrNoData reports an input without a single data line.
var ErrNoData = errors.New("no data lines")
