package vec

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"gonum.org/v1/gonum/floats"
)

// TestGonumsAmd64Bits: on amd64, where gonum's floats runs its assembly,
// every function gives gonum's bits, for every length around the
// assembly's unrolling and for values of any scale, zeros among them:
// the models trained before this package are unchanged.
func TestGonumsAmd64Bits(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("gonum's assembly order is amd64's")
	}
	rng := rand.New(rand.NewPCG(4, 7))
	for n := range 70 {
		for trial := range 20 {
			x, y := make([]float64, n), make([]float64, n)
			for i := range x {
				x[i] = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(30)-15))
				y[i] = rng.NormFloat64()
				if rng.IntN(5) == 0 {
					x[i] = 0
				}
			}
			alpha := rng.NormFloat64()
			same := func(what string, got, want float64) {
				if math.Float64bits(got) != math.Float64bits(want) {
					t.Fatalf("n %d, trial %d: %s = %v, gonum's %v", n, trial, what, got, want)
				}
			}
			same("Dot", Dot(x, y), floats.Dot(x, y))
			same("Norm", Norm(x), floats.Norm(x, 2))
			same("Distance", Distance(x, y), floats.Distance(x, y, 2))
			a, b := append([]float64(nil), y...), append([]float64(nil), y...)
			AddScaled(a, alpha, x)
			floats.AddScaled(b, alpha, x)
			c, d := make([]float64, n), make([]float64, n)
			AddScaledTo(c, y, alpha, x)
			floats.AddScaledTo(d, y, alpha, x)
			for i := range a {
				same("AddScaled", a[i], b[i])
				same("AddScaledTo", c[i], d[i])
			}
		}
	}
}
