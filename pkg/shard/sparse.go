package shard

import "unsafe"

// The inner loops of the binary kernel. The local column ids of a shard
// are below len(Cols) by construction (the builder assigns them), and the
// dense local vectors have exactly that length, so these loops read
// without bounds checks; four accumulators break the dependency chain of
// the sum. This is the hot path: it makes the Go kernel match the C
// reference (BENCHMARKS.md).

func at(p unsafe.Pointer, j uintptr) *float64 { return (*float64)(unsafe.Add(p, j*8)) }

// colID is a shard's local column id, as narrow as the shard's columns
// allow: 16 bits up to 65,536 columns, 24 (id24) up to 2^24, else 32.
type colID interface{ uint16 | id24 | uint32 }

// id24 is a three-byte column id, little end first: wide shards (gen1g's
// have about 173,000 columns) need more than 16 bits, rarely more than 24.
// Arrays of them have room for one more (cap > len), so that col can read
// any of them with one four-byte load on little-endian machines.
type id24 [3]byte

func newID24(j uint32) id24 { return id24{byte(j), byte(j >> 8), byte(j >> 16)} }

func (id id24) index() uint32 { return uint32(id[0]) | uint32(id[1])<<8 | uint32(id[2])<<16 }

// dotOnes is the sum over nonzeros [a, b) of w[col(q)], in the order the
// kernels' inline loops add them.
func (m colView[I]) dotOnes(wp unsafe.Pointer, a, b uintptr) float64 {
	var s0, s1, s2, s3 float64
	q := a
	for ; q+4 <= b; q += 4 {
		s0 += *at(wp, m.col(q))
		s1 += *at(wp, m.col(q+1))
		s2 += *at(wp, m.col(q+2))
		s3 += *at(wp, m.col(q+3))
	}
	for ; q < b; q++ {
		s0 += *at(wp, m.col(q))
	}
	return (s0 + s1) + (s2 + s3)
}

// rowView reads a shard's column ids and values through raw pointers.
// The kernels write their hottest loops (a row's margin and its gradient
// terms) inline with it instead of calling a function per row: on short
// rows a call per row, with the registers it spills, cost as much as the
// row's arithmetic. rowPtr's offsets are
// within idx and val by construction; newRowView checks the last one.
type rowView[V value, I colID] struct {
	colView[I]
	vp, tp unsafe.Pointer // values; the table, for codes
}

// colView is rowView for a matrix of ones: column ids only.
type colView[I colID] struct{ ip unsafe.Pointer }

func newColView[I colID](rowPtr []uint32, idx []I) colView[I] {
	var id I
	if n := int(rowPtr[len(rowPtr)-1]); n > len(idx) || unsafe.Sizeof(id) == 3 && n > 0 && n >= cap(idx) {
		panic("shard: row offsets beyond the matrix")
	}
	return colView[I]{unsafe.Pointer(unsafe.SliceData(idx))}
}

func newRowView[V value, I colID](rowPtr []uint32, idx []I, vs values[V]) rowView[V, I] {
	if int(rowPtr[len(rowPtr)-1]) > len(vs.val) {
		panic("shard: row offsets beyond the values")
	}
	if isCode[V]() && len(vs.table) == 0 && len(vs.val) > 0 {
		panic("shard: codes without a table")
	}
	return rowView[V, I]{newColView(rowPtr, idx), unsafe.Pointer(unsafe.SliceData(vs.val)), unsafe.Pointer(unsafe.SliceData(vs.table))}
}

// col and val are nonzero q's local column and value.
func (m colView[I]) col(q uintptr) uintptr {
	var id I
	p := unsafe.Add(m.ip, q*unsafe.Sizeof(id))
	// A constant in each instantiation, as in val.
	switch unsafe.Sizeof(id) {
	case 2:
		return uintptr(*(*uint16)(p))
	case 3:
		if littleEndian {
			return uintptr(*(*uint32)(p) & (1<<24 - 1))
		}
		return uintptr((*id24)(p).index())
	}
	return uintptr(*(*uint32)(p))
}

func (m rowView[V, I]) val(q uintptr) float64 {
	x := *(*V)(unsafe.Add(m.vp, q*unsafe.Sizeof(V(0))))
	// A constant in each instantiation, so no branch is left; written
	// here rather than as a call to isCode, whose inlined form still
	// loads (and nil-checks) a dictionary entry per value.
	if unsafe.Sizeof(x) <= 2 {
		return *at(m.tp, uintptr(x))
	}
	return float64(x)
}

// dot is the sum over nonzeros [a, b) of val(q) w[col(q)], in the order
// the kernels' inline loops add them.
func (m rowView[V, I]) dot(wp unsafe.Pointer, a, b uintptr) float64 {
	var s0, s1, s2, s3 float64
	q := a
	for ; q+4 <= b; q += 4 {
		s0 += float64(m.val(q) * *at(wp, m.col(q)))
		s1 += float64(m.val(q+1) * *at(wp, m.col(q+1)))
		s2 += float64(m.val(q+2) * *at(wp, m.col(q+2)))
		s3 += float64(m.val(q+3) * *at(wp, m.col(q+3)))
	}
	for ; q < b; q++ {
		s0 += float64(m.val(q) * *at(wp, m.col(q)))
	}
	return (s0 + s1) + (s2 + s3)
}

// value is how a shard stores a nonzero's value: as a number (float32,
// float64, or an int32 decimal mantissa), or as a code (uint8, uint16)
// into a table of the shard's distinct numbers.
type value interface {
	float32 | float64 | int32 | uint8 | uint16
}

// isCode reports whether V holds codes: the types of two bytes or less.
func isCode[V value]() bool { return unsafe.Sizeof(V(0)) <= 2 }

// values is a shard's values in one storage: value q is val[q], or
// table[val[q]] for codes, divided by scale (10^E for decimal mantissas,
// else 1). The builder gives codes below len(table).
type values[V value] struct {
	val   []V
	table []float64
	scale float64
}
