package shard

import "unsafe"

// The inner loops of the binary kernel. The local column ids of a shard
// are below len(Cols) by construction (the builder assigns them), and the
// dense local vectors have exactly that length, so these loops read
// without bounds checks; four accumulators break the dependency chain of
// the sum. This is the hot path: it makes the Go kernel match the C
// reference (BENCHMARKS.md).

func at(p unsafe.Pointer, j uintptr) *float64 { return (*float64)(unsafe.Add(p, j*8)) }

// colID is a shard's local column id: 16 bits when the shard has at most
// 65,536 columns (2 bytes per nonzero instead of 4), else 32.
type colID interface{ uint16 | uint32 }

// dotOnes is sum_q w[idx[q]].
func dotOnes[I colID](w []float64, idx []I) float64 {
	p := unsafe.Pointer(unsafe.SliceData(w))
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(idx); i += 4 {
		q := idx[i : i+4 : i+4]
		s0 += *at(p, uintptr(q[0]))
		s1 += *at(p, uintptr(q[1]))
		s2 += *at(p, uintptr(q[2]))
		s3 += *at(p, uintptr(q[3]))
	}
	for ; i < len(idx); i++ {
		s0 += *at(p, uintptr(idx[i]))
	}
	return (s0 + s1) + (s2 + s3)
}

// dot is sum_q val[q] w[idx[q]]; len(val) == len(idx).
func dot[V float32 | float64 | int32, I colID](w []float64, idx []I, val []V) float64 {
	p := unsafe.Pointer(unsafe.SliceData(w))
	val = val[:len(idx)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(idx); i += 4 {
		q := idx[i : i+4 : i+4]
		v := val[i : i+4 : i+4]
		s0 += float64(v[0]) * *at(p, uintptr(q[0]))
		s1 += float64(v[1]) * *at(p, uintptr(q[1]))
		s2 += float64(v[2]) * *at(p, uintptr(q[2]))
		s3 += float64(v[3]) * *at(p, uintptr(q[3]))
	}
	for ; i < len(idx); i++ {
		s0 += float64(val[i]) * *at(p, uintptr(idx[i]))
	}
	return (s0 + s1) + (s2 + s3)
}

// addOnes is g[idx[q]] += c.
func addOnes[I colID](g []float64, idx []I, c float64) {
	p := unsafe.Pointer(unsafe.SliceData(g))
	for _, j := range idx {
		*at(p, uintptr(j)) += c
	}
}

// axpy is g[idx[q]] += c val[q].
func axpy[V float32 | float64 | int32, I colID](g []float64, idx []I, val []V, c float64) {
	p := unsafe.Pointer(unsafe.SliceData(g))
	val = val[:len(idx)]
	for q, j := range idx {
		*at(p, uintptr(j)) += c * float64(val[q])
	}
}

// rowView reads a shard's column ids and values through raw pointers.
// The kernels write their hottest loops (a row's margin and its gradient
// terms) inline with it instead of calling dot and axpy: on short rows
// (ijcnn1's 13 values, a9a's 14 ones) a call per row, with the registers
// it spills, cost as much as the row's arithmetic. rowPtr's offsets are
// within idx and val by construction; newRowView checks the last one.
type rowView[V float32 | float64 | int32, I colID] struct {
	colView[I]
	vp unsafe.Pointer
}

// colView is rowView for a matrix of ones: column ids only.
type colView[I colID] struct{ ip unsafe.Pointer }

func newColView[I colID](rowPtr []uint32, idx []I) colView[I] {
	if int(rowPtr[len(rowPtr)-1]) > len(idx) {
		panic("shard: row offsets beyond the matrix")
	}
	return colView[I]{unsafe.Pointer(unsafe.SliceData(idx))}
}

func newRowView[V float32 | float64 | int32, I colID](rowPtr []uint32, idx []I, val []V) rowView[V, I] {
	if int(rowPtr[len(rowPtr)-1]) > len(val) {
		panic("shard: row offsets beyond the values")
	}
	return rowView[V, I]{newColView(rowPtr, idx), unsafe.Pointer(unsafe.SliceData(val))}
}

// col and val are nonzero q's local column and value.
func (m colView[I]) col(q uintptr) uintptr {
	return uintptr(*(*I)(unsafe.Add(m.ip, q*unsafe.Sizeof(I(0)))))
}

func (m rowView[V, I]) val(q uintptr) float64 {
	return float64(*(*V)(unsafe.Add(m.vp, q*unsafe.Sizeof(V(0)))))
}
