package cols

import (
	"iter"
	"slices"
)

// List is a shard's column map: its distinct global feature indices,
// increasing, kept as their low 16 bits and the runs that share the high
// bits. Wide data's column maps (millions of columns across a worker's
// shards) take half the memory of 32-bit indices, and walking one is still a branch-free scan whose loads of the point
// are independent of each other. (Variable-length gaps took a quarter of
// the memory, but their branch made the point's gather, a walk bound by
// memory latency, markedly slower.)
type List struct {
	lo   []uint16
	runs []run
}

// run is a run of columns that share their high 16 bits: 8 bytes, so
// that ids spread over billions of features (a run each at worst) cost no
// more than 4 bytes a column did, and mostly less.
type run struct {
	hi  uint32 // the high bits, in place
	end int32  // one past the run's last position (shards are far smaller)
}

// NewList builds the map of ids, which must increase strictly.
func NewList(ids []uint32) List {
	c := List{lo: make([]uint16, len(ids))}
	for l, g := range ids {
		c.lo[l] = uint16(g)
		if hi := g &^ 0xffff; len(c.runs) == 0 || c.runs[len(c.runs)-1].hi != hi {
			c.runs = append(c.runs, run{hi: hi})
		}
		c.runs[len(c.runs)-1].end = int32(l + 1)
	}
	c.runs = slices.Clip(c.runs)
	return c
}

// Len is the number of columns.
func (c List) Len() int { return len(c.lo) }

// Last is the highest column; zero when there are none.
func (c List) Last() uint32 {
	if len(c.lo) == 0 {
		return 0
	}
	return c.runs[len(c.runs)-1].hi | uint32(c.lo[len(c.lo)-1])
}

// Bytes is the memory the map holds.
func (c List) Bytes() int { return 2*cap(c.lo) + 8*cap(c.runs) }

// Append appends the columns to dst, in order.
func (c List) Append(dst []uint32) []uint32 {
	start := 0
	for _, r := range c.runs {
		for _, x := range c.lo[start:int(r.end)] {
			dst = append(dst, r.hi|uint32(x))
		}
		start = int(r.end)
	}
	return dst
}

// Gather sets dst[l] = w[column l]. It and ScatterAdd are the hot walks,
// kept apart from their callers so that their loops hold everything in
// registers (inlined into Shard.gather, the loop's index went through
// the stack: passes 30% slower).
//
//go:noinline
func (c List) Gather(dst, w []float64) {
	start := 0
	for _, r := range c.runs {
		lo := c.lo[start:int(r.end)]
		out := dst[start:int(r.end)]
		out = out[:len(lo)]
		for l, x := range lo {
			out[l] = w[r.hi|uint32(x)]
		}
		start = int(r.end)
	}
}

// ScatterAdd adds src[l] into dst[column l].
//
//go:noinline
func (c List) ScatterAdd(dst, src []float64) {
	start := 0
	for _, r := range c.runs {
		lo := c.lo[start:int(r.end)]
		in := src[start:int(r.end)]
		in = in[:len(lo)]
		for l, x := range lo {
			dst[r.hi|uint32(x)] += in[l]
		}
		start = int(r.end)
	}
}

// ScatterAddK is ScatterAdd for K values a column, interleaved: src[l*K+k]
// into dst[column l*K+k].
func (c List) ScatterAddK(dst, src []float64, K int) {
	start := 0
	for _, r := range c.runs {
		for l, x := range c.lo[start:int(r.end)] {
			j := int(r.hi|uint32(x)) * K
			d, s := dst[j:j+K], src[(start+l)*K:(start+l)*K+K]
			for k := range d {
				d[k] += s[k]
			}
		}
		start = int(r.end)
	}
}

// Slice is the columns in a fresh slice.
func (c List) Slice() []uint32 { return c.Append(make([]uint32, 0, len(c.lo))) }

// All is the columns in order, for walks that need no slice of them.
func (c List) All() iter.Seq[uint32] {
	return func(yield func(uint32) bool) {
		start := 0
		for _, r := range c.runs {
			for _, x := range c.lo[start:int(r.end)] {
				if !yield(r.hi | uint32(x)) {
					return
				}
			}
			start = int(r.end)
		}
	}
}

// Equal reports whether the lists hold the same columns.
func (c List) Equal(d List) bool {
	return slices.Equal(c.lo, d.lo) && slices.Equal(c.runs, d.runs)
}
