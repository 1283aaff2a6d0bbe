package libsvm

import (
	"bufio"
	"errors"
	"io"
	"math"
	"strconv"
)

// Accuracy counts correct predictions the way liblinear-predict does,
// or for a regression its sums of predictions p and targets t.
type Accuracy struct {
	Correct, Total int
	Unknown        int // rows whose label is not one of the model's classes

	Regression              bool
	SqErr, P, T, PP, TT, PT float64 // sums of (p-t)^2, p, t, p^2, t^2, pt
}

// add counts a regression's prediction p of target t.
func (a *Accuracy) add(p, t float64) {
	a.Total++
	a.SqErr += float64((p - t) * (p - t))
	a.P += p
	a.T += t
	a.PP += float64(p * p)
	a.TT += float64(t * t)
	a.PT += float64(p * t)
}

// MSE and SCC are a regression's mean squared error and squared
// correlation coefficient, as liblinear-predict computes them.
func (a Accuracy) MSE() float64 { return a.SqErr / float64(a.Total) }

func (a Accuracy) SCC() float64 {
	n := float64(a.Total) // products rounded apart: no fused multiply-adds (any CPU, the same bits)
	num := float64(n*a.PT) - float64(a.P*a.T)
	return float64(num*num) / float64((float64(n*a.PP)-float64(a.P*a.P))*(float64(n*a.TT)-float64(a.T*a.T)))
}

// String formats like liblinear-predict: `Accuracy = 84.9946% (13838/16281)`,
// or for a regression its two lines.
func (a Accuracy) String() string {
	if a.Regression {
		return "Mean squared error = " + strconv.FormatFloat(a.MSE(), 'g', 6, 64) + " (regression)\n" +
			"Squared correlation coefficient = " + strconv.FormatFloat(a.SCC(), 'g', 6, 64) + " (regression)"
	}
	pct := 0.0
	if a.Total > 0 {
		pct = float64(float64(a.Correct) / float64(a.Total) * 100)
	}
	return "Accuracy = " + strconv.FormatFloat(pct, 'g', 6, 64) + "% (" +
		strconv.Itoa(a.Correct) + "/" + strconv.Itoa(a.Total) + ")"
}

// PredictAll predicts every row of r (LIBSVM text) with m, writing one label
// per line to out when it is not nil.
func PredictAll(r io.Reader, name string, m *Model, out io.Writer) (Accuracy, error) {
	return predictAll(r, name, m, out, false)
}

// ErrNotProbabilistic is liblinear-predict's refusal of -b 1 for a model
// that gives no probabilities.
var ErrNotProbabilistic = errors.New("probability output is only supported for logistic regression")

// PredictProbabilities is PredictAll writing, as liblinear-predict -b 1
// does, a header of the labels, then each row's label and its class
// probabilities (Probabilities), to 6 significant digits.
func PredictProbabilities(r io.Reader, name string, m *Model, out io.Writer) (Accuracy, error) {
	if !m.Probabilistic() {
		return Accuracy{}, ErrNotProbabilistic
	}
	return predictAll(r, name, m, out, true)
}

func predictAll(r io.Reader, name string, m *Model, out io.Writer, prob bool) (Accuracy, error) {
	var acc Accuracy
	rd := NewReader(r, name)
	bw := bufio.NewWriter(io.Discard)
	if out != nil {
		bw = bufio.NewWriter(out)
	}
	known := map[int]bool{}
	for _, l := range m.Labels {
		known[l] = true
	}
	buf := make([]byte, 0, 16)
	if prob {
		buf = append(buf, "labels"...)
		for _, l := range m.Labels {
			buf = strconv.AppendInt(append(buf, ' '), int64(l), 10)
		}
		bw.Write(append(buf, '\n'))
	}
	acc.Regression = m.Regression()
	var row Row
	var dec, probs []float64
	for {
		err := rd.Next(&row)
		if err == io.EOF {
			break
		}
		if err != nil {
			return acc, err
		}
		dec = m.Decision(row.Index, row.Value, dec)
		if acc.Regression {
			acc.add(dec[0], row.Label)
			bw.Write(append(strconv.AppendFloat(buf[:0], dec[0], 'g', 17, 64), '\n'))
			continue
		}
		pred := m.label(dec)
		acc.Total++
		if float64(pred) == row.Label {
			acc.Correct++
		}
		if row.Label != float64(int(row.Label)) || !known[int(row.Label)] {
			acc.Unknown++
		}
		buf = strconv.AppendInt(buf[:0], int64(pred), 10)
		if prob {
			probs = m.Probabilities(dec, probs)
			for _, p := range probs {
				buf = strconv.AppendFloat(append(buf, ' '), p, 'g', 6, 64)
			}
		}
		bw.Write(append(buf, '\n'))
	}
	return acc, bw.Flush()
}

// Probabilistic reports whether the model gives class probabilities:
// LIBLINEAR's logistic regression models.
func (m *Model) Probabilistic() bool {
	switch m.Solver {
	case "L2R_LR", "L2R_LR_DUAL", "L1R_LR":
		return true
	}
	return false
}

// Probabilities turns a row's decision values into its class
// probabilities, in the model's label order, as LIBLINEAR's
// predict_probability does: the logistic function of each value; with
// two classes the second is one minus the first, else they are
// normalised to sum to one.
func (m *Model) Probabilities(dec, out []float64) []float64 {
	out = append(out[:0], make([]float64, len(m.Labels))...)
	for k := range dec {
		out[k] = 1 / (1 + math.Exp(-dec[k]))
	}
	if len(m.Labels) == 2 {
		out[1] = 1 - out[0]
		return out
	}
	sum := 0.0
	for _, p := range out {
		sum += p
	}
	for k := range out {
		out[k] /= sum
	}
	return out
}
