package objective

import (
	"math/bits"

	"github.com/osgm-svm/osgm/pkg/shard"
)

// A feature that no row holds enters the objective through the
// regulariser alone: its weight's optimum is exactly 0, where every method
// started from 0 leaves it. Such coordinates need not be optimised over
// nor sent to workers (37% of news20.t's 62,060 features never occur).
// Below an eighth of dead coordinates what leaving them out saves (that
// share of the optimiser's vector work and of the points' bytes) is small
// against what it costs: a second column map for every shard on the
// workers (2 bytes a column) and a bitmap in every point.
const minDeadShare = 8

// LiveBits marks the coordinates of a problem vector of length dim
// (features, then the bias when dim > features) that some shard's column
// holds, the bias always; nil when fewer than an eighth are dead.
func LiveBits(metas []shard.Meta, features, dim int) []uint64 {
	b := make([]uint64, (dim+63)/64)
	for _, m := range metas {
		for c := range m.Cols.All() {
			b[c/64] |= 1 << (c % 64)
		}
	}
	for j := features; j < dim; j++ {
		b[j/64] |= 1 << (j % 64)
	}
	n := 0
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	if (dim-n)*minDeadShare < dim {
		return nil
	}
	return b
}
