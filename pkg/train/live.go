package train

import "github.com/osgm-svm/osgm/pkg/shard"

// keepDead makes every problem keep all its coordinates: tests compare
// the two.
var keepDead = false

// liveCoords lists the coordinates of a problem vector of length dim that
// the data touches, ascending (the bias, last when bias >= 0, is always
// one), or nil when too few are dead to be worth leaving out (see
// shard.LiveBits). The methods work over those only: a dead feature's
// weight is exactly 0 at the optimum, and L-BFGS's vector work over
// news20.t's 37% of dead coordinates was a third of its run.
func liveCoords(metas []shard.Meta, features, dim int) []int {
	b := shard.LiveBits(metas, features, dim)
	if keepDead || b == nil {
		return nil
	}
	return shard.SetBits(b)
}

// liveObjective is the objective over the live coordinates of obj. It
// keeps full-length vectors to pass obj; their dead entries are never
// written, so they hold 0.
type liveObjective struct {
	obj  *timedObjective
	live []int
	dim  int
	// Full-length buffers, one set per argument, a vector per problem.
	x, v, out, out2 [][]float64
	h               [][]float64
}

func newLiveObjective(obj *timedObjective, live []int) *liveObjective {
	return &liveObjective{obj: obj, live: live, dim: obj.Dim()}
}

// full returns n full-length vectors from buf.
func (l *liveObjective) full(buf *[][]float64, n int) [][]float64 {
	for len(*buf) < n {
		*buf = append(*buf, make([]float64, l.dim))
	}
	return (*buf)[:n]
}

// expand writes the live vectors xs into full ones from buf.
func (l *liveObjective) expand(buf *[][]float64, xs [][]float64) [][]float64 {
	out := l.full(buf, len(xs))
	for k, x := range xs {
		expandTo(out[k], x, l.live)
	}
	return out
}

func expandTo(dst, src []float64, live []int) {
	for i, j := range live {
		dst[j] = src[i]
	}
}

// gathered is xs's live coordinates, in new vectors.
func gathered(xs [][]float64, live []int) [][]float64 {
	out := make([][]float64, len(xs))
	for k := range out {
		out[k] = make([]float64, len(live))
	}
	gather(out, xs, live)
	return out
}

func gather(dst [][]float64, src [][]float64, live []int) {
	for k, d := range dst {
		s := src[k]
		for i, j := range live {
			d[i] = s[j]
		}
	}
}

func (l *liveObjective) Eval(x [][]float64, f []float64, g [][]float64) error {
	return l.EvalSome(nil, x, f, g)
}

func (l *liveObjective) EvalSome(ks []int, x [][]float64, f []float64, g [][]float64) error {
	fg := l.full(&l.out, len(g))
	if err := l.obj.EvalSome(ks, l.expand(&l.x, x), f, fg); err != nil {
		return err
	}
	gather(g, fg, l.live)
	return nil
}

func (l *liveObjective) HessVec(x, v, hv [][]float64) error {
	return l.HessVecSome(nil, x, v, hv)
}

func (l *liveObjective) HessVecSome(ks []int, x, v, hv [][]float64) error {
	fhv := l.full(&l.out, len(hv))
	if err := l.obj.HessVecSome(ks, l.expand(&l.x, x), l.expand(&l.v, v), fhv); err != nil {
		return err
	}
	gather(hv, fhv, l.live)
	return nil
}

func (l *liveObjective) EvalDiagSome(ks []int, x [][]float64, f []float64, g, d [][]float64) error {
	fg, fd := l.full(&l.out, len(g)), l.full(&l.out2, len(d))
	if err := l.obj.EvalDiagSome(ks, l.expand(&l.x, x), f, fg, fd); err != nil {
		return err
	}
	gather(g, fg, l.live)
	gather(d, fd, l.live)
	return nil
}

// EvalHessSome gathers the live rows and columns of the full Hessian (one
// problem: see shard.Objective.EvalHessSome).
func (l *liveObjective) EvalHessSome(ks []int, x [][]float64, f []float64, g, h [][]float64) error {
	fg := l.full(&l.out, len(g))
	if len(l.h) == 0 {
		l.h = [][]float64{make([]float64, l.dim*l.dim)}
	}
	if err := l.obj.EvalHessSome(ks, l.expand(&l.x, x), f, fg, l.h); err != nil {
		return err
	}
	gather(g, fg, l.live)
	n := len(l.live)
	for a, ja := range l.live {
		row := l.h[0][ja*l.dim:]
		for b, jb := range l.live {
			h[0][a*n+b] = row[jb]
		}
	}
	return nil
}
