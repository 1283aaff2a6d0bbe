// Package cols holds sets of column (feature) ids: a shard's column list,
// bitmap sets that rank their members, and the map of the coordinates a
// point carries. Shards, reduction trees and the wire all number columns
// through them.
package cols

import (
	"math/bits"
	"slices"
)

// Set is a set of column ids kept as a bitmap with a count of members
// before each word, so that a member's position among the members in
// increasing order is one lookup and a popcount. For a million columns the
// bitmap is 128 KB and stays in cache, where a table of positions (4 MB)
// would miss on nearly every random lookup; that is most of the cost of
// building shards and groups of wide data.
type Set struct {
	words []uint64
	rank  []uint32 // members in words[:i]
}

// MaxSet is the widest index range a Set serves (a 2 MB bitmap);
// wider ranges are merged or sorted instead.
const MaxSet = 1 << 24

// Reset empties the set and sizes it for ids below n, keeping memory.
func (s *Set) Reset(n uint32) {
	w := int(n+63) / 64
	if cap(s.words) < w {
		s.words, s.rank = make([]uint64, w), make([]uint32, w)
		return
	}
	s.words, s.rank = s.words[:w], s.rank[:w]
	clear(s.words)
}

func (s *Set) Add(j uint32) { s.words[j>>6] |= 1 << (j & 63) }

// Members appends the set to out in increasing order and fixes the ranks
// for Pos.
func (s *Set) Members(out []uint32) []uint32 {
	n := uint32(0)
	for i, w := range s.words {
		s.rank[i] = n
		n += uint32(bits.OnesCount64(w))
	}
	out = slices.Grow(out, int(n))
	for i, w := range s.words {
		for w != 0 {
			out = append(out, uint32(i)<<6|uint32(bits.TrailingZeros64(w)))
			w &= w - 1
		}
	}
	return out
}

// Pos is the position of member j in Members' list.
func (s *Set) Pos(j uint32) uint32 {
	return s.rank[j>>6] + uint32(bits.OnesCount64(s.words[j>>6]&(1<<(j&63)-1)))
}
