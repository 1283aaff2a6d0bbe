// A round's partial sums on the wire: dense or sparse gradients, and the
// relays of the reduction tree.

package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/osgm-svm/osgm/pkg/reduce"
)

// EncodePartial lays out one shard's partial sums: the four vectors'
// lengths and the gradient's bitmap size, then their values and the
// compute time, every float64 8-byte aligned from the payload's start so
// that they are read in place.
//
// The gradient goes as its entries that are not +0, after a bitmap of
// which they are, when at least a quarter are +0: a column's entry is +0
// in a problem where no row holding it is active, and near news20.t's
// optimum three quarters of a node sum's entries are, while sums are the
// bulk of what goes up. -0 goes as a value, so decoding gives back the
// sums to the bit.
func EncodePartial(p *reduce.Partial) []byte { return AppendPartial(nil, p) }

// A gradient goes sparse when at least 1/sparseShare of it is +0.
const sparseShare = 4

// sparseLayout is the size of the bitmap of g's entries that are not +0
// (0 when g goes whole) and how many values g sends.
func sparseLayout(g []float64, whole bool) (words, values int) {
	zeros := 0
	for _, x := range g {
		if math.Float64bits(x) == 0 {
			zeros++
		}
	}
	if whole || len(g) < 64 || zeros*sparseShare < len(g) {
		return 0, len(g)
	}
	return (len(g) + 63) / 64, len(g) - zeros
}

// AppendPartial is EncodePartial appending to dst.
func AppendPartial(dst []byte, p *reduce.Partial) []byte { return AppendPartialAs(dst, p, false) }

// AppendPartialAs is AppendPartial that sends the gradient whole when
// whole is set, whatever its +0 entries.
func AppendPartialAs(dst []byte, p *reduce.Partial, whole bool) []byte {
	words, values := sparseLayout(p.Grad, whole)
	return appendPartial(dst, p, words, values)
}

// appendPartial is AppendPartial with the gradient's layout known.
func appendPartial(dst []byte, p *reduce.Partial, words, values int) []byte {
	// One value more of room: the sparse loop below writes each entry
	// where the next value goes, and moves on only past those not +0.
	e := enc{b: slices.Grow(dst, 24+8*(2*len(p.Loss)+words+values+len(p.Hess)+2))}
	e.partialHead(p, words)
	e.rawF64s(p.Loss)
	e.rawF64s(p.BiasGrad)
	if words == 0 {
		e.rawF64s(p.Grad)
	} else {
		at := len(e.b)
		e.b = e.b[:at+8*(words+values+1)]
		bitmap, vals := e.b[at:at+8*words], e.b[at+8*words:]
		n := 0
		for w := range words {
			var word uint64
			for i, x := range p.Grad[64*w : min(64*w+64, len(p.Grad))] {
				// Without a branch: where and whether entries are +0
				// follows no pattern a predictor learns.
				b := math.Float64bits(x)
				set := (b | -b) >> 63
				word |= set << i
				binary.LittleEndian.PutUint64(vals[8*n:], b)
				n += int(set)
			}
			binary.LittleEndian.PutUint64(bitmap[8*w:], word)
		}
		e.b = e.b[:len(e.b)-8]
	}
	e.rawF64s(p.Hess)
	e.f64(p.Seconds)
	return e.b
}

func (e *enc) partialHead(p *reduce.Partial, words int) {
	for _, v := range [][]float64{p.Loss, p.BiasGrad, p.Grad, p.Hess} {
		e.u32(uint32(len(v)))
	}
	e.u32(uint32(words))
	e.u32(0) // the values start 8-byte aligned
}

// PartialPieces is AppendPartial's payload as pieces that view p's
// vectors rather than copy them (on little-endian machines): a worker
// sends a node sum of a million columns and keeps it for resends without
// a second copy. The pieces are valid while p's memory is. A sparse
// gradient is laid out in buf's memory instead, as one piece.
func PartialPieces(p *reduce.Partial, buf []byte, whole bool) [][]byte {
	if words, values := sparseLayout(p.Grad, whole); !littleEndian || words > 0 {
		return [][]byte{appendPartial(buf[:0], p, words, values)}
	}
	var head, tail enc
	head.partialHead(p, 0)
	tail.f64(p.Seconds)
	pieces := [][]byte{head.b}
	for _, v := range [][]float64{p.Loss, p.BiasGrad, p.Grad, p.Hess} {
		pieces = append(pieces, f64Bytes(v))
	}
	return append(pieces, tail.b)
}

// DecodePartial reads a partial for shard id.
func DecodePartial(id int, b []byte) (*reduce.Partial, error) {
	return DecodePartialInto(id, b, nil, nil)
}

// DecodePartialInto is DecodePartial into p (p may be nil): the
// coordinator decodes each round's partials into the last round's. The
// vectors are views of b where f64View allows, so b must then stay
// untouched while p is used; elsewhere they are fresh copies (never p's
// old vectors, which may view a payload since put to other use). A sparse
// gradient is laid out whole in *grad's memory (grad may be nil).
func DecodePartialInto(id int, b []byte, p *reduce.Partial, grad *[]float64) (*reduce.Partial, error) {
	if p == nil {
		p = new(reduce.Partial)
	}
	d := decParts([][]byte{b})
	var n [4]uint64
	for i := range n {
		n[i] = uint64(d.u32())
	}
	words, pad := uint64(d.u32()), d.u32()
	if d.err != nil {
		return nil, d.err
	}
	if pad != 0 || (words != 0 && words != (n[2]+63)/64) {
		return nil, fmt.Errorf("transport: partial: a bitmap of %d words for a gradient of %d", words, n[2])
	}
	sent := n[2] // gradient values that travel
	if words > 0 {
		sent = 0
		if 8*(n[0]+n[1]+words) > uint64(d.left()) {
			return nil, errTruncated
		}
	}
	if words == 0 && 8*(n[0]+n[1]+n[2]+n[3]+1) != uint64(d.left()) {
		return nil, fmt.Errorf("transport: partial: vectors of %d, %d, %d and %d values do not match %d bytes", n[0], n[1], n[2], n[3], d.left())
	}
	vec := func(n uint64) []float64 {
		v, ok := d.viewF64s(int(n))
		if !ok {
			v = make([]float64, n)
			d.rawF64s(v)
		}
		return v
	}
	*p = reduce.Partial{Shard: id, Loss: vec(n[0]), BiasGrad: vec(n[1])}
	// The bitmap is read in place too, as the float64s whose bits its
	// words are: no allocation a message.
	var bitmap []float64
	if words > 0 {
		bitmap = vec(words)
		for _, w := range bitmap {
			sent += uint64(bits.OnesCount64(math.Float64bits(w)))
		}
		if r := n[2] % 64; r != 0 && math.Float64bits(bitmap[words-1])>>r != 0 {
			return nil, errors.New("transport: partial: bitmap past the gradient's end")
		}
		if 8*(sent+n[3]+1) != uint64(d.left()) {
			return nil, fmt.Errorf("transport: partial: %d gradient and %d Hessian values do not match %d bytes", sent, n[3], d.left())
		}
	}
	p.Grad = vec(sent)
	if words > 0 {
		p.Grad = expand(p.Grad, bitmap, int(n[2]), grad)
	}
	p.Hess = vec(n[3])
	p.Seconds = d.f64()
	if err := d.done(); err != nil {
		return nil, err
	}
	if len(p.Loss) != len(p.BiasGrad) {
		return nil, errors.New("transport: partial: sizes differ")
	}
	if !(p.Seconds >= 0 && p.Seconds < 1e9) {
		return nil, errors.New("transport: partial: compute time out of range")
	}
	return p, nil
}

// expand lays out the values of a sparse gradient of n entries, those of
// bitmap's set bits in order (its words held as float64s' bits), in
// *buf's memory (buf may be nil), +0 elsewhere.
func expand(vals, bitmap []float64, n int, buf *[]float64) []float64 {
	var out []float64
	if buf != nil && cap(*buf) >= n {
		out = (*buf)[:n]
		clear(out)
	} else {
		out = make([]float64, n)
		if buf != nil {
			*buf = out
		}
	}
	i := 0
	for w, f := range bitmap {
		for word := math.Float64bits(f); word != 0; word &= word - 1 {
			out[64*w+bits.TrailingZeros64(word)] = vals[i]
			i++
		}
	}
	return out
}

// RelayPieces is a dense sum's payload as it goes between workers (see
// Point.Owners): the hops between workers its terms have taken at most,
// then the sum as PartialPieces lays it out.
func RelayPieces(hops int, p *reduce.Partial, buf []byte, whole bool) [][]byte {
	var e enc
	e.u32(uint32(hops))
	e.u32(0) // the partial starts 8-byte aligned
	return append([][]byte{e.b}, PartialPieces(p, buf, whole)...)
}

// DecodeRelay reads RelayPieces' payload for shard or node id, as
// DecodePartialInto does.
func DecodeRelay(id int, b []byte, p *reduce.Partial, grad *[]float64) (hops int, _ *reduce.Partial, err error) {
	if len(b) < 8 || binary.LittleEndian.Uint32(b[4:]) != 0 {
		return 0, nil, errors.New("transport: relayed sum: bad head")
	}
	hops = int(binary.LittleEndian.Uint32(b))
	if hops > 1<<16 {
		return 0, nil, fmt.Errorf("transport: relayed sum: %d hops", hops)
	}
	p, err = DecodePartialInto(id, b[8:], p, grad)
	return hops, p, err
}
