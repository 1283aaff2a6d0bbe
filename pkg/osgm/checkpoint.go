package osgm

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"reflect"
)

// stateful methods keep everything they need to continue in one struct of
// exported fields, which a checkpoint encodes whole.
type stateful interface{ state() any }

func (m *osgm) state() any  { return &m.osgmState }
func (m *lbfgs) state() any { return &m.S }

// ErrNoCheckpoint is returned for a method whose state cannot be saved.
var ErrNoCheckpoint = errors.New("osgm: this method cannot be checkpointed")

// Snapshot is the complete state of a Minimize run between two rounds:
// resuming from it continues bit for bit as if nothing had happened.
type Snapshot struct {
	Method    string
	Evals     int
	Iters     []int
	Converged []bool
	Stalled   []bool
	States    [][]byte // one per problem, gob-encoded
}

func saveMethod(m Method) ([]byte, error) {
	st, ok := m.(stateful)
	if !ok {
		return nil, ErrNoCheckpoint
	}
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(st.state()); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func loadMethod(m Method, b []byte) error {
	st, ok := m.(stateful)
	if !ok {
		return ErrNoCheckpoint
	}
	// gob leaves fields that were zero when saved untouched: start from
	// the zero state so they come back as zero.
	reflect.ValueOf(st.state()).Elem().SetZero()
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(st.state()); err != nil {
		return fmt.Errorf("osgm: method state: %w", err)
	}
	return nil
}

// Checkpointable reports whether the named method can be checkpointed.
func Checkpointable(name string) bool {
	if name == "" || name == Auto {
		return Checkpointable(Choose(name, 1, Shape{})) && Checkpointable(Choose(name, 1, Shape{Dim: 1, NNZ: 1})) && Checkpointable(Choose(name, 2, Shape{}))
	}
	m, err := New(name, Problem{}, Params{})
	if err != nil {
		return false
	}
	_, ok := m.(stateful)
	return ok
}
