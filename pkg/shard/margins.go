package shard

// rowMargins writes each row's a·w into z (wl gathered, one problem, no
// bias), summed as m.dot sums: the kernels' margins to the bit.
func (s *Shard) rowMargins(wl, z []float64) { s.kernels().margins(s, wl, z) }

// Tally counts, per class, the rows and the rows whose predicted class
// (LIBLINEAR's rule) is their class. With p.Holdout set it counts only
// that fold's rows: the held-out accuracy of cross-validation.
type Tally struct {
	Rows, Correct []int
	// Sums, for a regression (whose Rows has one entry, and Correct
	// none counted), are its predictions p's against its targets t:
	// the sums of (p-t)^2, p, t, p^2, t^2 and pt, in TallySums' order.
	Sums []float64
}

// TallySums is the number of a regression tally's sums.
const TallySums = 6

// MSE and SCC are a regression tally's mean squared error and squared
// correlation coefficient, as LIBLINEAR computes them.
func (a *Tally) MSE() float64 { return a.Sums[0] / float64(a.Rows[0]) }

func (a *Tally) SCC() float64 {
	n, s := float64(a.Rows[0]), a.Sums // products rounded apart, as everywhere
	num := float64(n*s[5]) - float64(s[1]*s[2])
	return float64(num*num) / float64((float64(n*s[3])-float64(s[1]*s[1]))*(float64(n*s[4])-float64(s[2]*s[2])))
}

// Add adds t's counts to a tally of the same classes.
func (a *Tally) Add(t Tally) {
	if a.Rows == nil {
		a.Rows, a.Correct = make([]int, len(t.Rows)), make([]int, len(t.Rows))
	}
	for c := range t.Rows {
		a.Rows[c] += t.Rows[c]
		a.Correct[c] += t.Correct[c]
	}
	if t.Sums != nil {
		if a.Sums == nil {
			a.Sums = make([]float64, len(t.Sums))
		}
		for i, v := range t.Sums {
			a.Sums[i] += v
		}
	}
}

// Total is the number of rows counted and of those predicted correctly.
func (a *Tally) Total() (rows, correct int) {
	for c := range a.Rows {
		rows += a.Rows[c]
		correct += a.Correct[c]
	}
	return rows, correct
}

// Tally counts the shard's rows and correct predictions at p, by class
// (SetClasses fixes the classes), in sc's memory: a tally over a wide
// file's shards gathers a point's worth of weights for each, which
// fresh scratch made garbage enough to raise a run's peak at its end.
func (s *Shard) Tally(p *Point, sc *Scratch) Tally {
	if p.Loss.Regression() {
		return s.regressionTally(p, sc)
	}
	K, classes := p.K(), s.classes
	t := Tally{Rows: make([]int, classes), Correct: make([]int, classes)}
	wl := s.gather(p, sc)
	z := make([]float64, K)
	sel := s.rowsFor(p, 0)
	read := s.kernels().reader(s)
	var zs []float64 // one problem: every row's margin from the kernels' loops
	if K == 1 {
		zs = make([]float64, s.Rows())
		s.rowMargins(wl, zs)
	}
	for i := 0; i < s.Rows(); i++ {
		if p.Holdout > 0 && !sel.skip(i) {
			continue
		}
		if K == 1 {
			z[0] = zs[i]
		} else {
			clear(z)
			cols, nums := s.rowInto(read, i, sc)
			for q, j := range cols {
				x := nums[q]
				if s.Values == Decimal {
					x /= s.Scale
				}
				for k := range K {
					z[k] += float64(x * wl[int(j)*K+k])
				}
			}
		}
		addBias(p, z)
		pred := int32(0)
		if K == 1 {
			if z[0] <= 0 {
				pred = 1
			}
		} else {
			for k := 1; k < K; k++ {
				if z[k] > z[pred] {
					pred = int32(k)
				}
			}
		}
		c := s.Class[i]
		if c < 0 || int(c) >= classes {
			continue // a label outside the order: counted nowhere
		}
		t.Rows[c]++
		if pred == c {
			t.Correct[c]++
		}
	}
	return t
}

// regressionTally is Tally for a regression: its rows (the held-out
// fold's with p.Holdout), and the sums of their predictions against
// their targets.
func (s *Shard) regressionTally(p *Point, sc *Scratch) Tally {
	t := Tally{Rows: []int{0}, Correct: []int{0}, Sums: make([]float64, TallySums)}
	z := make([]float64, s.Rows())
	s.rowMargins(s.gather(p, sc), z)
	sel := s.rowsFor(p, 0)
	for i, pred := range z {
		if p.Holdout > 0 && !sel.skip(i) {
			continue
		}
		if p.Bias >= 0 {
			pred += float64(p.Bias * p.WBias[0])
		}
		y := s.Labels[s.LabelOf[i]]
		t.Rows[0]++
		for k, v := range [TallySums]float64{(pred - y) * (pred - y), pred, y, pred * pred, y * y, pred * y} {
			t.Sums[k] += v
		}
	}
	return t
}
