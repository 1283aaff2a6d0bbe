package libsvm

import (
	"bufio"
	"io"
	"strconv"
)

// Accuracy counts correct predictions the way liblinear-predict does.
type Accuracy struct {
	Correct, Total int
	Unknown        int // rows whose label is not one of the model's classes
}

// String formats like liblinear-predict: `Accuracy = 84.9946% (13838/16281)`.
func (a Accuracy) String() string {
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
	var acc Accuracy
	rd := NewReader(r, name)
	var bw *bufio.Writer
	if out != nil {
		bw = bufio.NewWriter(out)
	}
	known := map[int]bool{}
	for _, l := range m.Labels {
		known[l] = true
	}
	var row Row
	var scratch []float64
	buf := make([]byte, 0, 16)
	for {
		err := rd.Next(&row)
		if err == io.EOF {
			break
		}
		if err != nil {
			return acc, err
		}
		pred := m.Predict(row.Index, row.Value, scratch)
		acc.Total++
		if float64(pred) == row.Label {
			acc.Correct++
		}
		if row.Label != float64(int(row.Label)) || !known[int(row.Label)] {
			acc.Unknown++
		}
		if bw != nil {
			buf = strconv.AppendInt(buf[:0], int64(pred), 10)
			buf = append(buf, '\n')
			bw.Write(buf)
		}
	}
	if bw != nil {
		return acc, bw.Flush()
	}
	return acc, nil
}
