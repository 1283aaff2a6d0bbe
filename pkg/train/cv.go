package train

import (
	"errors"
	"math"

	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/shard"
)

// CV is the outcome of n-fold cross-validation at one C.
type CV struct {
	C      float64
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

// CrossValidate trains once per fold on the other folds' rows and
// predicts the fold's, as liblinear-train -v does, with the same folds
// (shard.Folds). warm, when not nil, holds a starting model per fold.
// The shards stay where they are: every fold is a mask on the same rows.
func CrossValidate(b shard.Backend, cfg Config, folds int, warm []*libsvm.Model) (*CV, error) {
	return crossValidate(b, cfg, folds, warm, false)
}

// crossValidate is CrossValidate; with release set it drops each warm
// start (warm[f-1] = nil) once its fold is trained, so that a search
// holds one fold's model more than a set, not two sets.
func crossValidate(b shard.Backend, cfg Config, folds int, warm []*libsvm.Model, release bool) (*CV, error) {
	if cfg.Resume != nil || cfg.Save != nil {
		return nil, errors.New("cross-validation does not checkpoint")
	}
	if err := b.SetFolds(folds); err != nil {
		return nil, err
	}
	rows := Summarize(b.Meta()).Rows
	folds = min(folds, rows) // leave-one-out, as shard.Folds numbers it
	out := &CV{C: cfg.C, Folds: folds, Models: make([]*libsvm.Model, folds), Unchanged: warm != nil}
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
// models the next C drops as it replaces them); best is the most
// accurate C's, without its models. maxReached reports a search that
// ran past maxC without stopping early, where LIBLINEAR warns.
func SearchC(b shard.Backend, cfg Config, folds int, start, maxC float64, step func(*CV)) (best *CV, maxReached bool, err error) {
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
		if best == nil || cv.Accuracy() > best.Accuracy() {
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

// StartC is LIBLINEAR's first C for the search: the largest power of two
// at most 1/(2 m max_i ||x_i||^2) (for logistic regression 1/(m max_i
// ||x_i||^2)), the bias feature included, below which every C gives the
// same predictions.
func StartC(metas []shard.Meta, bias float64, loss shard.Loss) float64 {
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
	scale := 2.0
	if loss == shard.Logistic {
		scale = 1
	}
	return math.Pow(2, math.Floor(math.Log2(1/(scale*float64(rows)*maxSq))))
}
