// Memory: how many problems' method states the coordinator holds at
// once.

package train

import "fmt"

// batchSize is how many problems are minimised at a time (0: all), and
// whether memory decided it. One-vs-rest problems go in batches whose
// methods' state is at most what LIBLINEAR holds for the data (16 bytes
// a nonzero), or batchFloor: LIBLINEAR trains one class at a time, and
// all of a wide set's problems' L-BFGS states at once made our peak
// many times its own for no gain in time, as a batch's passes carry its
// problems alone. Where the methods' state is small
// beside the data, all the problems go in one batch, whose passes stream
// the rows once for all of them.
//
// The state's estimate may also take at most half of MaxBytes: passes'
// buffers and the collector's headroom need the rest (a run's peak can
// be nearly twice the estimate). Problems that do not fit in it go in
// batches that do, one at a time if need be; only a problem that does
// not fit in MaxBytes alone is refused.
func batchSize(cfg Config, features, dim, n, K, nnz int) (batch int, memoryBound bool, err error) {
	batch = cfg.batch
	if batch <= 0 {
		budget := max(16*int64(nnz), batchFloor)
		batch = int(max(budget/max(stateBytes(dim, n, 0, 1), 1), 1))
	}
	if need := StateBytes(dim, n, K); cfg.MaxBytes > 0 && need > cfg.MaxBytes/2 {
		fit := max(batchFitting(dim, n, K, cfg.MaxBytes/2), 1)
		if batchFitting(dim, n, K, cfg.MaxBytes) < 1 {
			return 0, false, fmt.Errorf("largest feature index %d (%d of them in the data) with %d problem(s) needs about %s for the model and the optimiser's state (%s with one problem at a time); only %s is available",
				features, n, K, human(need), human(stateBytes(dim, n, K, 1)), human(cfg.MaxBytes))
		}
		if batch > fit {
			batch, memoryBound = fit, true
		}
	}
	if batch >= K {
		return 0, false, nil
	}
	return batch, memoryBound, nil
}

// batchFloor is the methods' state a batch may always hold, whatever
// the data's size.
const batchFloor = 8 << 20

// The coordinator holds per problem at most methodVectors vectors of the
// methods' length (L-BFGS's 10 pairs and its iterate, gradient, direction
// and trial point, the passes' arguments and results) and fullVectors of
// a model's (the model, and the one it started from).
const (
	methodVectors = 30
	fullVectors   = 2
)

// StateBytes estimates the coordinator's memory for K problems of dim
// coordinates, n of which the methods work over.
func StateBytes(dim, n, K int) int64 { return stateBytes(dim, n, K, K) }

// stateBytes is StateBytes with the methods working on batch problems at
// a time, every problem's model held.
func stateBytes(dim, n, K, batch int) int64 {
	return 8 * (int64(K)*int64(dim)*fullVectors + int64(batch)*int64(n)*methodVectors)
}

// batchFitting is the largest batch for which stateBytes is at most max
// (0: not even one problem at a time).
func batchFitting(dim, n, K int, max int64) int {
	free := max - stateBytes(dim, n, K, 0)
	if free <= 0 {
		return 0
	}
	return int(min(free/stateBytes(dim, n, 0, 1), int64(K)))
}

func human(b int64) string {
	const unit = 1 << 10
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}
