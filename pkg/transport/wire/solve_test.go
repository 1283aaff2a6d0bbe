package wire

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/shard"
)

func solveSample() *Solve {
	return &Solve{Source: Source{Path: "/d/news20.t"}, Ranges: []input.Range{{ID: 0, Start: 0, End: 10}, {ID: 1, Start: 10, End: 20}},
		Order: []float64{1, -1}, Constants: objective.Constants{Rows: 9, Features: 3, Lambda: 1.0 / 9, Terms: shard.Terms{Bias: -1}, Live: true},
		K: 1, X0: []float64{0, math.SmallestNonzeroFloat64, -0.1}, Problem: osgm.Problem{Dim: 3, L: 2, Mu: 0.1, Diag: []float64{1, 2, 3}},
		Settings:  osgm.Settings{Options: osgm.Options{Method: "newton", MaxIter: 1000}, GradTol: []float64{1e-3}, F0: []float64{1}, G0: [][]float64{{1, 2, 3}}, Resume: &osgm.Snapshot{Method: "newton", Evals: 4, States: [][]byte{{1, 2}}}},
		Snapshots: true}
}

// TestSolveMessages: the solve messages decode to what was encoded, bit
// for bit.
func TestSolveMessages(t *testing.T) {
	m := solveSample()
	b, err := EncodeSolve(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeSolve(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("decoded %+v\nwant %+v", got, m)
	}
	pass := solveSample()
	pass.Pass = &osgm.Pass{Op: osgm.OpEvalDiag, Ks: []int{3}, X: [][]float64{{0, 1, 2}}, At: []uint64{7}}
	for _, v := range []SolveMessage{pass, &Solved{Pass: &osgm.Pass{F: []float64{1}, G: [][]float64{{1, 2}}, D: [][]float64{{3, 4}}}},
		&Solving{Record: &osgm.Record{Evals: 3, F: 1.5}}, &Solved{Result: &osgm.Result{X: [][]float64{{1}}, F: []float64{2}, GradNorm: []float64{3},
			Iters: []int{4}, Converged: []bool{true}, Stop: []osgm.Stop{osgm.Converged}}}} {
		b, err := EncodeSolve(v)
		if err != nil {
			t.Fatal(err)
		}
		var got any
		switch v.(type) {
		case *Solve:
			got, err = DecodeSolve(b)
		case *Solving:
			got, err = DecodeSolving(b)
		default:
			got, err = DecodeSolved(b)
		}
		if err != nil || !reflect.DeepEqual(got, v) {
			t.Fatalf("decoded %+v (%v), want %+v", got, err, v)
		}
	}
	odd := &osgm.Result{X: [][]float64{{1}}, F: []float64{2}, GradNorm: []float64{3}, Iters: []int{4}, Converged: []bool{true}, Stop: []osgm.Stop{9}}
	for _, bad := range []SolveMessage{&Solving{}, &Solved{}, &Solved{Result: &osgm.Result{}}, &Solved{Result: odd}} {
		b, _ := EncodeSolve(bad)
		if _, err := DecodeSolving(b); err == nil {
			if _, err := DecodeSolved(b); err == nil {
				t.Fatalf("accepted %+v", bad)
			}
		}
	}
}

// FuzzDecodeSolve: any bytes are refused or decode to a message whose
// shape the worker and the coordinator rely on, never a panic.
func FuzzDecodeSolve(f *testing.F) {
	for _, v := range []SolveMessage{solveSample(), &Solving{Record: &osgm.Record{Evals: 1}}, &Solved{Err: "x"}} {
		b, err := EncodeSolve(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := DecodeSolve(b); err == nil && (len(m.X0) != m.Problem.Dim || len(m.Ranges) == 0) {
			t.Fatalf("accepted a solve of %d coordinates for a problem of %d, over %d shards", len(m.X0), m.Problem.Dim, len(m.Ranges))
		}
		if m, err := DecodeSolving(b); err == nil && (m.Record == nil) == (m.Snapshot == nil) {
			t.Fatal("accepted progress with both or neither")
		}
		if m, err := DecodeSolved(b); err == nil && m.Result != nil {
			_ = m.Result.Stop[0].String() // a panic for an unknown stop
		}
	})
}

// TestTornSolvingRefused: two states of one placement sent under one
// key (two copies of it numbering alike), one's first chunks lost: the
// chunks put together are half of each, and decoding refuses them where
// the chunks' own CRCs pass. Dropping the placement's partials first
// leaves nothing of the first to mix in.
func TestTornSolvingRefused(t *testing.T) {
	state := func(b byte) []byte {
		enc, err := EncodeSolve(&Solving{Snapshot: &osgm.Snapshot{Method: "newton", Evals: 101, States: [][]byte{bytes.Repeat([]byte{b}, 5000)}}})
		if err != nil {
			t.Fatal(err)
		}
		return enc
	}
	older, newer := state(1), state(2)
	oc, nc := chunksOf(t, KindSolving, 4, 1, older, 1000), chunksOf(t, KindSolving, 4, 1, newer, 1000)
	add := func(a *Assembler, chunks [][]byte) (whole []byte, ok bool) {
		for _, c := range chunks {
			h, p, err := DecodeChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			if b, done := a.Add(h, p); done {
				whole, ok = b, true
			}
		}
		return whole, ok
	}
	var a Assembler
	add(&a, oc[len(oc)/2:]) // the older's first half lost
	whole, ok := add(&a, nc)
	if !ok {
		t.Fatal("nothing put together")
	}
	if _, err := DecodeSolving(whole); !errors.Is(err, ErrTorn) {
		t.Fatalf("decoding half of each gave %v, want ErrTorn", err)
	}
	var b Assembler
	add(&b, oc[len(oc)/2:])
	b.Drop(5)
	b.Drop(4)
	if whole, ok := add(&b, nc); !ok || !bytes.Equal(whole, newer) {
		t.Fatal("after Drop, the newer state did not come through whole")
	}
}
