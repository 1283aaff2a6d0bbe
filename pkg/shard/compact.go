// Compact storage: values as codes into a table of a shard's distinct
// numbers, and column ids in 3 bytes. Codes are used when a shard has at
// most limits.maxCodes distinct numbers and codes plus table take less
// room than the numbers.

package shard

import (
	"math"
	"slices"

	"github.com/osgm-svm/osgm/pkg/memory"
)

// Compact stores each shard's values as codes into a table of its
// distinct numbers where that takes less memory (see Shard.Code8): 2
// bytes or 1 per value instead of 4 or 8; and the column ids of shards
// too wide for 16 bits in 3 bytes instead of 4. Results keep their bits;
// passes are slower (a table lookup per value, a wider load per id;
// BENCHMARKS.md), so this is for data that would not fit otherwise.
// Options.Compact does the same as shards are built, without the plain
// copy.
func Compact(shards []*Shard) { compact(shards, defaultLimits()) }

func compact(shards []*Shard, lim limits) {
	c := coder{lim: lim}
	for _, s := range shards {
		before, wasCompact := s.Bytes(), s.Compacted()
		if s.Code8 == nil && s.Code16 == nil && s.Values != Ones && c.encode(s) {
			s.Val32, s.Mant, s.Val64 = nil, nil, nil
		}
		if len(s.Idx) > 0 && s.Cols.Len() <= lim.mediumColumns {
			s.Idx24, s.Idx = ids24(s.Idx), nil
		}
		// What Track counted is cancelled, and the shard counted anew.
		if s.tracked && (before != s.Bytes() || wasCompact != s.Compacted()) {
			memory.Track(s, -int64(before), wasCompact)
			memory.Track(s, int64(s.Bytes()), s.Compacted())
		}
	}
}

// ids24 is idx in three bytes an id, with room for one more (see id24).
func ids24(idx []uint32) []id24 {
	out := make([]id24, len(idx), len(idx)+1)
	for q, j := range idx {
		out[q] = newID24(j)
	}
	return out
}

// coder numbers distinct float64s (by their bits) in order of first
// appearance, up to a limit: an open-addressing hash table, since a map
// costs several times more per value on a path that sees every nonzero.
// A slot holds its key and code together, so that a probe touches one
// cache line, and the slots start few and double at half full, rather
// than being sized for the limit (65,536 codes): misses in them are most
// of what coding costs, and a shard holds far fewer distinct numbers
// than the limit.
type coder struct {
	lim   limits
	slots []codeSlot
	table []float64
	limit int
	codes []uint16
}

type codeSlot struct {
	key  uint64
	code uint32 // code+1, 0 for an empty slot
}

// encode gives s codes for its values, read in the storage's terms
// (mantissas for decimals) a block at a time through the shard's
// kernels, when codes and table take less room than the numbers
// (s.Values says how wide they are); it reports whether it did.
func (c *coder) encode(s *Shard) bool {
	const block = 4096
	n := s.NNZ()
	if !c.start(s, n) {
		return false
	}
	read := s.kernels().reader(s)
	var cols []int32
	var nums []float64
	for a := 0; a < n; a += block {
		cols, nums = read(a, min(a+block, n), nil, cols[:0], nums[:0])
		for q, v := range nums {
			code, ok := c.code(v)
			if !ok {
				return false
			}
			c.codes[a+q] = code
		}
	}
	c.finish(s)
	return true
}

// encodeParsed is encode for the values as parsed: the mantissas
// round(v*scale) for decimals (scale > 0), else the values. The loading
// path, without a call per value.
func (c *coder) encodeParsed(s *Shard, val []float64, scale float64) bool {
	if !c.start(s, len(val)) {
		return false
	}
	for q, v := range val {
		if scale > 0 {
			v = mantissa(v, scale)
		}
		code, ok := c.code(v)
		if !ok {
			return false
		}
		c.codes[q] = code
	}
	c.finish(s)
	return true
}

// start readies n codes, or reports that codes could not pay for s.
func (c *coder) start(s *Shard, n int) bool {
	width := 4
	if s.Values == Float64 {
		width = 8
	}
	// Codes of 2 bytes and a table of 8 per number pay below this many.
	limit := min(c.lim.maxCodes, (width-2)*n/8)
	if limit <= 0 {
		return false
	}
	c.reset(limit)
	c.codes = slices.Grow(c.codes[:0], n)[:n]
	return true
}

// finish stores the codes in s, in one byte each when the table allows.
func (c *coder) finish(s *Shard) {
	s.Table = slices.Clone(c.table)
	if len(s.Table) <= c.lim.maxCode8 {
		s.Code8 = make([]uint8, len(c.codes))
		for q, code := range c.codes {
			s.Code8[q] = uint8(code)
		}
	} else {
		s.Code16 = slices.Clone(c.codes)
	}
}

func (c *coder) reset(limit int) {
	c.table, c.limit = c.table[:0], limit
	c.resize(1 << 10)
}

// resize empties the slots into a table of size (a power of two) and
// puts back the numbers coded so far.
func (c *coder) resize(size int) {
	if cap(c.slots) < size {
		c.slots = make([]codeSlot, size)
	}
	c.slots = c.slots[:size]
	clear(c.slots)
	for i, v := range c.table {
		key := math.Float64bits(v)
		c.slots[c.free(key)] = codeSlot{key, uint32(i + 1)}
	}
}

func hashKey(key uint64) uint64 { return (key * 0x9E3779B97F4A7C15) >> 32 }

// free is the empty slot where key goes: the first in its probe sequence.
func (c *coder) free(key uint64) uint64 {
	mask := uint64(len(c.slots) - 1)
	h := hashKey(key) & mask
	for c.slots[h].code != 0 {
		h = (h + 1) & mask
	}
	return h
}

// code is v's code; false when v would be one number more than the limit.
func (c *coder) code(v float64) (uint16, bool) {
	key := math.Float64bits(v)
	mask := uint64(len(c.slots) - 1)
	h := hashKey(key) & mask
	for ; c.slots[h].code != 0; h = (h + 1) & mask {
		if c.slots[h].key == key {
			return uint16(c.slots[h].code - 1), true
		}
	}
	if len(c.table) == c.limit {
		return 0, false
	}
	c.table = append(c.table, v)
	if 2*len(c.table) > len(c.slots) {
		c.resize(2 * len(c.slots)) // places v too
	} else {
		c.slots[h] = codeSlot{key, uint32(len(c.table))}
	}
	return uint16(len(c.table) - 1), true
}

// mantissa is v's decimal mantissa at scale, for a v decimalScale
// accepted.
func mantissa(v, scale float64) float64 { return float64(int32(math.Round(float64(v * scale)))) }

// decimalScale is 10^E, E the most decimals any value was written with,
// when every value is exactly m/10^E with m an int32 (checked, not
// assumed).
func decimalScale(val []float64, decimals int) (float64, bool) {
	if decimals < 0 {
		decimals = 0
	}
	if decimals >= len(pow10) {
		return 0, false
	}
	scale := pow10[decimals]
	for _, v := range val {
		m := math.Round(float64(v * scale))
		if math.Abs(m) >= 1<<31 || float64(int32(m))/scale != v {
			return 0, false
		}
	}
	return scale, true
}
