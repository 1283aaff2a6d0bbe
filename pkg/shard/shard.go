// Package shard holds pieces of a LIBSVM data set in memory and evaluates
// the squared-hinge data term over them.
//
// A shard is the set of lines whose first byte lies in a fixed byte range of
// the (decompressed) input. The ranges depend on the data and the flags only,
// never on how many workers there are, and partial sums are always added in
// shard order, so the same data gives the same bits on one worker or many.
package shard

import (
	"fmt"
	"slices"
	"sort"

	"github.com/osgm-svm/osgm/pkg/cols"
	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/memory"
)

// Values says how a shard stores its nonzero values. Storage is chosen per
// shard and never loses accuracy.
type Values uint8

const (
	Ones    Values = iota // every value is 1: nothing stored
	Float32               // every value is exactly a float32
	Decimal               // every value is m / 10^E with m an int32: Mant, Scale
	Float64
)

func (v Values) String() string { return [...]string{"ones", "float32", "decimal", "float64"}[v] }

// pow10 holds the powers of ten a float64 represents exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9}

// Shard is a compact CSR matrix of one range of rows. Column ids are local:
// Cols maps them to global zero-based feature indices, so the evaluation
// touches (and a worker exchanges) only the coordinates its rows use.
type Shard struct {
	ID     int
	RowPtr []uint32 // len Rows+1
	// The local column id of each nonzero, in one of three widths (the
	// others nil): Idx16 when the shard has at most 65,536 columns (most
	// shards of data with fewer features), else Idx, or with Compact
	// Idx24 up to 2^24 columns (wide data, whose passes then load an odd
	// width; BENCHMARKS.md has what it costs).
	Idx   []uint32
	Idx16 []uint16
	Idx24 []id24
	Val32 []float32
	Val64 []float64
	// Mant and Scale hold decimal values exactly: value q is Mant[q]/Scale,
	// Scale a power of ten. LIBSVM files write values as short decimals
	// (0.102121), which float32 cannot hold and float64 holds at twice the
	// size; the kernels apply Scale once per row, not per value.
	Mant []int32
	// Code8 or Code16, when set (Compact), stand for the values above:
	// value q is Table[Code[q]] (over Scale for decimals), the table
	// holding the shard's distinct numbers in the storage's terms (the
	// mantissas, for decimals), so codes change no result's bits. Files
	// write few distinct values (text often under a hundred): a code
	// takes one or two bytes where the value takes four or eight.
	Code8  []uint8
	Code16 []uint16
	Table  []float64
	Scale  float64 // 10^E for decimals, else 1
	Values Values
	Cols   cols.List // local -> global feature index (0-based), increasing

	// Labels are the distinct raw labels in order of first appearance;
	// LabelOf holds each row's position in Labels.
	Labels  []float64
	LabelOf []int32
	// Class holds each row's class (index into the global label order),
	// set by SetClasses.
	Class   []int32
	classes int

	LabelCount []int   // rows per entry of Labels
	MaxIndex   uint32  // largest one-based feature index, 0 if none
	NormSq     float64 // sum of squared row norms (without bias)
	MaxNormSq  float64 // largest squared row norm (without bias)

	// Fold holds each row's cross-validation fold (1..n), set by SetFolds;
	// nil until then.
	Fold []uint16

	tracked bool // its bytes are in held (see track)

	// liveCols is the column map into the vectors of points that carry
	// liveOf's coordinates only (see CheckLive).
	liveCols cols.List
	liveOf   *cols.LiveMap
}

// Activity remembers which of a shard's rows were active at the last
// stamped Hessian-vector point (see Point.Stamp). Whoever steps a shard
// through the points keeps one for it (see Pass), apart from the shard,
// which several evaluators may read side by side.
type Activity struct {
	stamp uint64
	pos   int32 // the first problem's class
	k     int   // problems
	hold  int
	bits  []uint64 // row i of problem k at i*K+k
	// weights are the rows' Hessian weights, as bits, for a loss whose
	// weight is not the class weight of the active rows (!Loss.Cached).
	weights []float64
}

// Rows is the number of rows.
func (s *Shard) Rows() int { return len(s.RowPtr) - 1 }

// NNZ is the number of stored nonzeros.
func (s *Shard) NNZ() int { return len(s.Idx) + len(s.Idx16) + len(s.Idx24) }

// limits are where a shard's storage changes: narrowColumns and
// mediumColumns, the most columns a shard may have to keep 16-bit and
// 24-bit ids; maxCodes, the most distinct numbers stored as codes, and
// maxCode8, in one byte. Tests lower them (Options.limits) to reach every
// storage on small data.
type limits struct {
	narrowColumns, mediumColumns int
	maxCode8, maxCodes           int
}

func defaultLimits() limits {
	return limits{narrowColumns: 1 << 16, mediumColumns: 1 << 24, maxCode8: 1 << 8, maxCodes: 1 << 16}
}

// storage is the limits a load builds its shards within: the defaults,
// or a test's (Options.limits, lowered to reach every storage on small
// files).
func (o Options) storage() limits {
	if o.limits == (limits{}) {
		return defaultLimits()
	}
	return o.limits
}

// Compacted says whether the shard is stored compact (see Compact): its
// values as codes or its ids in 3 bytes.
func (s *Shard) Compacted() bool { return s.Code8 != nil || s.Code16 != nil || s.Idx24 != nil }

// Bytes is the memory held by the matrix, labels and column map.
func (s *Shard) Bytes() int {
	return 4*len(s.RowPtr) + 4*len(s.Idx) + 2*len(s.Idx16) + 3*len(s.Idx24) + 4*len(s.Val32) + 8*len(s.Val64) + 4*len(s.Mant) +
		len(s.Code8) + 2*len(s.Code16) + 8*len(s.Table) +
		s.Cols.Bytes() + 4*len(s.LabelOf) + 4*len(s.Class) + 2*len(s.Fold)
}

// builder collects rows with global indices, then compacts them. One
// builder serves many shards in turn (reset): its slices are scratch that
// keeps its capacity, so loading makes no garbage beyond the shards
// themselves. That matters for small files, where growing and dropping
// these slices cost more than parsing (GC and first-touch page faults).
type builder struct {
	id     int
	rowPtr []uint32
	idx    []uint32 // global, zero-based; local after remap
	val    []float64
	labels []float64
	// where is each label's position in labels: a regression's labels
	// are as many as its rows, and a search among them a row was
	// quadratic.
	where   map[float64]int32
	labelOf []int32
	counts  []int
	lastLab float64
	lastPos int32
	// decimals is the most digits after the point of any value so far
	// (libsvm.NotDecimal when some value is not a short decimal).
	decimals int
	cols     cols.Set // scratch for remap
	colList  []uint32 // the shard's columns, before cols.NewList
	compact  bool     // Options.Compact
	lim      limits
	coder    coder // scratch for the codes

	// Found while adding, when the values are in cache.
	normSq, maxNormSq float64
	ones, f32         bool // every value is 1; every value is a float32
}

func newBuilder(id int, opt Options) *builder {
	lim := opt.storage()
	b := &builder{compact: opt.Compact, lim: lim, coder: coder{lim: lim}}
	b.reset(id)
	return b
}

// reset starts shard id, keeping the scratch's capacity.
func (b *builder) reset(id int) {
	b.id, b.lastPos, b.lastLab, b.decimals = id, -1, 0, -libsvm.NotDecimal
	b.rowPtr = append(b.rowPtr[:0], 0)
	b.idx, b.val, b.labelOf = b.idx[:0], b.val[:0], b.labelOf[:0]
	b.labels, b.counts = b.labels[:0], b.counts[:0]
	clear(b.where)
	b.normSq, b.maxNormSq, b.ones, b.f32 = 0, 0, true, true
}

func (b *builder) add(label float64, index []uint32, value []float64, decimals int) {
	b.decimals = max(b.decimals, decimals)
	pos := b.lastPos
	if pos < 0 || label != b.lastLab {
		if b.where == nil {
			b.where = map[float64]int32{}
		}
		var ok bool
		if pos, ok = b.where[label]; !ok { // a map's float keys are equal as == says: -0 is 0
			pos = int32(len(b.labels))
			b.labels = append(b.labels, label)
			b.counts = append(b.counts, 0)
			b.where[label] = pos
		}
		b.lastLab, b.lastPos = label, pos
	}
	b.labelOf = append(b.labelOf, pos)
	b.counts[pos]++
	b.idx, b.val = double(b.idx, len(index)), double(b.val, len(value))
	for _, j := range index {
		b.idx = append(b.idx, j-1)
	}
	b.val = append(b.val, value...)
	b.rowPtr = append(b.rowPtr, uint32(len(b.idx)))
	n := 0.0
	for _, v := range value {
		n += float64(v * v)
		b.ones = b.ones && v == 1
		b.f32 = b.f32 && float64(float32(v)) == v
	}
	b.normSq += n
	b.maxNormSq = max(b.maxNormSq, n)
}

// double makes room for n more elements by at least doubling s's
// capacity. append grows large slices by a quarter, which leaves behind
// about four times the final size in old arrays, and a load runs with
// the collector off; doubling leaves at most the final size (gen100k:
// BenchmarkLoad allocates 75 MB a load instead of 80, for 61 MB of
// shards).
func double[T any](s []T, n int) []T {
	if len(s)+n <= cap(s) {
		return s
	}
	return slices.Grow(s, max(n, cap(s)))
}

// remap lists the columns in use in increasing order and rewrites b.idx to
// local ids: through a cols.Set when the index range allows (linear time),
// by sorting otherwise. The list is the builder's scratch, until the next
// shard.
func (b *builder) remap(maxIndex uint32) (ids []uint32) {
	if maxIndex > cols.MaxSet {
		ids = append(b.colList[:0], b.idx...)
		slices.Sort(ids)
		ids = slices.Compact(ids)
		b.colList = ids
		for q, g := range b.idx {
			b.idx[q] = uint32(sort.Search(len(ids), func(i int) bool { return ids[i] >= g }))
		}
		return ids
	}
	set := &b.cols
	set.Reset(maxIndex)
	for _, g := range b.idx {
		set.Add(g)
	}
	ids = set.Members(b.colList[:0])
	b.colList = ids
	for q, g := range b.idx {
		b.idx[q] = set.Pos(g)
	}
	return ids
}

// build compacts the collected rows into a Shard whose slices are exact-size
// copies (a shard lives for the whole job) that share nothing with b.
func (b *builder) build() *Shard {
	s := &Shard{ID: b.id, RowPtr: slices.Clone(b.rowPtr), Labels: slices.Clone(b.labels),
		LabelOf: slices.Clone(b.labelOf), LabelCount: slices.Clone(b.counts)}
	if len(b.idx) > 0 {
		s.MaxIndex = slices.Max(b.idx) + 1
	}
	ids := b.remap(s.MaxIndex)
	s.Cols = cols.NewList(ids)
	switch {
	case len(b.idx) == 0:
		s.Idx = []uint32{}
	case len(ids) <= b.lim.narrowColumns:
		s.Idx16 = make([]uint16, len(b.idx))
		for q, j := range b.idx {
			s.Idx16[q] = uint16(j)
		}
	case b.compact && len(ids) <= b.lim.mediumColumns:
		s.Idx24 = ids24(b.idx)
	default:
		s.Idx = slices.Clone(b.idx)
	}

	s.NormSq, s.MaxNormSq = b.normSq, b.maxNormSq
	b.setValues(s)
	memory.Track(s, int64(s.Bytes()), s.Compacted())
	s.tracked = true
	return s
}

// setValues stores the values in the narrowest exact form: nothing for
// ones; else, when the builder compacts, codes where they are smaller
// (encoded straight from the parsed values: a plain copy first would be
// garbage while the collector is off for the load); else float32s,
// decimal mantissas or float64s.
func (b *builder) setValues(s *Shard) {
	s.Scale = 1
	switch {
	case b.ones:
		s.Values = Ones
		return
	case b.f32:
		s.Values = Float32
	default:
		s.Values = Float64
		if scale, ok := decimalScale(b.val, b.decimals); ok {
			s.Values, s.Scale = Decimal, scale
		}
	}
	if b.compact {
		scale := 0.0
		if s.Values == Decimal {
			scale = s.Scale
		}
		if b.coder.encodeParsed(s, b.val, scale) {
			return
		}
	}
	switch s.Values {
	case Float32:
		s.Val32 = make([]float32, len(b.val))
		for q, v := range b.val {
			s.Val32[q] = float32(v)
		}
	case Decimal:
		s.Mant = make([]int32, len(b.val))
		for q := range b.val {
			s.Mant[q] = int32(mantissa(b.val[q], s.Scale))
		}
	default:
		s.Val64 = slices.Clone(b.val)
	}
}

// SetClasses maps each row's label to its class: the position of the label
// in order (the global label order). Labels missing from order give -1.
func (s *Shard) SetClasses(order []float64) {
	s.classes = len(order)
	m := make([]int32, len(s.Labels))
	for i, l := range s.Labels {
		m[i] = -1
		for k, o := range order {
			if o == l {
				m[i] = int32(k)
			}
		}
	}
	if len(s.Class) != len(s.LabelOf) {
		s.Class = make([]int32, len(s.LabelOf))
	}
	for i, p := range s.LabelOf {
		s.Class[i] = m[p]
	}
}

// SetFolds gives the shard's rows their cross-validation folds: fold[i]
// for row i, as Folds numbers them.
func (s *Shard) SetFolds(fold []uint16) error {
	if len(fold) != s.Rows() {
		return fmt.Errorf("shard %d: %d fold numbers for %d rows", s.ID, len(fold), s.Rows())
	}
	s.Fold = fold
	return nil
}

// Summary is what the coordinator needs to know about the data set.
type Summary struct {
	Rows       int
	NNZ        int
	MaxIndex   uint32
	NormSq     float64
	Labels     []float64 // in order of first appearance in the file
	LabelCount []int
	where      map[float64]int // each label's position in Labels
}

// Merge adds one shard's summary; call in shard order so labels come out in
// order of first appearance in the file.
func (sum *Summary) Merge(rows, nnz int, maxIndex uint32, normSq float64, labels []float64, counts []int) {
	sum.Rows += rows
	sum.NNZ += nnz
	if maxIndex > sum.MaxIndex {
		sum.MaxIndex = maxIndex
	}
	sum.NormSq += normSq
	if sum.where == nil || len(sum.where) != len(sum.Labels) { // new, or a copy's that another copy grew
		sum.where = make(map[float64]int, len(sum.Labels))
		for k, l := range sum.Labels {
			sum.where[l] = k
		}
	}
	for i, l := range labels {
		k, ok := sum.where[l]
		if !ok {
			k = len(sum.Labels)
			sum.Labels = append(sum.Labels, l)
			sum.LabelCount = append(sum.LabelCount, 0)
			sum.where[l] = k
		}
		sum.LabelCount[k] += counts[i]
	}
}

// LabelOrder applies LIBLINEAR's rule on top of first appearance: a {-1, +1}
// pair that starts with -1 is swapped so +1 comes first.
func LabelOrder(firstSeen []float64) []float64 {
	order := slices.Clone(firstSeen)
	if len(order) == 2 && order[0] == -1 && order[1] == 1 {
		order[0], order[1] = 1, -1
	}
	return order
}
