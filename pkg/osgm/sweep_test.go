package osgm

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"gonum.org/v1/gonum/floats"
)

func randVec(rng *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(7)-3))
	}
	return v
}

func sameBits(a, b []float64) bool {
	return slices.EqualFunc(a, b, func(x, y float64) bool { return math.Float64bits(x) == math.Float64bits(y) })
}

// TestSweepsMatchGonum: each fused sweep gives the bits of the gonum
// calls it replaces, at every length's tail. The order copied is that of
// gonum's amd64 assembly; elsewhere gonum adds up in another order.
func TestSweepsMatchGonum(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("gonum's summation order here is not its amd64 one")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 64, 1001} {
		a, c := rng.NormFloat64(), rng.NormFloat64()
		d, x, s := randVec(rng, n), randVec(rng, n), randVec(rng, n)

		want := make([]float64, n)
		copy(want, x)
		wantDot := floats.Dot(s, want)
		got := make([]float64, n)
		if dot := copyDot(got, x, s); !sameBits(got, want) || math.Float64bits(dot) != math.Float64bits(wantDot) {
			t.Fatalf("n=%d: copyDot %v, want %v", n, dot, wantDot)
		}

		want, got = slices.Clone(d), slices.Clone(d)
		floats.AddScaled(want, a, x)
		wantDot = floats.Dot(s, want)
		if dot := axpyDot(got, a, x, s); !sameBits(got, want) || math.Float64bits(dot) != math.Float64bits(wantDot) {
			t.Fatalf("n=%d: axpyDot %v, want %v", n, dot, wantDot)
		}

		want, got = slices.Clone(d), slices.Clone(d)
		floats.AddScaled(want, a, x)
		floats.Scale(c, want)
		wantDot = floats.Dot(s, want)
		if dot := axpyScaleDot(got, a, x, c, s); !sameBits(got, want) || math.Float64bits(dot) != math.Float64bits(wantDot) {
			t.Fatalf("n=%d: axpyScaleDot %v, want %v", n, dot, wantDot)
		}

		xt, gt, g := randVec(rng, n), randVec(rng, n), randVec(rng, n)
		wantS, wantY := make([]float64, n), make([]float64, n)
		floats.SubTo(wantS, xt, x)
		floats.SubTo(wantY, gt, g)
		wantSY, wantYY := floats.Dot(wantS, wantY), floats.Dot(wantY, wantY)
		gotS, gotY := make([]float64, n), make([]float64, n)
		sy, yy := pairDots(gotS, gotY, xt, x, gt, g)
		if !sameBits(gotS, wantS) || !sameBits(gotY, wantY) || !sameBits(g, gt) ||
			math.Float64bits(sy) != math.Float64bits(wantSY) || math.Float64bits(yy) != math.Float64bits(wantYY) {
			t.Fatalf("n=%d: pairDots %v %v, want %v %v", n, sy, yy, wantSY, wantYY)
		}
	}
}

// twoLoop is the recursion as Nocedal and Wright write it, one gonum call
// an operation: what startSearch's sweeps must reproduce to the bit.
func twoLoop(s *lbfgsState) (dir []float64, d0 float64) {
	dir = slices.Clone(s.G)
	k := len(s.Rho)
	alpha := make([]float64, k)
	for i := s.Cnt - 1; i >= 0; i-- {
		j := (s.Head - s.Cnt + i + k) % k
		alpha[j] = s.Rho[j] * floats.Dot(s.Hs[j], dir)
		floats.AddScaled(dir, -alpha[j], s.Hy[j])
	}
	if s.Cnt > 0 {
		j := (s.Head - 1 + k) % k
		floats.Scale(floats.Dot(s.Hs[j], s.Hy[j])/floats.Dot(s.Hy[j], s.Hy[j]), dir)
	}
	for i := 0; i < s.Cnt; i++ {
		j := (s.Head - s.Cnt + i + k) % k
		beta := s.Rho[j] * floats.Dot(s.Hy[j], dir)
		floats.AddScaled(dir, alpha[j]-beta, s.Hs[j])
	}
	floats.Scale(-1, dir)
	return dir, floats.Dot(s.G, dir)
}

// TestDirectionIsTheTwoLoopRecursion runs L-BFGS on a quadratic and, at
// every iteration (histories filling, full, wrapping round the ring),
// checks its search direction against twoLoop's, bit for bit on amd64.
func TestDirectionIsTheTwoLoopRecursion(t *testing.T) {
	const n = 23
	q := newQuadratic(rand.New(rand.NewPCG(9, 9)), n, 1, 1e3, true)
	m := newLBFGS(Problem{}, Params{Memory: 4}).(*lbfgs)
	x := make([][]float64, 1)
	x[0] = make([]float64, n)
	f, g := []float64{0}, [][]float64{make([]float64, n)}
	if err := q.Eval(x, f, g); err != nil {
		t.Fatal(err)
	}
	m.Init(x[0], f[0], g[0])
	checked := 0
	for it := 0; it < 60 && !m.S.Stalled; it++ {
		if m.S.Trials == 0 && m.S.Cnt > 0 {
			dir, d0 := twoLoop(&m.S)
			same := sameBits(m.S.Dir, dir) && math.Float64bits(m.S.D0) == math.Float64bits(d0)
			if runtime.GOARCH != "amd64" { // gonum adds up in another order
				same = floats.EqualApprox(m.S.Dir, dir, 1e-12*floats.Norm(dir, math.Inf(1)))
			}
			if !same {
				t.Fatalf("iteration %d (%d pairs from %d): the direction differs from the two-loop recursion's", it, m.S.Cnt, m.S.Head)
			}
			checked++
		}
		r := m.Next()
		x[0] = r.X
		if err := q.Eval(x, f, g); err != nil {
			t.Fatal(err)
		}
		m.Tell(Reply{F: f[0], G: g[0]})
	}
	if checked < 20 {
		t.Fatalf("only %d directions checked", checked)
	}

	// A pair of negative curvature with the history full is written over
	// the oldest pair's vectors and not kept: the oldest pair must be
	// gone too, so that every pair kept is still the one its Rho was made
	// from.
	if m.S.Cnt != 4 {
		t.Fatalf("%d pairs after the run, want a full history of 4", m.S.Cnt)
	}
	xt, gt := slices.Clone(m.S.X), slices.Clone(m.S.G)
	for i := range xt {
		xt[i] += 1e-3
		gt[i] -= 1e-3
	}
	copy(m.S.XT, xt)
	m.accept(Reply{F: m.S.F, G: gt})
	if m.S.Cnt != 3 {
		t.Fatalf("%d pairs kept after a pair of negative curvature, want 3", m.S.Cnt)
	}
	for i := 0; i < m.S.Cnt; i++ {
		j := (m.S.Head - m.S.Cnt + i + 4) % 4
		if rho := 1 / floats.Dot(m.S.Hs[j], m.S.Hy[j]); math.Abs(rho-m.S.Rho[j]) > 1e-9*math.Abs(rho) {
			t.Fatalf("pair %d: Rho %v, but its vectors give %v", i, m.S.Rho[j], rho)
		}
	}
}

// BenchmarkDirection times one search direction with a full history of
// 10 pairs over 39,128 coordinates (news20.t's live ones, a problem of
// 20): the fused sweeps against one gonum call an operation.
func BenchmarkDirection(b *testing.B) {
	const n, mem = 39128, 10
	rng := rand.New(rand.NewPCG(3, 3))
	m := newLBFGS(Problem{}, Params{Memory: mem}).(*lbfgs)
	m.Init(randVec(rng, n), 1, randVec(rng, n))
	s := &m.S
	for j := range mem {
		s.Hs[j], s.Hy[j] = randVec(rng, n), randVec(rng, n)
		for i := range s.Hy[j] {
			s.Hy[j][i] = math.Abs(s.Hy[j][i]) * math.Copysign(1, s.Hs[j][i]) // s·y > 0
		}
		s.Rho[j] = 1 / floats.Dot(s.Hs[j], s.Hy[j])
	}
	s.Head, s.Cnt, s.Gamma = 3, mem, 0.5
	b.Run("sweeps", func(b *testing.B) {
		for b.Loop() {
			s.Cnt = mem // a direction that is not a descent one resets it
			m.startSearch()
		}
	})
	b.Run("gonum-calls", func(b *testing.B) {
		for b.Loop() {
			twoLoop(s)
		}
	})
}
