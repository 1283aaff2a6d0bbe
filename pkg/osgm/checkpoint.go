package osgm

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"reflect"
	"slices"
)

// stateful methods keep everything they need to continue in one struct of
// exported fields, which a checkpoint encodes whole. fits says whether a
// state decoded from one can continue a problem of n coordinates: a state
// that does not would index out of range at its first step, so it is
// refused with an error instead.
type stateful interface {
	state() any
	fits(n int) error
}

func (m *osgm) state() any  { return &m.osgmState }
func (m *lbfgs) state() any { return &m.S }

func (m *osgm) fits(n int) error {
	s := &m.osgmState
	vs := []vec{{"X", s.X}, {"Gr", s.Gr}, {"XPrev", s.XPrev}, {"XH", s.XH}, {"GH", s.GH}, {"P", s.P}, {"Acc", s.Acc}, {"U", s.U}}
	if len(s.HV) != 0 { // osgm-g only
		vs = append(vs, vec{"HV", s.HV})
	}
	return vectors(n, vs...)
}

func (m *lbfgs) fits(n int) error {
	s := &m.S
	if len(s.Hs) != m.mem || len(s.Hy) != m.mem || len(s.Rho) != m.mem || len(s.Alpha) != m.mem {
		return fmt.Errorf("a history of %d, %d, %d and %d entries for a memory of %d", len(s.Hs), len(s.Hy), len(s.Rho), len(s.Alpha), m.mem)
	}
	if s.Head < 0 || s.Head >= m.mem || s.Cnt < 0 || s.Cnt > m.mem {
		return fmt.Errorf("history head %d and count %d for a memory of %d", s.Head, s.Cnt, m.mem)
	}
	vs := []vec{{"X", s.X}, {"G", s.G}, {"Dir", s.Dir}, {"XT", s.XT}}
	for i := range s.Hs {
		vs = append(vs, vec{fmt.Sprintf("Hs[%d]", i), s.Hs[i]}, vec{fmt.Sprintf("Hy[%d]", i), s.Hy[i]})
	}
	return vectors(n, vs...)
}

func (m *newton) fits(n int) error {
	s := &m.S
	err := vectors(n, vec{"X", s.X}, vec{"G", s.G}, vec{"M", s.M}, vec{"Step", s.Step}, vec{"R", s.R},
		vec{"D", s.D}, vec{"HD", s.HD}, vec{"Z", s.Z}, vec{"XT", s.XT})
	if err != nil {
		return err
	}
	if len(s.H) != 0 && (!m.full || len(s.H) != n*n) {
		return fmt.Errorf("a Hessian of %d entries for %d coordinates (newton-full: %v)", len(s.H), n, m.full)
	}
	return nil
}

// vec is a state's vector and its field's name, for errors.
type vec struct {
	name string
	v    []float64
}

// vectors checks that every vector has n entries.
func vectors(n int, vs ...vec) error {
	for _, v := range vs {
		if len(v.v) != n {
			return fmt.Errorf("%s has %d entries, the problem %d", v.name, len(v.v), n)
		}
	}
	return nil
}

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

// loadMethod replaces m's state, which Init sized for n coordinates, by
// the one b holds.
func loadMethod(m Method, n int, b []byte) error {
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
	if err := st.fits(n); err != nil {
		return fmt.Errorf("osgm: method state does not fit the problem: %w", err)
	}
	return nil
}

// fits says whether snapshot s can resume method for k problems.
func (s *Snapshot) fits(method string, k int) error {
	if s.Method != method {
		return fmt.Errorf("osgm: the snapshot is of %s, this run %s", s.Method, method)
	}
	if len(s.States) != k || len(s.Iters) != k || len(s.Converged) != k || len(s.Stalled) != k {
		return fmt.Errorf("osgm: the snapshot holds %d, %d, %d and %d entries for %d problems", len(s.States), len(s.Iters), len(s.Converged), len(s.Stalled), k)
	}
	if s.Evals < 0 || slices.ContainsFunc(s.Iters, func(i int) bool { return i < 0 }) {
		return errors.New("osgm: the snapshot counts negative passes or iterations")
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
