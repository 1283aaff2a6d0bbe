package libsvm

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseLineAccepts(t *testing.T) {
	tests := []struct {
		line  string
		ok    bool
		label float64
		idx   []uint32
		val   []float64
	}{
		{"+1 1:0.5 3:1", true, 1, []uint32{1, 3}, []float64{0.5, 1}},
		{"-1 2:-2.5e-1 3:0", true, -1, []uint32{2, 3}, []float64{-0.25, 0}},
		{"1.0 1:1   2:1e3  ", true, 1, []uint32{1, 2}, []float64{1, 1000}},
		{"0 4:0.1\r", true, 0, []uint32{4}, []float64{0.1}},
		{"2", true, 2, nil, nil},
		{"  7 \t", true, 7, nil, nil},
		{"3 5:.5 6:5. 7:-0 # trailing comment 8:1", true, 3, []uint32{5, 6, 7}, []float64{0.5, 5, 0}},
		{"", false, 0, nil, nil},
		{"   ", false, 0, nil, nil},
		{"# comment only", false, 0, nil, nil},
		{"1 4294967295:2", true, 1, []uint32{4294967295}, []float64{2}},
		{"1 1:0.1234567890123456789", true, 1, []uint32{1}, []float64{0.1234567890123456789}},
		{"1 1:1e-320", true, 1, []uint32{1}, []float64{1e-320}},
		{"-2 1:0x1p-2", true, -2, []uint32{1}, []float64{0.25}},
		// Around the shortcut for a value of "1".
		{"1 1:1 2:1\t3:1\r", true, 1, []uint32{1, 2, 3}, []float64{1, 1, 1}},
		{"1 1:10 2:1.5 3:1e2 4:1. 5:11", true, 1, []uint32{1, 2, 3, 4, 5}, []float64{10, 1.5, 100, 1, 11}},
		{"1 1:1#c", true, 1, []uint32{1}, []float64{1}},
	}
	for _, tc := range tests {
		var row Row
		ok, err := ParseLine([]byte(tc.line), &row)
		if err != nil {
			t.Errorf("%q: %v", tc.line, err)
			continue
		}
		if ok != tc.ok {
			t.Errorf("%q: ok = %v, want %v", tc.line, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		if row.Label != tc.label || !slices.Equal(row.Index, tc.idx) || !slices.Equal(row.Value, tc.val) {
			t.Errorf("%q: got %v %v %v, want %v %v %v", tc.line, row.Label, row.Index, row.Value, tc.label, tc.idx, tc.val)
		}
	}
}

// TestParseLineRejects is the table of malformed lines: each must give an
// error that says what is wrong, never a panic or a silently wrong row.
func TestParseLineRejects(t *testing.T) {
	tests := []struct{ line, want string }{
		{"1 0:1", "feature index 0 (indices start at 1)"},
		{"1 7:1 5:2", "index 5 after 7: indices must increase"},
		{"1 5:1 5:2", "index 5 after 5: indices must increase"},
		{"1 3:abc", `"abc" is not a number`},
		{"1 3:1x", `"1x" is not a number`},
		{"1 3:1:2", `"1:2" is not a number`},
		{"1 3:nan", "value is NaN"},
		{"1 3:NaN", "value is NaN"},
		{"1 3:inf", "value is infinite"},
		{"1 3:1e999", "out of the range of float64"},
		{"1 qid:3 1:1", "qid is not supported"},
		{"1 4294967296:1", "index 4294967296 out of range"},
		{"1 99999999999999999999999:1", "out of range"},
		{"abc 1:1", `label: "abc" is not a number`},
		{"nan 1:1", "label: value is NaN"},
		{"1 3", `"3" is not idx:value`},
		{"1 3:", "index 3 has no value"},
		{"1 :3", "empty feature index"},
		{"1 -3:1", `feature index "-3" is not a positive integer`},
		{"1 1.5:1", `feature index "1.5" is not a positive integer`},
		{"1 2:1:1", `"1:1" is not a number`},
		{"1 2:1,5", `"1,5" is not a number`},
		{"1 1:1 x", `"x" is not idx:value`},
	}
	for _, tc := range tests {
		var row Row
		_, err := ParseLine([]byte(tc.line), &row)
		if err == nil {
			t.Errorf("%q: no error, want %q", tc.line, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %q, want it to contain %q", tc.line, err, tc.want)
		}
	}
}

// TestFastFloatExact checks the fast path against strconv, which rounds
// correctly, on numbers of the shapes LIBSVM files hold.
func TestFastFloatExact(t *testing.T) {
	cases := []string{"0", "1", "-1", "0.1", "0.5", "1e-5", "123456789012345", "-0.000123456789",
		"9.999999999999999e22", "1e22", "1e23", "4.35e-3", "3.14159265358979", "0.30000000000000004",
		"2.2250738585072014e-308", "1.7976931348623157e308", "5e-324", "00012.5000", "-.75"}
	// A deterministic spread of decimals with up to 17 digits.
	x := uint64(88172645463325252)
	for i := 0; i < 20000; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		digits := strconv.FormatUint(x%1_000_000_000_000_000, 10)
		exp := int(x>>40%60) - 30
		cases = append(cases, digits[:1+int(x>>50)%len(digits)]+"e"+strconv.Itoa(exp))
		cases = append(cases, "0."+digits[:1+int(x>>20)%len(digits)])
	}
	for _, c := range cases {
		want, err := strconv.ParseFloat(c, 64)
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		got, _, err := parseNumber([]byte(c))
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		if math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("%s: got %v (%x), want %v (%x)", c, got, math.Float64bits(got), want, math.Float64bits(want))
		}
	}
}

// TestReaderCompressed reads the same rows from plain, gzip, zstd and bzip2
// copies; the format is found from the bytes, so the names do not matter.
func TestReaderCompressed(t *testing.T) {
	var want [][]float64
	for _, name := range []string{"small.txt", "small.txt.gz", "small.txt.zst", "small.txt.bz2"} {
		// Copy under a misleading name: detection must not use it.
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "data.txt")
		os.WriteFile(path, data, 0o644)
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		var got [][]float64
		rd := NewReader(f, name)
		var row Row
		for {
			err := rd.Next(&row)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			r := []float64{row.Label}
			for q := range row.Index {
				r = append(r, float64(row.Index[q]), row.Value[q])
			}
			got = append(got, r)
		}
		f.Close()
		if want == nil {
			want = got
			if len(want) != 5 {
				t.Fatalf("%s: %d rows, want 5", name, len(want))
			}
			continue
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d rows, want %d", name, len(got), len(want))
		}
		for i := range got {
			if !slices.Equal(got[i], want[i]) {
				t.Errorf("%s row %d: %v, want %v", name, i, got[i], want[i])
			}
		}
	}
}

func TestReaderErrorsNameFileAndLine(t *testing.T) {
	in := "1 1:1\n\n-1 2:1\n1 3:x\n"
	rd := NewReader(strings.NewReader(in), "a9a")
	var row Row
	var err error
	for err == nil {
		err = rd.Next(&row)
	}
	var pe *ParseError
	if !errors.As(err, &pe) || err.Error() != `a9a:4: index 3: "x" is not a number` {
		t.Fatalf("got %v", err)
	}
}

func TestReaderLongLine(t *testing.T) {
	var b strings.Builder
	b.WriteString("1")
	for j := 1; j <= 300000; j++ {
		b.WriteString(" " + strconv.Itoa(j) + ":1")
	}
	b.WriteString("\n-1 1:2\n")
	rd := NewReader(strings.NewReader(b.String()), "long")
	var row Row
	if err := rd.Next(&row); err != nil || len(row.Index) != 300000 {
		t.Fatalf("first row: %v, %d features", err, len(row.Index))
	}
	if err := rd.Next(&row); err != nil || row.Label != -1 || row.Value[0] != 2 {
		t.Fatalf("second row: %v %v", err, row)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("directory: %v", err)
	}
	if _, err := Open(filepath.Join(dir, "missing")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	// A truncated bzip2 stream must fail, not end early.
	data, _ := os.ReadFile("testdata/small.txt.bz2")
	path := filepath.Join(dir, "cut.bz2")
	os.WriteFile(path, data[:len(data)/2], 0o644)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd := NewReader(f, path)
	var row Row
	for err == nil {
		err = rd.Next(&row)
	}
	if err == io.EOF {
		t.Fatal("truncated bzip2 read as complete")
	}
}

func FuzzParseLine(f *testing.F) {
	for _, s := range []string{"+1 1:0.5 3:1", "-1 2:-2.5e-1 3:0 # c", "1 0:1", "1 7:1 5:2", "1 qid:1",
		"2", "", "1 4294967296:1", "1 1:nan", "1e5 3:0x1p3", "1 4294967295:1e-3", "1 2:1e 3:1", "1 2:3#c",
		"-1\t1:0.25\t10:-0.0", "1 01:5", "+1 1:1.2345678901234567",
		// Regression targets (-s 11): real, finite labels.
		"0.27709813 1:0.2", "-1e308 1:1", "inf 1:1", "-nan 2:1", "4.9e-324 3:1", "1.7976931348623157e309 1:1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var row, careful Row
		ok, err := ParseLine(line, &row)
		// The one-pass parser must agree with the careful one exactly.
		cok, cerr := parseCareful(line, &careful)
		if ok != cok || (err == nil) != (cerr == nil) {
			t.Fatalf("%q: ParseLine (%v, %v), parseCareful (%v, %v)", line, ok, err, cok, cerr)
		}
		if err == nil && ok && (math.Float64bits(row.Label) != math.Float64bits(careful.Label) || row.Decimals != careful.Decimals ||
			!slices.Equal(row.Index, careful.Index) || !slices.Equal(row.Value, careful.Value)) {
			t.Fatalf("%q: ParseLine %+v, parseCareful %+v", line, row, careful)
		}
		if err != nil || !ok {
			return
		}
		if math.IsNaN(row.Label) || math.IsInf(row.Label, 0) {
			t.Fatalf("label %v accepted", row.Label)
		}
		prev := uint32(0)
		for q, j := range row.Index {
			if j <= prev {
				t.Fatalf("indices %v accepted", row.Index)
			}
			prev = j
			if math.IsNaN(row.Value[q]) || math.IsInf(row.Value[q], 0) {
				t.Fatalf("value %v accepted", row.Value[q])
			}
		}
	})
}

// TestFastFloatAgainstStrconv: the number parser, with its eight-digit
// step for fractions, against strconv on short decimals in the
// surroundings it meets in a line (a blank and more pairs after it, or
// the line's end), digit counts on both sides of the limits.
func TestFastFloatAgainstStrconv(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	digits := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('0' + rng.IntN(10))
		}
		return string(b)
	}
	for i := 0; i < 200000; i++ {
		num := digits(rng.IntN(9))
		if rng.IntN(8) > 0 {
			num += "." + digits(rng.IntN(11))
		}
		if rng.IntN(10) == 0 {
			num += "e-" + digits(1)
		}
		if rng.IntN(3) == 0 {
			num = "-" + num
		}
		after := []string{"", " 12:0.5", "\t3:1", "  ", ":"}[rng.IntN(5)]
		v, dec, n, ok := fastFloatPrefix([]byte(num + after))
		want, err := strconv.ParseFloat(num, 64)
		if !ok {
			continue // strconv's job, checked by the line tests
		}
		if err != nil || n != len(num) || math.Float64bits(v) != math.Float64bits(want) {
			t.Fatalf("%q then %q: %v (%d bytes), strconv %v (%v)", num, after, v, n, want, err)
		}
		// Decimals counts the digits after the point of a short decimal
		// (15 significant digits at most); longer ones are NotDecimal.
		_, frac, found := strings.Cut(num, ".")
		wantDec := len(frac)
		if sig := strings.TrimLeft(strings.NewReplacer("-", "", ".", "").Replace(num), "0"); len(sig) > 15 {
			wantDec = NotDecimal
		}
		if found && !strings.Contains(num, "e") && dec != wantDec {
			t.Fatalf("%q: %d decimals, want %d", num, dec, wantDec)
		}
	}
}

// TestDigits8 checks the eight-digit step against the digit loop on every
// position of the first non-digit.
func TestDigits8(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < 100000; i++ {
		b := make([]byte, 8)
		for j := range b {
			b[j] = byte(rng.IntN(256))
			if rng.IntN(4) > 0 {
				b[j] = byte('0' + rng.IntN(10))
			}
		}
		var want uint64
		k := 0
		for ; k < 8 && b[k] >= '0' && b[k] <= '9'; k++ {
			want = want*10 + uint64(b[k]-'0')
		}
		if v, n := digits8(b); n != k || v != want {
			t.Fatalf("%q: %d digits %d, want %d digits %d", b, n, v, k, want)
		}
	}
}

// TestEiselLemireMatchesStrconv: numbers of 16 to 19 significant digits
// (real values printed to full precision, shortest forms, random digit
// strings over float64's exponents, subnormals and halfway cases
// included) read to strconv's bits.
func TestEiselLemireMatchesStrconv(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var texts []string
	for range 100000 {
		v := math.Float64frombits(rng.Uint64())
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		texts = append(texts, strconv.FormatFloat(v, 'g', -1, 64), strconv.FormatFloat(v, 'e', 16, 64),
			strconv.FormatFloat(v, 'e', 18, 64), strconv.FormatFloat(rng.Float64(), 'f', 17, 64))
		digits := make([]byte, 16+rng.IntN(4))
		for i := range digits {
			digits[i] = byte('0' + rng.IntN(10))
		}
		digits[0] = byte('1' + rng.IntN(9))
		texts = append(texts, fmt.Sprintf("%s.%se%d", digits[:1], digits[1:], rng.IntN(700)-350))
	}
	// 2^-1074 and halfway points between neighbouring float64s.
	texts = append(texts, "4.9406564584124654e-324", "9007199254740993", "9007199254740992.5", "1.00000000000000011102230246251565",
		"2.2250738585072011e-308", "1.7976931348623157e308", "-0.00000000000000000", "123456789012345678e-20")
	for _, s := range texts {
		want, werr := strconv.ParseFloat(s, 64)
		got, _, err := parseNumber([]byte(s))
		if werr != nil || math.IsInf(want, 0) {
			if err == nil {
				t.Fatalf("%q: read as %v, strconv: %v", s, got, werr)
			}
			continue
		}
		if err != nil || math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("%q: %v (%v), strconv %v", s, got, err, want)
		}
	}
}
