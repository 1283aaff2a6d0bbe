package train

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
)

// FileShelf is a file of equally long weight vectors, problem k's at k
// times their length: a Shelf. Train puts each problem there once it is
// finished, and the model file is written from it a block of
// coordinates at a time (Weights): a one-vs-rest model larger than the
// data need not stay in memory while the other classes train. The file
// has no name once created, so a run that dies leaves nothing behind.
type FileShelf struct {
	f   *os.File
	n   int // every vector's length, set by the first Put
	buf []byte
}

// NewShelf makes an empty shelf in dir (the model's: where the weights
// are going anyway).
func NewShelf(dir string) (*FileShelf, error) {
	f, err := os.CreateTemp(dir, ".osgm-weights-*")
	if err != nil {
		return nil, fmt.Errorf("shelf for finished weights: %w", err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("shelf for finished weights: %w", err)
	}
	return &FileShelf{f: f}, nil
}

// Put writes problem k's weights.
func (s *FileShelf) Put(k int, x []float64) error {
	if s.n == 0 {
		s.n = len(x)
	}
	if len(x) != s.n {
		return fmt.Errorf("shelf: problem %d has %d weights, the others %d", k, len(x), s.n)
	}
	b := s.bytes(len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	}
	_, err := s.f.WriteAt(b, s.offset(k, 0))
	return err
}

// Get reads problem k's weights into x.
func (s *FileShelf) Get(k int, x []float64) error {
	if len(x) != s.n {
		return fmt.Errorf("shelf: problem %d read as %d weights, it has %d", k, len(x), s.n)
	}
	return s.ReadWeights(k, 0, x)
}

// ReadWeights reads problem k's weights from position from on into dst.
func (s *FileShelf) ReadWeights(k, from int, dst []float64) error {
	if from < 0 || from+len(dst) > s.n {
		return fmt.Errorf("shelf: weights %d to %d of %d", from, from+len(dst), s.n)
	}
	b := s.bytes(len(dst))
	if _, err := s.f.ReadAt(b, s.offset(k, from)); err != nil {
		return fmt.Errorf("shelf: problem %d: %w", k, err)
	}
	for i := range dst {
		dst[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return nil
}

// Close frees the file's space.
func (s *FileShelf) Close() error {
	if s == nil {
		return nil
	}
	return s.f.Close()
}

func (s *FileShelf) offset(k, from int) int64 { return 8 * (int64(k)*int64(s.n) + int64(from)) }

func (s *FileShelf) bytes(n int) []byte {
	if cap(s.buf) < 8*n {
		s.buf = make([]byte, 8*n)
	}
	return s.buf[:8*n]
}

// errShelved is the complaint about a problem with neither weights nor
// a shelf.
var errShelved = errors.New("a problem's weights are shelved but the model has no shelf")
