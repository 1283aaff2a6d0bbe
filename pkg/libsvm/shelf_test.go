package libsvm

import (
	"bytes"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
)

// TestShelvedModel: a model whose problems wait on a shelf writes the
// bytes it writes from memory, over several of Write's blocks, with and
// without live coordinates, and Full reads them back bit for bit.
func TestShelvedModel(t *testing.T) {
	const K, n = 3, 70000 // two shelved problems: more than one block
	rng := rand.New(rand.NewPCG(1, 2))
	for _, live := range []bool{false, true} {
		m := &Model{Solver: SolverL2LossSVC, Labels: []int{1, 2, 3}, NFeature: n, Bias: 1}
		width := m.Dim()
		if live {
			for j := range m.Dim() {
				if j%7 != 3 {
					m.Live = append(m.Live, j)
				}
			}
			width = len(m.Live)
		}
		for range K {
			w := make([]float64, width)
			for i := range w {
				w[i] = rng.NormFloat64() * 1e3
			}
			m.W = append(m.W, w)
		}
		var want bytes.Buffer
		if err := m.Write(&want); err != nil {
			t.Fatal(err)
		}
		full := &Model{NFeature: n, Bias: 1, W: slices.Clone(m.W), Live: m.Live}
		if err := full.Full(); err != nil {
			t.Fatal(err)
		}

		dir := t.TempDir()
		shelf, err := NewShelf(dir)
		if err != nil {
			t.Fatal(err)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Fatalf("the shelf left %d names in its directory", len(ents))
		}
		for _, k := range []int{2, 0} {
			if err := shelf.Put(k, m.W[k]); err != nil {
				t.Fatal(err)
			}
			m.W[k] = nil
		}
		m.Shelved = shelf
		var got bytes.Buffer
		if err := m.Write(&got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("live %v: the shelved model wrote other bytes", live)
		}
		if err := m.Full(); err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(m.W, full.W, slices.Equal[[]float64]) {
			t.Fatalf("live %v: Full read back other weights", live)
		}
		shelf.Close()
	}
}

// TestShelfRefuses: lengths that do not fit the shelf, and a model
// whose weights are shelved nowhere, are errors, not panics.
func TestShelfRefuses(t *testing.T) {
	shelf, err := NewShelf(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer shelf.Close()
	if err := shelf.Put(0, make([]float64, 4)); err != nil {
		t.Fatal(err)
	}
	if err := shelf.Put(1, make([]float64, 5)); err == nil {
		t.Error("Put of another length taken")
	}
	if err := shelf.Get(0, make([]float64, 3)); err == nil {
		t.Error("Get of another length taken")
	}
	if err := shelf.ReadWeights(0, 2, make([]float64, 3)); err == nil {
		t.Error("ReadWeights past the end taken")
	}
	if err := shelf.Get(3, make([]float64, 4)); err == nil {
		t.Error("Get of a problem never put taken")
	}
	if _, err := NewShelf("/nonexistent/dir"); err == nil {
		t.Error("a shelf in a missing directory")
	}
	m := &Model{Solver: SolverL2LossSVC, Labels: []int{1, 2}, NFeature: 2, Bias: -1, W: [][]float64{nil}}
	if err := m.Write(&bytes.Buffer{}); err == nil {
		t.Error("Write of a shelved problem with no shelf")
	}
	if err := m.Full(); err == nil {
		t.Error("Full of a shelved problem with no shelf")
	}
}
