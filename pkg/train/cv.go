package train

import (
	"errors"
	"math"

	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/shard"
)

// CV is the outcome of n-fold cross-validation at one C.
type CV struct {
	C      float64
	P      float64 // a regression's insensitive width (-p); 0 otherwise
	Folds  int
	Tally  shard.Tally     // held-out predictions, summed over the folds
	Models []*libsvm.Model // fold f+1's model, trained without fold f+1
	Passes int             // passes over the data, all folds together
	// Unchanged reports that no fold's model moved (||dw|| <= 1e-15) from
	// the warm start it was given: LIBLINEAR's sign that larger C will
	// not change anything either.
	Unchanged bool
}

// Accuracy is the fraction of rows predicted correctly while held out.
func (c *CV) Accuracy() float64 {
	rows, correct := c.Tally.Total()
	if rows == 0 {
		return 0
	}
	return float64(correct) / float64(rows)
}

// better reports whether c scores above d: a higher accuracy, or for a
// regression a lower mean squared error, as LIBLINEAR's search compares.
func (c *CV) better(d *CV) bool {
	if c.Tally.Sums != nil {
		return c.Tally.MSE() < d.Tally.MSE()
	}
	return c.Accuracy() > d.Accuracy()
}

// CrossValidate trains once per fold on the other folds' rows and
// predicts the fold's, as liblinear-train -v does, with the same folds
// (objective.Folds). warm, when not nil, holds a starting model per fold.
// The shards stay where they are: every fold is a mask on the same rows.
func CrossValidate(b objective.Backend, cfg Config, folds int, warm []*libsvm.Model) (*CV, error) {
	return crossValidate(b, cfg, folds, warm, false)
}

// crossValidate is CrossValidate; with release set it drops each warm
// start (warm[f-1] = nil) once its fold is trained, so that a search
// holds one fold's model more than a set, not two sets.
func crossValidate(b objective.Backend, cfg Config, folds int, warm []*libsvm.Model, release bool) (*CV, error) {
	if cfg.Resume != nil || cfg.Save != nil {
		return nil, errors.New("cross-validation does not checkpoint")
	}
	if err := b.SetFolds(folds); err != nil {
		return nil, err
	}
	rows := shard.Rows(b.Meta())
	folds = min(folds, rows) // leave-one-out, as objective.Folds numbers it
	out := &CV{C: cfg.C, P: cfg.Epsilon, Folds: folds, Models: make([]*libsvm.Model, folds), Unchanged: warm != nil}
	// The models held, the warm starts' and this run's, are memory each
	// fold's training cannot have: it batches its problems to what is
	// left.
	held := modelBytes(warm...)
	for f := 1; f <= folds; f++ {
		c := cfg
		c.Holdout = f
		c.Init = nil
		if warm != nil {
			c.Init = warm[f-1]
		}
		if c.MaxBytes > 0 {
			c.MaxBytes = max(c.MaxBytes-held, 1)
		}
		res, err := Train(b, c)
		if err != nil {
			return nil, err
		}
		out.Passes += res.Opt.Evals
		out.Models[f-1] = res.Model
		held += modelBytes(res.Model)
		if c.Init != nil && weightDistance(c.Init, res.Model) > 1e-15 {
			out.Unchanged = false
		}
		if release && c.Init != nil {
			warm[f-1] = nil
			held -= modelBytes(c.Init)
		}
		t, err := b.Tally(res.Obj.ModelPoint(res.Model.W)) // the objective holds fold f out
		if err != nil {
			return nil, err
		}
		out.Tally.Add(t)
	}
	if warm == nil {
		out.Unchanged = false
	}
	return out, nil
}

// modelBytes is the memory the models' weights take.
func modelBytes(ms ...*libsvm.Model) int64 {
	n := int64(0)
	for _, m := range ms {
		if m == nil {
			continue
		}
		for _, w := range m.W {
			n += 8 * int64(len(w))
		}
	}
	return n
}

func weightDistance(a, b *libsvm.Model) float64 {
	s := 0.0
	for k := range a.W {
		for j := range a.W[k] {
			d := a.W[k][j] - b.W[k][j]
			s += float64(d * d)
		}
	}
	return math.Sqrt(s)
}

// SearchC is LIBLINEAR's -C: cross-validate at C = start, 2 start, 4
// start, ... up to maxC, each fold warm-started from its model at the
// previous C, and stop early once three C values in a row left every
// fold's model unchanged. step, when set, sees each C's result (whose
// models the next C drops as it replaces them); best is the best
// scoring C's (see better), without its models. maxReached reports a search that
// ran past maxC without stopping early, where LIBLINEAR warns.
func SearchC(b objective.Backend, cfg Config, folds int, start, maxC float64, step func(*CV)) (best *CV, maxReached bool, err error) {
	var warm []*libsvm.Model
	unchanged := 0
	c := start
	for ; c <= maxC; c *= 2 {
		cfg.C, cfg.Lambda = c, 0
		cv, err := crossValidate(b, cfg, folds, warm, true)
		if err != nil {
			return nil, false, err
		}
		if step != nil {
			step(cv)
		}
		if best == nil || cv.better(best) {
			// Its models are only the next C's warm start: held as the
			// best, they would take a fold's worth of memory per fold.
			kept := *cv
			kept.Models = nil
			best = &kept
		}
		// As in LIBLINEAR, the first C counts as unchanged.
		first := warm == nil
		warm = cv.Models
		if first || cv.Unchanged {
			unchanged++
		} else {
			unchanged = 0
		}
		if unchanged == 3 {
			break
		}
	}
	if best == nil {
		return nil, false, errors.New("no C to try: the start is above the largest C")
	}
	return best, c > maxC && maxC > start, nil
}

// MaxSearchC and MaxSearchCRegression are where LIBLINEAR's -C stops
// doubling C: for classification, and for -s 11.
const (
	MaxSearchC           = 1024
	MaxSearchCRegression = 1 << 20
)

// SearchCP is LIBLINEAR's -C for a regression: for each p of PGrid,
// largest first, SearchC from startC (when positive) or from p's StartC,
// each p's folds starting cold. step sees every C's result and maxed
// each p whose search passed the largest C; best is the lowest mean
// squared error's, the first of equals.
func SearchCP(b objective.Backend, cfg Config, folds int, startC, startP float64, step func(*CV), maxed func(p float64)) (*CV, error) {
	metas := b.Meta()
	var best *CV
	for _, p := range PGrid(metas, startP) {
		cfg.Epsilon = p
		start := startC
		if start <= 0 {
			start = StartC(metas, cfg.Bias, cfg.Loss, p)
		}
		start = min(start, MaxSearchCRegression)
		cv, maxReached, err := SearchC(b, cfg, folds, start, MaxSearchCRegression, step)
		if err != nil {
			return nil, err
		}
		if maxReached && maxed != nil {
			maxed(p)
		}
		if best == nil || cv.better(best) {
			best = cv
		}
	}
	if best == nil {
		return nil, errors.New("no p to try")
	}
	return best, nil
}

// pSteps is how many values of p LIBLINEAR's search tries.
const pSteps = 20

// PGrid is the p values LIBLINEAR's -C tries for a regression, largest
// first: i max|y|/20 for i = 19 down to 0, or from the largest at most
// startP when that is positive (the user's -p).
func PGrid(metas []shard.Meta, startP float64) []float64 {
	maxP := 0.0
	for _, m := range metas {
		for _, y := range m.Labels {
			maxP = max(maxP, math.Abs(y))
		}
	}
	i := pSteps - 1
	if startP > 0 && maxP > 0 {
		i = min(int(startP/(maxP/pSteps)), i)
	}
	var ps []float64
	for ; i >= 0; i-- {
		ps = append(ps, float64(i)*maxP/pSteps)
	}
	return ps
}

// StartC is LIBLINEAR's first C for the search: the largest power of two
// at most 1/(2 m max_i ||x_i||^2) (for logistic regression 1/(m max_i
// ||x_i||^2)), the bias feature included, below which every C gives the
// same predictions. For a regression at width p it is 0.01 L / (8 S^2
// max_i ||x_i||^2), with S the sum of |y_i| and L that of max(|y_i|-p,
// 0)^2, the largest C at which w stays near zero.
func StartC(metas []shard.Meta, bias float64, loss shard.Loss, p float64) float64 {
	rows, maxSq := 0, 0.0
	for _, m := range metas {
		rows += m.Rows
		maxSq = max(maxSq, m.MaxNormSq)
	}
	if bias >= 0 {
		maxSq += float64(bias * bias)
	}
	if rows == 0 || maxSq == 0 {
		return 1
	}
	var minC float64
	switch loss {
	case shard.Logistic:
		minC = 1 / (float64(rows) * maxSq)
	case shard.SquaredEpsilon:
		minC = regressionStartC(metas, maxSq, p)
	default:
		minC = 1 / (2 * float64(rows) * maxSq)
	}
	// log/log as LIBLINEAR's, not Log2: a power of two must floor alike.
	return math.Pow(2, math.Floor(math.Log(minC)/math.Log(2)))
}

// regressionStartC is StartC's bound for -s 11 before its rounding down.
func regressionStartC(metas []shard.Meta, maxSq, p float64) float64 {
	const delta = 0.1
	sumY, loss := 0.0, 0.0
	for _, m := range metas {
		for k, y := range m.Labels {
			n := float64(m.LabelCount[k])
			sumY += float64(n * math.Abs(y)) // products rounded apart: no fused multiply-add on arm64
			d := max(math.Abs(y)-p, 0)
			loss += float64(n * float64(d*d))
		}
	}
	if loss == 0 {
		return math.Inf(1)
	}
	return float64(delta*delta*loss) / float64(float64(8*sumY*sumY)*maxSq)
}
