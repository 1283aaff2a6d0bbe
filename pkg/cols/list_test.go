package cols

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestColumnsKeepTheirIds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	random := func(n int, width uint32) []uint32 {
		seen := map[uint32]bool{}
		for len(seen) < n {
			seen[rng.Uint32N(width)] = true
		}
		out := make([]uint32, 0, n)
		for g := range seen {
			out = append(out, g)
		}
		slices.Sort(out)
		return out
	}
	cases := []struct {
		name string
		ids  []uint32
	}{
		{"none", nil},
		{"zero", []uint32{0}},
		{"consecutive", []uint32{0, 1, 2, 3, 4}},
		{"one-byte gaps", []uint32{5, 6, 133, 134}},
		{"every width of gap", []uint32{1, 1 << 7, 1 << 14, 1 << 21, 1 << 28, math.MaxUint32 - 1, math.MaxUint32}},
		{"the last id alone", []uint32{math.MaxUint32}},
		{"across a run", []uint32{65534, 65535, 65536, 65537, 131072}},
		{"dense", random(5000, 8000)},
		{"sparse", random(5000, 1<<30)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := NewList(c.ids)
			if got := l.Slice(); l.Len() != len(c.ids) || !slices.Equal(got, c.ids) {
				t.Fatalf("decoded %d ids %v, want %v", l.Len(), got, c.ids)
			}
			if len(c.ids) > 0 && l.Last() != c.ids[len(c.ids)-1] {
				t.Fatalf("last %d, want %d", l.Last(), c.ids[len(c.ids)-1])
			}
		})
	}
	// Below 65,536 a column takes two bytes, and there is one run.
	dense := NewList(random(5000, 8000))
	if dense.Bytes() != 2*5000+8 {
		t.Fatalf("5,000 dense columns take %d bytes", dense.Bytes())
	}
}
