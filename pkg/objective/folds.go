package objective

import (
	"fmt"

	"github.com/osgm-svm/osgm/pkg/shard"
)

// MaxFolds bounds -v: fold numbers are stored in 16 bits per row.
const MaxFolds = 1<<16 - 1

// Folds assigns each of m rows (in file order) a fold 1..n exactly as
// LIBLINEAR's cross_validation does: a Fisher-Yates shuffle driven by
// glibc's rand() from its default seed, then n consecutive blocks of the
// shuffled order. Matching it means `-v n` here and `liblinear-train -v n`
// hold out the same rows, so their accuracies can be compared directly.
func Folds(m, n int) ([]uint16, error) {
	if n < 2 || n > MaxFolds {
		return nil, fmt.Errorf("cross-validation needs 2 to %d folds, not %d", MaxFolds, n)
	}
	if m > 1<<31-1 {
		return nil, fmt.Errorf("cross-validation: %d rows is more than LIBLINEAR's folds can index", m)
	}
	n = min(n, m) // LIBLINEAR: more folds than rows is leave-one-out
	perm := make([]int32, m)
	for i := range perm {
		perm[i] = int32(i)
	}
	r := newGlibcRand()
	for i := range perm {
		j := i + int(r.next()%int32(m-i))
		perm[i], perm[j] = perm[j], perm[i]
	}
	fold := make([]uint16, m)
	for f := 0; f < n; f++ {
		begin, end := f*m/n, (f+1)*m/n
		for _, row := range perm[begin:end] {
			fold[row] = uint16(f + 1)
		}
	}
	return fold, nil
}

// glibcRand reproduces glibc's rand() (the TYPE_3 additive feedback
// generator) seeded with 1, which is what a C program gets without srand.
type glibcRand struct {
	r [34]int32
	i int
}

func newGlibcRand() *glibcRand {
	g := &glibcRand{}
	var r [344]int32
	r[0] = 1
	for i := 1; i < 31; i++ {
		// 16807 * r[i-1] mod (2^31 - 1), by Schrage's method as glibc does.
		hi, lo := int64(r[i-1])/127773, int64(r[i-1])%127773
		word := 16807*lo - 2836*hi
		if word < 0 {
			word += 2147483647
		}
		r[i] = int32(word)
	}
	for i := 31; i < 34; i++ {
		r[i] = r[i-31]
	}
	for i := 34; i < 344; i++ {
		r[i] = int32(uint32(r[i-31]) + uint32(r[i-3]))
	}
	copy(g.r[:], r[344-34:])
	return g
}

// next returns the next value in [0, 2^31).
func (g *glibcRand) next() int32 {
	// g.r holds the last 34 outputs of the recurrence, oldest first at g.i.
	a := g.r[(g.i+34-31)%34]
	b := g.r[(g.i+34-3)%34]
	v := int32(uint32(a) + uint32(b))
	g.r[g.i] = v
	g.i = (g.i + 1) % 34
	return int32(uint32(v) >> 1)
}

// checkFolds refuses a point that holds out a fold when some shard has no
// folds: evaluating it would silently count every row.
func checkFolds(shards []*shard.Shard, p *shard.Point) error {
	if p.Holdout <= 0 {
		return nil
	}
	for _, s := range shards {
		if s.Fold == nil {
			return fmt.Errorf("shard %d: fold %d held out but the shard has no folds", s.ID, p.Holdout)
		}
	}
	return nil
}
