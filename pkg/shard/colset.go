package shard

import (
	"math/bits"
	"slices"
)

// colSet is a set of column ids kept as a bitmap with a count of members
// before each word, so that a member's position among the members in
// increasing order is one lookup and a popcount. For a million columns the
// bitmap is 128 KB and stays in cache, where a table of positions (4 MB)
// would miss on nearly every random lookup; that is most of the cost of
// building shards and groups of wide data.
type colSet struct {
	words []uint64
	rank  []uint32 // members in words[:i]
}

// maxColSet is the widest index range a colSet serves (a 2 MB bitmap);
// wider ranges are merged or sorted instead.
const maxColSet = 1 << 24

// reset empties the set and sizes it for ids below n, keeping memory.
func (s *colSet) reset(n uint32) {
	w := int(n+63) / 64
	if cap(s.words) < w {
		s.words, s.rank = make([]uint64, w), make([]uint32, w)
		return
	}
	s.words, s.rank = s.words[:w], s.rank[:w]
	clear(s.words)
}

func (s *colSet) add(j uint32) { s.words[j>>6] |= 1 << (j & 63) }

// members appends the set to out in increasing order and fixes the ranks
// for pos.
func (s *colSet) members(out []uint32) []uint32 {
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

// pos is the position of member j in members' list.
func (s *colSet) pos(j uint32) uint32 {
	return s.rank[j>>6] + uint32(bits.OnesCount64(s.words[j>>6]&(1<<(j&63)-1)))
}
