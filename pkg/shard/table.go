package shard

import (
	"slices"

	"github.com/osgm-svm/osgm/pkg/reduce"
)

// kernels are the passes over one storage: one width of column ids and
// one kind of values. A pass takes its shard's table (Shard.kernels), the
// one place that looks at which storage a shard has; the kernels are
// generic over the storage and never ask. A new storage is a row of the
// tables below, and a new pass a field here.
type kernels struct {
	// evalOne, diagOne and hessVecOne are the single-problem passes: a
	// binary problem, or with seq a lone one-vs-rest problem in the
	// multi-class loops' arithmetic (see Shard.binary).
	evalOne    func(s *Shard, r *rows, x vecs, seq bool) (loss, gb float64)
	diagOne    func(s *Shard, r *rows, x vecs, seq bool) [3]float64
	hessVecOne func(s *Shard, r *rows, x vecs, seq bool) float64
	// evalMany is Eval for several problems.
	evalMany func(s *Shard, p *Point, wl []float64, sc *Scratch, out *reduce.Partial)
	// margins writes each row's a·w into z (one problem, no bias).
	margins func(s *Shard, wl, z []float64)
	// reader is the shard's rowReader, made once a pass: a call a row
	// through it costs what the storage's switch a row did.
	reader func(s *Shard) rowReader
}

// rowReader appends nonzeros [a, b) to cols, mapped through global when
// it is not nil, and to vals as the kernels read them: mantissas and
// codes' numbers, before the scale. The passes that read a row more than
// once (the multi-class Hessian ones, newton-full's Hessian) decode it
// first, in one loop.
type rowReader func(a, b int, global []uint32, cols []int32, vals []float64) ([]int32, []float64)

// kernels is the shard's table: these two switches are the only ones on
// the storage.
func (s *Shard) kernels() *kernels {
	w := 2
	switch {
	case s.Idx16 != nil:
		w = 0
	case s.Idx24 != nil:
		w = 1
	}
	v := 5
	switch {
	case s.Values == Ones:
		v = 0
	case s.Code8 != nil:
		v = 1
	case s.Code16 != nil:
		v = 2
	case s.Val32 != nil:
		v = 3
	case s.Mant != nil:
		v = 4
	}
	return tables[w][v]
}

//go:generate go run ./internal/kernelgen

// tables are the kernels of every storage: by the width of the column
// ids (16, 24, 32 bits), then by the values (ones, 1- and 2-byte codes,
// float32, decimal mantissas, float64), as Shard.kernels numbers them.
var tables = [3][6]*kernels{
	widthTables[uint16, cols16](),
	widthTables[id24, cols24](),
	widthTables[uint32, cols32](),
}

func widthTables[I colID, C idsIn[I]]() [6]*kernels {
	return [6]*kernels{
		onesKernels[I, C](),
		valueKernels[I, uint8, C, codes8](),
		valueKernels[I, uint16, C, codes16](),
		valueKernels[I, float32, C, floats32](),
		valueKernels[I, int32, C, mants](),
		valueKernels[I, float64, C, floats64](),
	}
}

// The storage as type arguments: each type reaches one of a shard's
// arrays, so that a table's kernels are instantiated for it.
type (
	idsIn[I colID]  interface{ ids(*Shard) []I }
	valsIn[V value] interface{ vals(*Shard) values[V] }

	cols16   struct{}
	cols24   struct{}
	cols32   struct{}
	codes8   struct{}
	codes16  struct{}
	floats32 struct{}
	mants    struct{}
	floats64 struct{}
)

func (cols16) ids(s *Shard) []uint16                { return s.Idx16 }
func (cols24) ids(s *Shard) []id24                  { return s.Idx24 }
func (cols32) ids(s *Shard) []uint32                { return s.Idx }
func (codes8) vals(s *Shard) values[uint8]          { return valuesOf(s, s.Code8) }
func (codes16) vals(s *Shard) values[uint16]        { return valuesOf(s, s.Code16) }
func (floats32) vals(s *Shard) values[float32]      { return valuesOf(s, s.Val32) }
func (mants) vals(s *Shard) values[int32]           { return valuesOf(s, s.Mant) }
func (floats64) vals(s *Shard) values[float64]      { return valuesOf(s, s.Val64) }
func valuesOf[V value](s *Shard, val []V) values[V] { return values[V]{val, s.Table, s.Scale} }

func valueKernels[I colID, V value, C idsIn[I], N valsIn[V]]() *kernels {
	var c C
	var n N
	return &kernels{
		evalOne: func(s *Shard, r *rows, x vecs, seq bool) (float64, float64) {
			if seq {
				return evalSeq(s.RowPtr, c.ids(s), n.vals(s), r.class, r, x)
			}
			return evalBinary(s.RowPtr, c.ids(s), n.vals(s), r.class, r, x)
		},
		diagOne: func(s *Shard, r *rows, x vecs, seq bool) [3]float64 {
			if seq {
				return evalDiagSeq(s.RowPtr, c.ids(s), n.vals(s), r.class, r, x)
			}
			return evalDiagBinary(s.RowPtr, c.ids(s), n.vals(s), r.class, r, x)
		},
		hessVecOne: func(s *Shard, r *rows, x vecs, seq bool) float64 {
			if seq {
				return hessVecSeq(s.RowPtr, c.ids(s), n.vals(s), r.class, r, x)
			}
			return hessVecBinary(s.RowPtr, c.ids(s), n.vals(s), r.class, r, x)
		},
		evalMany: func(s *Shard, p *Point, wl []float64, sc *Scratch, out *reduce.Partial) {
			evalMulti(s, c.ids(s), n.vals(s), p, wl, sc, out)
		},
		margins: func(s *Shard, wl, z []float64) { marginsBinary(s.RowPtr, c.ids(s), n.vals(s), wl, z) },
		reader: func(s *Shard) rowReader {
			m := newRowView(s.RowPtr, c.ids(s), n.vals(s))
			return func(a, b int, global []uint32, cols []int32, vals []float64) ([]int32, []float64) {
				cols, vs := readCols(m.colView, a, b, global, cols), extend(vals, b-a)
				for i := range vs[len(vals):] {
					vs[len(vals)+i] = m.val(uintptr(a + i))
				}
				return cols, vs
			}
		},
	}
}

// onesKernels are the kernels of a matrix of ones. EvalDiag's lone
// one-vs-rest problem over ones goes to the multi-class loop, so diagOne
// has no seq of its own.
func onesKernels[I colID, C idsIn[I]]() *kernels {
	var c C
	return &kernels{
		evalOne: func(s *Shard, r *rows, x vecs, seq bool) (float64, float64) {
			if seq {
				return evalSeqOnes(s.RowPtr, c.ids(s), r.class, r, x)
			}
			return evalBinaryOnes(s.RowPtr, c.ids(s), r.class, r, x)
		},
		diagOne: func(s *Shard, r *rows, x vecs, _ bool) [3]float64 {
			return evalDiagBinaryOnes(s.RowPtr, c.ids(s), r.class, r, x)
		},
		hessVecOne: func(s *Shard, r *rows, x vecs, seq bool) float64 {
			if seq {
				return hessVecSeqOnes(s.RowPtr, c.ids(s), r.class, r, x)
			}
			return hessVecBinaryOnes(s.RowPtr, c.ids(s), r.class, r, x)
		},
		evalMany: func(s *Shard, p *Point, wl []float64, sc *Scratch, out *reduce.Partial) {
			evalMultiOnes(s, c.ids(s), p, wl, sc, out)
		},
		margins: func(s *Shard, wl, z []float64) { marginsBinaryOnes(s.RowPtr, c.ids(s), wl, z) },
		reader: func(s *Shard) rowReader {
			m := newColView(s.RowPtr, c.ids(s))
			return func(a, b int, global []uint32, cols []int32, vals []float64) ([]int32, []float64) {
				cols, vs := readCols(m, a, b, global, cols), extend(vals, b-a)
				for i := range vs[len(vals):] {
					vs[len(vals)+i] = 1
				}
				return cols, vs
			}
		},
	}
}

// readCols appends the columns of nonzeros [a, b) to cols, through global
// when it is not nil.
func readCols[I colID](m colView[I], a, b int, global []uint32, cols []int32) []int32 {
	out := extend(cols, b-a)
	dst := out[len(cols):]
	if global == nil {
		for i := range dst {
			dst[i] = int32(m.col(uintptr(a + i)))
		}
		return out
	}
	for i := range dst {
		dst[i] = int32(global[m.col(uintptr(a+i))])
	}
	return out
}

// extend is b with n more elements, to be written.
func extend[T any](b []T, n int) []T { return slices.Grow(b, n)[:len(b)+n] }
