package libsvm

import (
	"math"
	"math/big"
	"math/bits"
)

// Real values written to full precision (17 significant digits, as
// measurements and %.17g write them) are past Clinger's exact fast path,
// which needs a mantissa below 2^53. The Eisel-Lemire algorithm converts
// a mantissa of up to 19 digits and a power of ten with a 128-bit
// approximation of the power, and says when it cannot decide the
// rounding (rarely), where strconv takes over. strconv uses the same
// algorithm inside ParseFloat, but its own scan of the text cost ten
// times the conversion on such files (real200k's profile), and halved
// their load once done here. This is Go's strconv/eisel_lemire.go
// (BSD licence), after Lemire, "Number Parsing at a Gigabyte per Second"
// (2021); TestEiselLemireMatchesStrconv holds it to strconv's bits.

const (
	minExp10 = -348
	maxExp10 = 347
)

// powersOfTen[e-minExp10] is 10^e's mantissa, normalised to 128 bits
// (the top one set) and rounded down, as {low, high} 64 bits: computed
// exactly once, rather than kept as a 700-line table.
var powersOfTen = func() [maxExp10 - minExp10 + 1][2]uint64 {
	var t [maxExp10 - minExp10 + 1][2]uint64
	ten, m := big.NewInt(10), new(big.Int)
	mask := new(big.Int).SetUint64(math.MaxUint64)
	for e := minExp10; e <= maxExp10; e++ {
		p := new(big.Int).Exp(ten, big.NewInt(int64(max(e, -e))), nil)
		if e >= 0 {
			if n := p.BitLen(); n > 128 {
				m.Rsh(p, uint(n-128))
			} else {
				m.Lsh(p, uint(128-n))
			}
		} else {
			// 2^(127+n) / 10^-e lies in (2^127, 2^128): 128 bits.
			m.Quo(new(big.Int).Lsh(big.NewInt(1), uint(127+p.BitLen())), p)
		}
		lo := new(big.Int).And(m, mask)
		hi := new(big.Int).Rsh(m, 64)
		t[e-minExp10] = [2]uint64{lo.Uint64(), hi.Uint64()}
	}
	return t
}()

// eiselLemire64 is man·10^exp10 correctly rounded, for man > 0 (the
// parser's are of 16 digits or more), and false where it cannot tell
// (then strconv decides).
func eiselLemire64(man uint64, exp10 int, neg bool) (float64, bool) {
	if exp10 < minExp10 || exp10 > maxExp10 {
		return 0, false
	}
	clz := bits.LeadingZeros64(man)
	man <<= uint(clz)
	const bias = 1023
	retExp2 := uint64(217706*exp10>>16+64+bias) - uint64(clz)
	pow := &powersOfTen[exp10-minExp10]
	xHi, xLo := bits.Mul64(man, pow[1])
	if xHi&0x1FF == 0x1FF && xLo+man < man { // a wider approximation
		yHi, yLo := bits.Mul64(man, pow[0])
		mergedHi, mergedLo := xHi, xLo+yHi
		if mergedLo < xLo {
			mergedHi++
		}
		if mergedHi&0x1FF == 0x1FF && mergedLo+1 == 0 && yLo+man < man {
			return 0, false
		}
		xHi, xLo = mergedHi, mergedLo
	}
	msb := xHi >> 63
	mant := xHi >> (msb + 9) // 54 bits
	retExp2 -= 1 ^ msb
	if xLo == 0 && xHi&0x1FF == 0 && mant&3 == 1 {
		return 0, false // half-way: the truncated power cannot say
	}
	mant += mant & 1
	mant >>= 1
	if mant>>53 > 0 {
		mant >>= 1
		retExp2++
	}
	if retExp2-1 >= 0x7FF-1 { // subnormal, or past float64's range
		return 0, false
	}
	b := retExp2<<52 | mant&(1<<52-1)
	if neg {
		b |= 1 << 63
	}
	return math.Float64frombits(b), true
}
