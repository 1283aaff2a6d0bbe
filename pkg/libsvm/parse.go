// Package libsvm reads and writes the file formats LIBSVM and LIBLINEAR users
// already have: sparse training data (`label idx:val ...`, also SVMlight) and
// LIBLINEAR model files.
package libsvm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"unsafe"
)

// MaxIndex is the largest feature index the reader accepts: indices are
// stored as uint32 zero-based, so the largest one-based index is 2^32-1.
const MaxIndex = math.MaxUint32

// Row is one parsed line. Index holds one-based feature indices in strictly
// increasing order; Value the matching values. The slices are reused by the
// next call that fills the same Row.
type Row struct {
	Label float64
	Index []uint32
	Value []float64
	// Decimals is the most digits after the decimal point any value of
	// the row was written with (1e-3 counts 3, 2e3 counts -3), or
	// NotDecimal when a value was not a short decimal. Storage uses it to
	// keep values as exact scaled integers.
	Decimals int
}

// NotDecimal marks a row with a value that is not a decimal of at most 15
// significant digits.
const NotDecimal = 1 << 10

// ParseLine parses one line of LIBSVM text (without its line end) into row.
// It reports ok=false for lines with no data (blank or comment only).
// Errors describe the problem only; callers add the file and line.
func ParseLine(line []byte, row *Row) (ok bool, err error) {
	if ok, handled := parseFast(line, row); handled {
		return ok, nil
	}
	return parseCareful(line, row)
}

// parseFast parses the common line, label then idx:value pairs of short
// numbers separated by blanks, in one pass over the bytes. Anything else
// (a comment, an error, a number strconv must read) makes it report
// handled=false, and parseCareful parses the line again, the slow way
// that explains errors. FuzzParseLine checks the two agree.
func parseFast(line []byte, row *Row) (ok, handled bool) {
	row.Index = row.Index[:0]
	row.Value = row.Value[:0]
	row.Decimals = -NotDecimal
	p := skipSpace(line, 0)
	if p == len(line) {
		return false, true
	}
	lab, _, n, good := fastFloatPrefix(line[p:])
	p += n
	if !good || (p < len(line) && !isSpace(line[p])) {
		return false, false
	}
	row.Label = lab
	prev := uint64(0)
	for {
		p = skipSpace(line, p)
		if p == len(line) {
			return true, true
		}
		q := p
		var idx uint64
		for ; q < len(line) && q-p < 10; q++ {
			d := line[q] - '0'
			if d > 9 {
				break
			}
			idx = idx*10 + uint64(d)
		}
		if q == p || q == len(line) || line[q] != ':' || idx <= prev || idx > MaxIndex {
			return false, false
		}
		prev = idx
		// "1" alone is most values of binary data (w8a, a9a, rcv1): it
		// skips the number reader.
		v, dec, n, good := 1.0, 0, 1, true
		if q+2 > len(line) || line[q+1] != '1' || (q+2 < len(line) && !isSpace(line[q+2])) {
			v, dec, n, good = fastFloatPrefix(line[q+1:])
			if e := q + 1 + n; !good || (e < len(line) && !isSpace(line[e])) {
				v, dec, n, good = longFloat(line[q+1:])
			}
		}
		q += 1 + n
		if !good || (q < len(line) && !isSpace(line[q])) {
			return false, false
		}
		row.Decimals = max(row.Decimals, dec)
		row.Index = append(row.Index, uint32(idx))
		row.Value = append(row.Value, v)
		p = q
	}
}

// longFloat reads the token at the start of b as parseNumber does a
// number the fast path cannot (strconv): a real value written to full
// precision (17 digits) then costs its own parse, not the line's again
// (real200k's load took a fifth longer that way). It declines what
// parseNumber refuses, which parseCareful then explains.
func longFloat(b []byte) (v float64, dec, n int, ok bool) {
	n = tokenEnd(b, 0)
	v, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(b), n), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, 0, 0, false
	}
	return v, NotDecimal, n, true
}

// parseCareful is ParseLine token by token, with an error for each way a
// line can be wrong.
func parseCareful(line []byte, row *Row) (ok bool, err error) {
	row.Index = row.Index[:0]
	row.Value = row.Value[:0]
	row.Decimals = -NotDecimal
	// A comment runs to the end of the line.
	for i, c := range line {
		if c == '#' {
			line = line[:i]
			break
		}
	}
	p := skipSpace(line, 0)
	if p == len(line) {
		return false, nil
	}
	end := tokenEnd(line, p)
	lab, _, err := parseNumber(line[p:end])
	if err != nil {
		return false, fmt.Errorf("label: %w", err)
	}
	row.Label = lab
	p = end
	prev := uint64(0)
	for {
		p = skipSpace(line, p)
		if p == len(line) {
			return true, nil
		}
		end = tokenEnd(line, p)
		tok := line[p:end]
		p = end
		colon := -1
		for i, c := range tok {
			if c == ':' {
				colon = i
				break
			}
		}
		if colon < 0 {
			return false, fmt.Errorf("%q is not idx:value", tok)
		}
		idxTok, valTok := tok[:colon], tok[colon+1:]
		if string(idxTok) == "qid" {
			return false, errors.New("qid is not supported")
		}
		idx, err := parseIndex(idxTok)
		if err != nil {
			return false, err
		}
		if idx <= prev {
			return false, fmt.Errorf("index %d after %d: indices must increase", idx, prev)
		}
		prev = idx
		if len(valTok) == 0 {
			return false, fmt.Errorf("index %d has no value", idx)
		}
		v, dec, err := parseNumber(valTok)
		if err != nil {
			return false, fmt.Errorf("index %d: %w", idx, err)
		}
		row.Decimals = max(row.Decimals, dec)
		row.Index = append(row.Index, uint32(idx))
		row.Value = append(row.Value, v)
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' }

func skipSpace(b []byte, p int) int {
	for p < len(b) && isSpace(b[p]) {
		p++
	}
	return p
}

func tokenEnd(b []byte, p int) int {
	for p < len(b) && !isSpace(b[p]) {
		p++
	}
	return p
}

// parseIndex reads a decimal one-based feature index.
func parseIndex(b []byte) (uint64, error) {
	if len(b) == 0 {
		return 0, errors.New("empty feature index")
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("feature index %q is not a positive integer", b)
		}
		if v > MaxIndex {
			continue // keep scanning for bad digits; the value is too large anyway
		}
		v = v*10 + uint64(c-'0')
	}
	if v == 0 {
		return 0, errors.New("feature index 0 (indices start at 1)")
	}
	if v > MaxIndex {
		if len(b) > 20 {
			return 0, fmt.Errorf("index %s… out of range (largest is %d)", b[:20], uint64(MaxIndex))
		}
		return 0, fmt.Errorf("index %s out of range (largest is %d)", b, uint64(MaxIndex))
	}
	return v, nil
}

// digits8 reads the ASCII digits that start b[:8] at once: their count k
// (8 when all eight are digits) and the number they write. b must have 8
// bytes. This is the SWAR form of the digit loop: a byte is a digit when
// its high nibble is 3 and its low nibble plus 6 does not carry; the
// three multiplications then add neighbouring digits in pairs, pairs of
// pairs and pairs of those (Lemire's eight-digit parse).
func digits8(b []byte) (v uint64, k int) {
	x := binary.LittleEndian.Uint64(b)
	bad := (x&0xF0F0F0F0F0F0F0F0 ^ 0x3030303030303030) | ((x&0x0F0F0F0F0F0F0F0F)+0x0606060606060606)&0xF0F0F0F0F0F0F0F0
	k = bits.TrailingZeros64(bad) >> 3
	// Non-digits after the k digits are shifted out (all of it when k is
	// 0: Go's shifts by 64 give 0); the first digit, the lowest byte,
	// becomes the most significant.
	y := (x - 0x3030303030303030) << (64 - 8*k)
	y = (y & 0x0F0F0F0F0F0F0F0F) * 2561 >> 8
	y = (y & 0x00FF00FF00FF00FF) * 6553601 >> 16
	y = (y & 0x0000FFFF0000FFFF) * 42949672960001 >> 32
	return y, k
}

// pow10 holds the powers of ten that float64 represents exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// parseNumber converts a decimal number. The common forms (`1`, `-0.25`,
// `2.5e-3`) with at most 15 significant digits go through Clinger's fast
// path, which is exact: the mantissa and the power of ten are both exactly
// representable, so one IEEE multiplication or division rounds correctly.
// Everything else goes to strconv, which is correct for all inputs.
func parseNumber(b []byte) (float64, int, error) {
	if v, dec, ok := fastFloat(b); ok {
		return v, dec, nil
	}
	v, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(b), len(b)), 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && ne.Err == strconv.ErrRange {
			return 0, 0, fmt.Errorf("%q is out of the range of float64", b)
		}
		return 0, 0, fmt.Errorf("%q is not a number", b)
	}
	if math.IsNaN(v) {
		return 0, 0, errors.New("value is NaN")
	}
	if math.IsInf(v, 0) {
		return 0, 0, errors.New("value is infinite")
	}
	return v, NotDecimal, nil
}

func fastFloat(b []byte) (float64, int, bool) {
	v, dec, n, ok := fastFloatPrefix(b)
	if !ok || n != len(b) {
		return 0, 0, false
	}
	return v, dec, true
}

// fastFloatPrefix reads the number at the start of b when it has at most
// 15 significant digits and a power of ten a float64 holds exactly (then
// one multiplication or division is correctly rounded), and says how many
// bytes it took.
func fastFloatPrefix(b []byte) (v float64, dec, n int, ok bool) {
	i, neg := 0, false
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		neg = b[i] == '-'
		i++
	}
	var mant uint64
	digits, frac, any := 0, 0, false
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		any = true
		if mant == 0 && b[i] == '0' {
			continue // leading zeros are not significant
		}
		mant = mant*10 + uint64(b[i]-'0')
		digits++
	}
	if i < len(b) && b[i] == '.' {
		i++
		// The common fraction, up to 7 digits ending within the next 8
		// bytes, is read in one step when the whole number then has at
		// most 15 digits (an integer part of at most 7).
		read := false
		if digits <= 7 && len(b)-i >= 8 {
			if v, k := digits8(b[i:]); k < 8 {
				mant = mant*uint64(pow10[k]) + v
				frac, i, read = k, i+k, true
				any = any || k > 0
			}
		}
		for ; !read && i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			any = true
			frac++
			if mant == 0 && b[i] == '0' {
				continue
			}
			mant = mant*10 + uint64(b[i]-'0')
			digits++
		}
	}
	if !any || digits > 19 { // past 19, mant overflowed
		return 0, 0, 0, false
	}
	exp := -frac
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		eneg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			eneg = b[i] == '-'
			i++
		}
		e, edigits := 0, 0
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			edigits++
			if e < 10000 {
				e = e*10 + int(b[i]-'0')
			}
		}
		if edigits == 0 {
			return 0, 0, 0, false
		}
		if eneg {
			e = -e
		}
		exp += e
	}
	f, dec, ok := decimal(mant, exp, digits, neg)
	return f, dec, i, ok
}

// decimal is mant·10^exp, of digits significant digits, correctly
// rounded, and its digits after the point as Row.Decimals counts them
// (NotDecimal past 15 digits); false where strconv must decide.
func decimal(mant uint64, exp, digits int, neg bool) (float64, int, bool) {
	if digits > 15 {
		f, ok := eiselLemire64(mant, exp, neg)
		return f, NotDecimal, ok
	}
	f := float64(mant)
	switch {
	case mant == 0:
	case exp >= 0 && exp <= 22:
		f *= pow10[exp]
	case exp < 0 && exp >= -22:
		f /= pow10[-exp]
	default:
		return 0, 0, false
	}
	if neg {
		f = -f
	}
	return f, -exp, true
}
