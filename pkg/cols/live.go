package cols

import (
	"fmt"
	"math/bits"
)

// LiveMap says which coordinates a point's vectors carry when they leave
// out dead ones (see shard.Point.Live): coordinate j is carried when bit j of
// Bits is set, and carried coordinates keep their order.
type LiveMap struct {
	Bits   []uint64
	Full   int      // the length of the vectors with every coordinate
	before []uint32 // carried coordinates in the words before each word
}

// NewLiveMap checks bits against the full length and indexes them.
func NewLiveMap(b []uint64, full int) (*LiveMap, error) {
	if full <= 0 || len(b) != (full+63)/64 {
		return nil, fmt.Errorf("cols: %d words of live coordinates for %d coordinates", len(b), full)
	}
	if r := full % 64; r != 0 && b[len(b)-1]>>r != 0 {
		return nil, fmt.Errorf("cols: live coordinates past the %d there are", full)
	}
	m := &LiveMap{Bits: b, Full: full, before: make([]uint32, len(b)+1)}
	for i, w := range b {
		m.before[i+1] = m.before[i] + uint32(bits.OnesCount64(w))
	}
	return m, nil
}

// Len is the number of carried coordinates.
func (m *LiveMap) Len() int { return int(m.before[len(m.Bits)]) }

// Indices lists the carried coordinates in order.
func (m *LiveMap) Indices() []int { return SetBits(m.Bits) }

// SetBits lists the positions of b's set bits in order.
func SetBits(b []uint64) []int {
	var out []int
	for i, w := range b {
		for ; w != 0; w &= w - 1 {
			out = append(out, 64*i+bits.TrailingZeros64(w))
		}
	}
	return out
}

// Rank is the position of coordinate j among the carried ones, and
// whether it is carried.
func (m *LiveMap) Rank(j uint32) (uint32, bool) {
	if int(j) >= m.Full {
		return 0, false
	}
	w := m.Bits[j/64]
	bit := uint64(1) << (j % 64)
	return m.before[j/64] + uint32(bits.OnesCount64(w&(bit-1))), w&bit != 0
}
