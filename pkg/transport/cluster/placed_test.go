package cluster

import (
	"bytes"
	"reflect"
	"testing"

	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// TestPlacerTakesEachStateWhole: a placement's states come in chunks
// among another placement's records and end. Each state the Placer hands
// on is one the worker sent, whole: another placement's end drops none
// of its chunks, and the next state's never fill a gap in the last one.
func TestPlacerTakesEachStateWhole(t *testing.T) {
	state := func(evals int, b byte) *wire.Solving {
		return &wire.Solving{Snapshot: &osgm.Snapshot{Method: "newton", Evals: evals, States: [][]byte{bytes.Repeat([]byte{b}, 5000)}}}
	}
	first, second := state(101, 1), state(102, 2)
	chunks := func(kind wire.Kind, placement uint64, n uint32, m wire.SolveMessage) [][]byte {
		b, err := wire.EncodeSolve(m)
		if err != nil {
			t.Fatal(err)
		}
		var out [][]byte
		wire.Chunks(kind, 1, placement, n, b, 1000, func(c []byte) error {
			out = append(out, bytes.Clone(c))
			return nil
		})
		return out
	}
	s1, s2 := chunks(wire.KindSolving, 1, 7, first), chunks(wire.KindSolving, 1, 8, second)
	record := chunks(wire.KindSolving, 2, 30, &wire.Solving{Record: &osgm.Record{Evals: 5}})
	end := chunks(wire.KindSolved, 2, 31, &wire.Solved{Interrupted: true})
	for _, tc := range []struct {
		name string
		in   [][]byte
		want []*wire.Solving
	}{
		{"interleaved", cat(s1[:1], record, end, s1[1:], s2), []*wire.Solving{first, second}},
		{"first's head lost", cat(s1[1:], record, s2), []*wire.Solving{second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := &Placer{c: &Cluster{core: &clusterCore{}}, in: make(chan placerInput, 16), quit: make(chan struct{})}
			pl.c.core.bad.Log = zap.NewNop()
			for _, c := range tc.in {
				h, p, err := wire.DecodeChunk(c)
				if err != nil {
					t.Fatal(err)
				}
				pl.receive(h, p)
			}
			close(pl.in)
			var got []*wire.Solving
			for in := range pl.in {
				if m, ok := in.msg.(placerSolving); ok && m.m.Snapshot != nil {
					got = append(got, m.m)
				}
			}
			if !reflect.DeepEqual(got, tc.want) || len(pl.c.core.bad.Dropped()) != 0 {
				t.Fatalf("handed on %d states (%v dropped), want %d whole", len(got), pl.c.core.bad.Dropped(), len(tc.want))
			}
		})
	}
}

func cat(parts ...[][]byte) [][]byte {
	var out [][]byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
