package cols

import "testing"

// TestLiveMapRefusesWhatItCannotHold: a map must cover the full length
// exactly.
func TestLiveMapRefusesWhatItCannotHold(t *testing.T) {
	for _, c := range []struct {
		bits []uint64
		full int
		ok   bool
	}{
		{[]uint64{0b1011}, 4, true},
		{[]uint64{0b1011}, 70, false}, // one word for 70 coordinates
		{[]uint64{0b11011}, 4, false}, // bit 4 past the end
		{[]uint64{1, 1 << 5}, 70, true},
		{nil, 0, false},
	} {
		m, err := NewLiveMap(c.bits, c.full)
		if (err == nil) != c.ok {
			t.Errorf("NewLiveMap(%b, %d): %v", c.bits, c.full, err)
		}
		if err == nil && m.Len() != len(m.Indices()) {
			t.Errorf("NewLiveMap(%b, %d): Len %d, Indices %v", c.bits, c.full, m.Len(), m.Indices())
		}
	}
}
