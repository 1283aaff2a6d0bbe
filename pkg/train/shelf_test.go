package train

import (
	"bytes"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/osgm-svm/osgm/pkg/libsvm"
)

// TestShelvedModel: weights over the live coordinates, some problems on
// a shelf, write the bytes of the model laid out in full, over several
// of the shelf's blocks, and Full lays them out bit for bit.
func TestShelvedModel(t *testing.T) {
	const K, n = 3, 70000 // two shelved problems: more than one block
	rng := rand.New(rand.NewPCG(1, 2))
	for _, live := range []bool{false, true} {
		m := &libsvm.Model{Solver: libsvm.SolverL2LossSVC, Labels: []int{1, 2, 3}, NFeature: n, Bias: 1}
		ws := &Weights{Dim: m.Dim()}
		width := m.Dim()
		if live {
			for j := range m.Dim() {
				if j%7 != 3 {
					ws.Live = append(ws.Live, j)
				}
			}
			width = len(ws.Live)
		}
		for range K {
			w := make([]float64, width)
			for i := range w {
				w[i] = rng.NormFloat64() * 1e3
			}
			ws.W = append(ws.W, w)
		}
		full, err := (&Weights{W: slices.Clone(ws.W), Live: ws.Live, Dim: m.Dim()}).Full()
		if err != nil {
			t.Fatal(err)
		}
		m.W = full
		var want bytes.Buffer
		if err := m.Write(&want); err != nil {
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
			if err := shelf.Put(k, ws.W[k]); err != nil {
				t.Fatal(err)
			}
			ws.W[k] = nil
		}
		ws.Shelf = shelf
		var got bytes.Buffer
		if err := m.WriteWeights(&got, ws); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("live %v: the shelved weights wrote other bytes than the full model", live)
		}
		back, err := ws.Full()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(back, full, slices.Equal[[]float64]) {
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
	m := &libsvm.Model{Solver: libsvm.SolverL2LossSVC, Labels: []int{1, 2}, NFeature: 2, Bias: -1}
	ws := &Weights{W: [][]float64{nil}, Dim: 2}
	if err := m.WriteWeights(&bytes.Buffer{}, ws); err == nil {
		t.Error("Write of a shelved problem with no shelf")
	}
	if _, err := ws.Full(); err == nil {
		t.Error("Full of a shelved problem with no shelf")
	}
}
