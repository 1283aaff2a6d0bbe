package osgm

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"reflect"
	"slices"
	"unsafe"

	"github.com/osgm-svm/osgm/internal/vec"
)

// stateful methods keep everything they need to continue in one struct of
// exported fields, which a checkpoint encodes whole. check says whether a
// state can continue a problem of n coordinates: its vectors' sizes,
// which a state that does not fit would index out of range at its first
// step, and the relations between its fields that every step keeps (for
// Newton, RZ = R·M⁻¹R), which a state put together from two moments
// breaks. A state that fails is neither saved nor resumed.
type stateful interface {
	state() any
	check(n int) error
}

func (m *osgm) state() any  { return &m.osgmState }
func (m *lbfgs) state() any { return &m.S }

func (m *osgm) check(n int) error {
	s := &m.osgmState
	vs := []field{{"X", s.X}, {"Gr", s.Gr}, {"XPrev", s.XPrev}, {"XH", s.XH}, {"GH", s.GH}, {"P", s.P}, {"Acc", s.Acc}, {"U", s.U}}
	if len(s.HV) != 0 { // osgm-g only
		vs = append(vs, field{"HV", s.HV})
	}
	if err := vectors(n, vs...); err != nil {
		return err
	}
	// AdaGrad's sums of squares only grow from 0.
	if j := slices.IndexFunc(s.Acc, func(a float64) bool { return !(a >= 0) }); j >= 0 {
		return fmt.Errorf("its Acc[%d] is %v, not a sum of squares", j, s.Acc[j])
	}
	if !(s.AccB >= 0) {
		return fmt.Errorf("its AccB is %v, not a sum of squares", s.AccB)
	}
	return nil
}

func (m *lbfgs) check(n int) error {
	s := &m.S
	if len(s.Hs) != m.mem || len(s.Hy) != m.mem || len(s.Rho) != m.mem || len(s.Alpha) != m.mem {
		return fmt.Errorf("a history of %d, %d, %d and %d entries for a memory of %d", len(s.Hs), len(s.Hy), len(s.Rho), len(s.Alpha), m.mem)
	}
	if s.Head < 0 || s.Head >= m.mem || s.Cnt < 0 || s.Cnt > m.mem {
		return fmt.Errorf("history head %d and count %d for a memory of %d", s.Head, s.Cnt, m.mem)
	}
	vs := []field{{"X", s.X}, {"G", s.G}, {"Dir", s.Dir}, {"XT", s.XT}}
	for i := range s.Hs {
		vs = append(vs, field{fmt.Sprintf("Hs[%d]", i), s.Hs[i]}, field{fmt.Sprintf("Hy[%d]", i), s.Hy[i]})
	}
	if err := vectors(n, vs...); err != nil {
		return err
	}
	// Each pair kept has Rho = 1/(s·y) > 0, and Gamma is the newest's
	// s·y / y·y: a pair whose s and y are of two iterations breaks both.
	for i := range s.Cnt {
		j := (s.Head - s.Cnt + i + m.mem) % m.mem
		sy := vec.Dot(s.Hs[j], s.Hy[j])
		if !(s.Rho[j] > 0) || !near(s.Rho[j]*sy, 1) {
			return fmt.Errorf("its Rho[%d] is %v, but 1/(Hs[%d]·Hy[%d]) is %v", j, s.Rho[j], j, j, 1/sy)
		}
		if i == s.Cnt-1 && !near(s.Gamma, sy/vec.Dot(s.Hy[j], s.Hy[j])) {
			return fmt.Errorf("its Gamma is %v, but the newest pair's s·y/y·y is %v", s.Gamma, sy/vec.Dot(s.Hy[j], s.Hy[j]))
		}
	}
	return nil
}

func (m *newton) check(n int) error {
	s := &m.S
	err := vectors(n, field{"X", s.X}, field{"G", s.G}, field{"M", s.M}, field{"Step", s.Step}, field{"R", s.R},
		field{"D", s.D}, field{"XT", s.XT})
	if err != nil {
		return err
	}
	if len(s.H) != 0 && (!m.full || len(s.H) != n*n) {
		return fmt.Errorf("a Hessian of %d entries for %d coordinates (newton-full: %v)", len(s.H), n, m.full)
	}
	if j := slices.IndexFunc(s.M, func(mj float64) bool { return !(mj > 0) || math.IsInf(mj, 1) }); j >= 0 {
		return fmt.Errorf("its M[%d] is %v, not a preconditioner's entry", j, s.M[j])
	}
	if s.Iter < 0 || s.Accepts < 0 || s.Accepts > s.Iter || s.CGSteps < 0 || !(s.Delta >= 0) {
		return fmt.Errorf("%d trials, %d accepted, %d CG steps, a trust region of %v", s.Iter, s.Accepts, s.CGSteps, s.Delta)
	}
	if !s.InCG || s.NeedDiag {
		return nil
	}
	// Within a solve every CG step moves Step, R, D and RZ together, and
	// keeps Step inside the trust region.
	rz := 0.0
	for j, r := range s.R {
		rz += r * r / s.M[j]
	}
	if !near(s.RZ, rz) {
		return fmt.Errorf("its RZ is %v, but R·M⁻¹R is %v: R and RZ are of different CG steps", s.RZ, rz)
	}
	if sn := m.mnorm(s.Step); !(sn <= s.Delta*(1+1e-9)) {
		return fmt.Errorf("its Step's M-norm is %v, outside the trust region's %v", sn, s.Delta)
	}
	return nil
}

// near reports whether a and b agree to 1e-9 relative: what is computed
// again in another order, not bit for bit.
func near(a, b float64) bool {
	return a == b || math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}

// field is a state's vector and its field's name, for errors.
type field struct {
	name string
	v    []float64
}

// vectors checks that every vector has n entries.
func vectors(n int, vs ...field) error {
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
	States    [][]byte // one per problem (see encodeState)

	// In batches (Settings.Batch), the above are of the batch of Batch
	// problems from First, and Done holds the problems before it (a
	// Result, encoded as a state).
	Batch, First int
	Done         []byte

	// Side by side (Settings.Parallel) problems end in any order: Side is
	// set, Ended is a Result of every problem (encoded) where those that
	// had ended have a Stop, and the fields above are of the problems
	// under way, Running, RunEvals being each one's own passes. The rest
	// start afresh.
	Side     bool
	Ended    []byte
	Running  []int
	RunEvals []int
}

// saveMethod encodes m's state, for a problem of n coordinates, once it
// has passed its own checks: a checkpoint holds whole states or none.
func saveMethod(m Method, n int) ([]byte, error) {
	st, ok := m.(stateful)
	if !ok {
		return nil, ErrNoCheckpoint
	}
	if err := st.check(n); err != nil {
		return nil, fmt.Errorf("osgm: the method's state fails its checks, and is not saved: %w", err)
	}
	return encodeState(st.state())
}

// loadMethod replaces m's state, which Init sized for n coordinates, by
// the one b holds.
func loadMethod(m Method, n int, b []byte) error {
	st, ok := m.(stateful)
	if !ok {
		return ErrNoCheckpoint
	}
	if err := decodeState(b, st.state()); err != nil {
		return fmt.Errorf("osgm: method state: %w", err)
	}
	if err := st.check(n); err != nil {
		return fmt.Errorf("osgm: method state does not fit the problem, or fails its checks: %w", err)
	}
	return nil
}

// A state is encoded as its fields other than vectors (gob), the
// vectors' lengths, and the vectors' float64 bits, little-endian, in
// field order: gob writes a []float64 a number at a time into a buffer it
// grows as it goes, which for a state of hundreds of MB costs seconds of
// CPU and several times the state's memory. A length of -1
// stands for a nil vector (Newton's Hessian before it is held); a
// [][]float64 field gives its count, then its vectors' lengths. The
// CRC-32C of all of it ends the state: a state travels (from a worker
// that ran a placed problem, through a checkpoint file or an object
// store) as bytes that a fault could cut or splice, and the checkpoint
// file's own checksum only covers what the coordinator wrote.
var (
	vecType  = reflect.TypeFor[[]float64]()
	vecsType = reflect.TypeFor[[][]float64]()
)

// encodeState encodes *st, a struct of exported fields.
func encodeState(st any) ([]byte, error) {
	v := reflect.ValueOf(st).Elem()
	rest := reflect.New(v.Type()).Elem()
	rest.Set(v)
	var lens []int64
	var vecs [][]float64
	add := func(x []float64) {
		if x == nil {
			lens = append(lens, -1)
			return
		}
		lens = append(lens, int64(len(x)))
		vecs = append(vecs, x)
	}
	floats := 0
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Type() {
		case vecType:
			add(f.Interface().([]float64))
		case vecsType:
			xs := f.Interface().([][]float64)
			if xs == nil {
				lens = append(lens, -1)
			} else {
				lens = append(lens, int64(len(xs)))
				for _, x := range xs {
					add(x)
				}
			}
		default:
			continue
		}
		rest.Field(i).SetZero()
	}
	var g bytes.Buffer
	if err := gob.NewEncoder(&g).Encode(rest.Interface()); err != nil {
		return nil, err
	}
	for _, x := range vecs {
		floats += len(x)
	}
	out := make([]byte, 0, 2*binary.MaxVarintLen64+g.Len()+binary.MaxVarintLen64*len(lens)+8*floats+crc32.Size)
	out = binary.AppendUvarint(out, uint64(g.Len()))
	out = append(out, g.Bytes()...)
	out = binary.AppendUvarint(out, uint64(len(lens)))
	for _, l := range lens {
		out = binary.AppendVarint(out, l)
	}
	for _, x := range vecs {
		out = appendFloats(out, x)
	}
	return binary.LittleEndian.AppendUint32(out, crc32.Checksum(out, castagnoli)), nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errStateSum is a state whose bytes are not those encodeState wrote.
var errStateSum = errors.New("the state's checksum does not match its bytes (damaged, or put together from two states)")

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// appendFloats appends x's float64 bits, little-endian: on a
// little-endian machine as one copy of x's memory (news20.t's L-BFGS
// state, 150 MB, took 70 ms a number at a time).
func appendFloats(out []byte, x []float64) []byte {
	if littleEndian && len(x) > 0 {
		return append(out, unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 8*len(x))...)
	}
	for _, f := range x {
		out = binary.LittleEndian.AppendUint64(out, math.Float64bits(f))
	}
	return out
}

// decodeState replaces *st by the state b encodes, once its checksum
// matches. Every length is checked against the bytes left before
// anything is allocated for it.
func decodeState(b []byte, st any) error {
	if err := stateSum(b); err != nil {
		return err
	}
	r := stateReader{b: b[:len(b)-crc32.Size]}
	restLen, ok := r.uvarint()
	if !ok || restLen > uint64(len(r.b)) {
		return errShortState
	}
	// gob leaves fields that were zero when saved untouched: start from
	// the zero state so they come back as zero.
	v := reflect.ValueOf(st).Elem()
	v.SetZero()
	if err := gob.NewDecoder(bytes.NewReader(r.b[:restLen])).Decode(st); err != nil {
		return err
	}
	r.b = r.b[restLen:]
	if err := r.readLengths(); err != nil {
		return err
	}
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Type() {
		case vecType:
			x, err := r.vector()
			if err != nil {
				return err
			}
			f.Set(reflect.ValueOf(x))
		case vecsType:
			xs, err := r.vectors()
			if err != nil {
				return err
			}
			if xs != nil {
				f.Set(reflect.ValueOf(xs))
			}
		}
	}
	if len(r.lens) != 0 || len(r.b) != 0 {
		return fmt.Errorf("%d lengths and %d bytes left over", len(r.lens), len(r.b))
	}
	return nil
}

var errShortState = errors.New("the state's bytes end early")

// stateSum checks the checksum that ends an encoded state.
func stateSum(b []byte) error {
	if len(b) < crc32.Size {
		return errShortState
	}
	body, sum := b[:len(b)-crc32.Size], b[len(b)-crc32.Size:]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(sum) {
		return errStateSum
	}
	return nil
}

// stateReader reads the vectors after a state's gob part: their lengths
// (-1: nil), then their values.
type stateReader struct {
	b    []byte
	lens []int64
}

func (r *stateReader) uvarint() (uint64, bool) {
	x, n := binary.Uvarint(r.b)
	if n <= 0 {
		return 0, false
	}
	r.b = r.b[n:]
	return x, true
}

func (r *stateReader) readLengths() error {
	nlens, ok := r.uvarint()
	if !ok || nlens > uint64(len(r.b)) { // a length takes a byte at least
		return errShortState
	}
	r.lens = make([]int64, nlens)
	for i := range r.lens {
		l, n := binary.Varint(r.b)
		if n <= 0 {
			return errShortState
		}
		r.lens[i], r.b = l, r.b[n:]
	}
	return nil
}

// next is the next length.
func (r *stateReader) next() (int64, error) {
	if len(r.lens) == 0 {
		return 0, errors.New("the state has more vectors than lengths")
	}
	l := r.lens[0]
	r.lens = r.lens[1:]
	if l < -1 {
		return 0, fmt.Errorf("a vector of length %d", l)
	}
	return l, nil
}

func (r *stateReader) vector() ([]float64, error) {
	l, err := r.next()
	if err != nil || l == -1 {
		return nil, err
	}
	if uint64(l) > uint64(len(r.b))/8 {
		return nil, errShortState
	}
	x := make([]float64, l)
	for j := range x {
		x[j] = math.Float64frombits(binary.LittleEndian.Uint64(r.b[8*j:]))
	}
	r.b = r.b[8*l:]
	return x, nil
}

// vectors is a [][]float64: its count, then each vector (nil: none).
func (r *stateReader) vectors() ([][]float64, error) {
	c, err := r.next()
	if err != nil || c == -1 {
		return nil, err
	}
	if uint64(c) > uint64(len(r.lens)) {
		return nil, errShortState
	}
	xs := make([][]float64, c)
	for j := range xs {
		if xs[j], err = r.vector(); err != nil {
			return nil, err
		}
	}
	return xs, nil
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
