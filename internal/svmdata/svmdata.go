// Package svmdata makes small random LIBSVM data sets for tests: as text,
// and for reference checks as dense rows.
package svmdata

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Dataset is a random LIBSVM file held as dense rows for reference checks.
type Dataset struct {
	Text   string
	Labels []float64
	Rows   [][]float64 // dense, zero-based features
	N      int
}

// Random makes m rows over n features and classes labels (-1 and +1
// for two). values: "ones", "f32" (exactly float32), "dec" (short decimals) or
// "f64"; with "-few" appended, the numbers come from a palette of six, so
// shards store them as codes.
func Random(rng *rand.Rand, m, n, classes int, values string) Dataset {
	var b strings.Builder
	d := Dataset{N: n}
	for i := 0; i < m; i++ {
		lab := float64(rng.IntN(classes))
		if classes == 2 {
			lab = 2*lab - 1
		}
		d.Labels = append(d.Labels, lab)
		row := make([]float64, n)
		b.WriteString(strconv.FormatFloat(lab, 'g', -1, 64))
		kind, few := strings.CutSuffix(values, "-few")
		for j := 0; j < n; j++ {
			if rng.Float64() > 0.3 {
				continue
			}
			var v float64
			pick := rng.NormFloat64()
			if few {
				pick = Palette[rng.IntN(len(Palette))]
			}
			switch kind {
			case "ones":
				v = 1
			case "f32":
				v = float64(float32(pick))
			case "dec": // short decimals, as LIBSVM files have them
				v = math.Round(pick*1e6) / 1e6
			default:
				v = pick
			}
			row[j] = v
			if kind == "dec" {
				fmt.Fprintf(&b, " %d:%s", j+1, strconv.FormatFloat(v, 'f', -1, 64))
			} else {
				fmt.Fprintf(&b, " %d:%s", j+1, strconv.FormatFloat(v, 'g', -1, 64))
			}
		}
		if i%7 == 3 {
			b.WriteString(" # comment")
		}
		b.WriteString("\n")
		d.Rows = append(d.Rows, row)
	}
	d.Text = b.String()
	return d
}

// Palette is the six numbers of the "-few" kinds.
var Palette = []float64{0.6931471805599453, -1.4142135623730951, 0.1, 2.718281828459045, -0.3333333333333333, 0}

// WriteFile writes text to a file of the test's and returns its path.
func WriteFile(t testing.TB, text string) string {
	path := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// NormalVectors is K vectors of n standard normal values: a point.
func NormalVectors(rng *rand.Rand, K, n int) [][]float64 {
	x := make([][]float64, K)
	for k := range x {
		x[k] = make([]float64, n)
		for j := range x[k] {
			x[k][j] = rng.NormFloat64()
		}
	}
	return x
}

// Stepped writes rows with labels 1 to classes and, at every step-th
// feature up to last, a value one time in five.
func Stepped(rng *rand.Rand, rows, classes, step, last int) string {
	var b strings.Builder
	for range rows {
		fmt.Fprintf(&b, "%d", 1+rng.IntN(classes))
		for j := step; j <= last; j += step {
			if rng.Float64() < 0.2 {
				fmt.Fprintf(&b, " %d:%.3f", j, rng.NormFloat64())
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Spread writes rows whose features are multiples of 3 up to 90 (two
// thirds of the coordinates dead), labels 1..classes.
func Spread(rng *rand.Rand, rows, classes int) string {
	var b strings.Builder
	for i := range rows {
		fmt.Fprintf(&b, "%d", i%classes+1)
		for j := 3; j <= 90; j += 3 {
			if rng.IntN(4) == 0 {
				fmt.Fprintf(&b, " %d:%.3f", j, rng.Float64()*2-1)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Banded writes rows over n features whose nonzeros lie in a band of
// width columns that moves with the row.
func Banded(rng *rand.Rand, rows, n, width int) string {
	var b strings.Builder
	for i := range rows {
		fmt.Fprintf(&b, "%d", 1+rng.IntN(3))
		base := i * (n - width) / rows
		for j := base + 1; j <= base+width; j++ {
			if rng.Float64() < 0.4 {
				fmt.Fprintf(&b, " %d:%g", j, rng.NormFloat64())
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Storage is a data kind of Random, loaded with or without compaction,
// and the shards' value storage it gives: coded (8-bit codes) or not.
type Storage struct {
	Data    string
	Compact bool
	Values  string // the shard.Values it gives, by name
	Coded   bool
}

// Storages reach every value storage. Compaction leaves values with many
// distinct numbers alone.
var Storages = []Storage{
	{"ones", false, "ones", false},
	{"f32", false, "float32", false}, {"dec", false, "decimal", false}, {"f64", false, "float64", false},
	{"f32", true, "float32", false}, {"dec", true, "decimal", false}, {"f64", true, "float64", false},
	{"f32-few", false, "float32", false}, {"dec-few", false, "decimal", false},
	{"f32-few", true, "float32", true}, {"dec-few", true, "decimal", true}, {"f64-few", true, "float64", true},
}

// Name says which storage st is, for test names.
func (st Storage) Name() string {
	if st.Compact {
		return st.Data + "+compact"
	}
	return st.Data
}
