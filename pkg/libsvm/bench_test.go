package libsvm

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// benchLines are text-like rows: 60 increasing indices below 100,000 with
// six-digit values, as svmgen writes them, and a binary variant.
func benchLines(binary bool) [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	lines := make([][]byte, 1000)
	for i := range lines {
		b := []byte("+1")
		j := 0
		for q := 0; q < 60; q++ {
			j += 1 + rng.IntN(1600)
			b = append(b, ' ')
			b = strconv.AppendInt(b, int64(j), 10)
			b = append(b, ':')
			if binary {
				b = append(b, '1')
			} else {
				b = strconv.AppendFloat(b, rng.Float64()/5, 'g', 6, 32)
			}
		}
		lines[i] = b
	}
	return lines
}

// BenchmarkParseLine measures ParseLine alone, in MB/s of text.
func BenchmarkParseLine(b *testing.B) {
	for _, c := range []struct {
		name   string
		binary bool
	}{{"real", false}, {"binary", true}} {
		b.Run(c.name, func(b *testing.B) {
			lines := benchLines(c.binary)
			n := 0
			for _, l := range lines {
				n += len(l) + 1
			}
			var row Row
			b.SetBytes(int64(n))
			for b.Loop() {
				for _, l := range lines {
					if _, err := ParseLine(l, &row); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
