package main

import "testing"

func TestFinished(t *testing.T) {
	const gap = 1e-6
	runs := func(fs ...float64) []point {
		var out []point
		for _, f := range fs {
			out = append(out, point{f: f})
		}
		return out
	}
	for _, c := range []struct {
		name string
		runs []point
		best float64
		want bool
	}{
		{"one run", runs(100), 100, false},
		{"still moving", runs(101, 100), 100, false},
		{"settled at the best", runs(100.001, 100, 100), 100, true},
		{"unmoved once, short of the best (Newton's loose stops)", runs(105, 103, 103), 100, false},
		{"unmoved twice, short of the best (an iteration limit)", runs(103.5, 103, 103, 103), 100, true},
		{"moved within a tenth of the gap counts as unmoved", runs(103, 103*(1+5e-8), 103), 100, true},
	} {
		if got := finished(c.runs, c.best, gap); got != c.want {
			t.Errorf("%s: finished = %v, want %v", c.name, got, c.want)
		}
	}
}
