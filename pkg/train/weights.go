package train

import "fmt"

// Weights are the trained problems' weights as the methods leave them:
// over the live coordinates alone (Live, increasing; nil: every one), the
// dead ones' weights being 0, and a problem's vector nil while it waits
// on the shelf. They write a model file a coordinate at a time
// (libsvm.Weights), reading the shelf a block at a time, so the model is
// never laid out in full for it; Full lays it out.
type Weights struct {
	W     [][]float64
	Live  []int
	Shelf Shelf // holds the problems whose W is nil
	Dim   int   // a full vector's length

	next   int         // with Live: the position in W of the next live coordinate
	lo, hi int         // the positions the block holds
	block  [][]float64 // positions lo to hi of the shelved problems
}

// shelfBlockBytes bounds what Coordinate holds of the shelved weights: a
// block of positions of every shelved problem, read together as the
// coordinates that need them come.
const shelfBlockBytes = 1 << 20

func (w *Weights) Problems() int { return len(w.W) }

// Coordinate gives coordinate j's weights, j going up by one from 0.
func (w *Weights) Coordinate(j int, dst []float64) error {
	if j == 0 {
		w.next, w.lo, w.hi = 0, 0, 0
	}
	at := j
	if w.Live != nil {
		if w.next == len(w.Live) || w.Live[w.next] != j {
			clear(dst) // a dead feature's weight
			return nil
		}
		at = w.next
		w.next++
	}
	for k, x := range w.W {
		if x != nil {
			dst[k] = x[at]
			continue
		}
		if at < w.lo || at >= w.hi {
			if err := w.read(at); err != nil {
				return err
			}
		}
		dst[k] = w.block[k][at-w.lo]
	}
	return nil
}

// width is the length of each vector of W.
func (w *Weights) width() int {
	if w.Live != nil {
		return len(w.Live)
	}
	return w.Dim
}

// read loads the block of the shelved problems that starts at position i.
func (w *Weights) read(i int) error {
	if w.Shelf == nil {
		return errShelved
	}
	if w.block == nil {
		w.block = make([][]float64, len(w.W))
	}
	shelved := 0
	for _, x := range w.W {
		if x == nil {
			shelved++
		}
	}
	size := max(1, shelfBlockBytes/(8*shelved))
	w.lo, w.hi = i, min(i+size, w.width())
	for k, x := range w.W {
		if x != nil {
			continue
		}
		if w.block[k] == nil {
			w.block[k] = make([]float64, size)
		}
		if err := w.Shelf.ReadWeights(k, w.lo, w.block[k][:w.hi-w.lo]); err != nil {
			return err
		}
	}
	return nil
}

// Full is every problem's weights over every coordinate, the shelved
// ones read back. Vectors already full are W's own.
func (w *Weights) Full() ([][]float64, error) {
	out := make([][]float64, len(w.W))
	for k, x := range w.W {
		if x == nil {
			if w.Shelf == nil {
				return nil, fmt.Errorf("problem %d: %w", k, errShelved)
			}
			x = make([]float64, w.width())
			if err := w.Shelf.ReadWeights(k, 0, x); err != nil {
				return nil, err
			}
		}
		if w.Live != nil {
			full := make([]float64, w.Dim)
			for i, j := range w.Live {
				full[j] = x[i]
			}
			x = full
		}
		out[k] = x
	}
	return out, nil
}
