// The field-by-field encoding every message is written in: little-endian
// integers and float64s, lists with their length first, float64 vectors
// 8-byte aligned so that a decoder reads them in place.

package wire

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"unsafe"
)

// enc and dec build and read little-endian payloads.
type enc struct{ b []byte }

func (e *enc) u8(v uint8)   { e.b = append(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) f64(v float64) {
	e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(v))
}
func (e *enc) f64s(v []float64) {
	e.u32(uint32(len(v)))
	e.rawF64s(v)
}

// littleEndian is whether float64s in memory already have the wire's
// byte order, so vectors move with one copy instead of value by value.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// f64Bytes views v's memory as bytes, which are the wire's on a
// little-endian machine.
func f64Bytes(v []float64) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 8*len(v))
}

// pad8 appends zeros until the payload that started at start has a
// length that is a multiple of 8: the float64s after it then start
// 8-byte aligned in a receiver's memory, where they are read in place
// (see f64View).
func (e *enc) pad8(start int) {
	for (len(e.b)-start)%8 != 0 {
		e.b = append(e.b, 0)
	}
}

// rawF64s appends v without a length.
func (e *enc) rawF64s(v []float64) {
	if littleEndian {
		e.b = append(e.b, f64Bytes(v)...)
		return
	}
	for _, x := range v {
		e.f64(x)
	}
}
func (e *enc) u64s(v []uint64) { encList(e, v, e.u64) }
func (e *enc) u32s(v []uint32) { encList(e, v, e.u32) }
func (e *enc) strs(v []string) {
	encList(e, v, func(x string) {
		e.u32(uint32(len(x)))
		e.b = append(e.b, x...)
	})
}

// encList appends v's length, then each entry as put writes it: the
// short lists of a point's header (classes, owners, relays).
func encList[T any](e *enc, v []T, put func(T)) {
	e.u32(uint32(len(v)))
	for _, x := range v {
		put(x)
	}
}

// increasing appends a strictly increasing list as its length and the
// gaps between entries (the first from -1), as uvarints: a shard's
// column map takes 1-2 bytes per column instead of 4.
func (e *enc) increasing(v []uint32) {
	e.u32(uint32(len(v)))
	prev := int64(-1)
	for _, x := range v {
		e.b = binary.AppendUvarint(e.b, uint64(int64(x)-prev-1))
		prev = int64(x)
	}
}

var errTruncated = errors.New("transport: payload truncated")

// dec reads a payload that may be in several pieces: b, then rest.
// Vectors are copied piece by piece, so a point of any size is decoded
// from its chunks without first being put together in one buffer.
type dec struct {
	b    []byte
	rest [][]byte
	err  error
	size int // the whole payload's bytes
}

// decParts reads the pieces in order as one payload.
func decParts(parts [][]byte) dec {
	if len(parts) == 0 {
		return dec{}
	}
	d := dec{b: parts[0], rest: parts[1:]}
	d.size = d.left()
	return d
}

// skipPad reads what enc.pad8 wrote.
func (d *dec) skipPad() {
	if n := (8 - (d.size-d.left())%8) % 8; n > 0 {
		d.take(n)
	}
}

// f64View is b's memory as float64s when it already holds them as the
// wire lays them out: on a little-endian machine, at an 8-byte aligned
// address, a whole number of values. NATS gives every message memory of
// its own, so a vector read this way is never copied; the view keeps
// the message alive.
func f64View(b []byte) ([]float64, bool) {
	if !littleEndian || len(b)%8 != 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 != 0 {
		return nil, false
	}
	if len(b) == 0 {
		return []float64{}, true
	}
	return unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8), true
}

// viewF64s reads n float64s in place when they lie in one piece and
// f64View allows it; otherwise it reads nothing and reports false.
func (d *dec) viewF64s(n int) ([]float64, bool) {
	d.next()
	if d.err != nil || n < 0 || n > len(d.b)/8 {
		return nil, false
	}
	v, ok := f64View(d.b[:8*n])
	if ok {
		d.b = d.b[8*n:]
	}
	return v, ok
}

// left is how many bytes are still to read.
func (d *dec) left() int {
	n := len(d.b)
	for _, p := range d.rest {
		n += len(p)
	}
	return n
}

// next moves to the next non-empty piece once b is used up.
func (d *dec) next() {
	for len(d.b) == 0 && len(d.rest) > 0 {
		d.b, d.rest = d.rest[0], d.rest[1:]
	}
}

func (d *dec) take(n int) []byte {
	if d.err != nil { // the first error is the one to tell
		return nil
	}
	d.next()
	if n >= 0 && n <= len(d.b) {
		out := d.b[:n]
		d.b = d.b[n:]
		return out
	}
	if n < 0 || n > d.left() {
		d.err = errTruncated
		return nil
	}
	out := make([]byte, n) // a read across pieces (scalars and headers)
	d.copyOut(out)
	return out
}

// copyOut fills out from the pieces; the caller has checked they hold it.
func (d *dec) copyOut(out []byte) {
	for len(out) > 0 {
		d.next()
		k := copy(out, d.b)
		out, d.b = out[k:], d.b[k:]
	}
}

func (d *dec) u8() uint8 {
	if b := d.take(1); b != nil {
		return b[0]
	}
	return 0
}
func (d *dec) u32() uint32 {
	if b := d.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}
func (d *dec) u64() uint64 {
	if b := d.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}
func (d *dec) f64() float64 { return math.Float64frombits(d.u64()) }

// count reads a length prefix and checks the payload can hold that many
// items of size bytes before anything is allocated.
func (d *dec) count(size int) int {
	n := int(d.u32())
	if d.err == nil && n*size > d.left() {
		d.err = errTruncated
		return 0
	}
	return n
}
func (d *dec) f64s() []float64 {
	out := make([]float64, d.count(8))
	d.rawF64s(out)
	return out
}

// rawF64s fills out from the payload.
func (d *dec) rawF64s(out []float64) {
	if littleEndian && len(out) > 0 {
		if d.err == nil && 8*len(out) > d.left() {
			d.err = errTruncated
		}
		if d.err == nil {
			d.copyOut(f64Bytes(out))
		}
		return
	}
	for i := range out {
		out[i] = d.f64()
	}
}
func (d *dec) u64s() []uint64 {
	n := d.count(8)
	out := make([]uint64, n)
	for i := range out {
		out[i] = d.u64()
	}
	return out
}

// u64sInto is u64s into dst's memory when it is large enough.
func (d *dec) u64sInto(dst []uint64) []uint64 {
	n := d.count(8)
	dst = slices.Grow(dst[:0], n)[:n]
	for i := range dst {
		dst[i] = d.u64()
	}
	return dst
}
func (d *dec) strs() []string {
	out := make([]string, d.count(4))
	for i := range out {
		out[i] = string(d.take(d.count(1)))
	}
	return out
}
func (d *dec) u32s() []uint32 {
	n := d.count(4)
	out := make([]uint32, n)
	for i := range out {
		out[i] = d.u32()
	}
	return out
}

// increasing reads what enc.increasing wrote, refusing entries beyond
// uint32.
func (d *dec) increasing() []uint32 {
	if len(d.rest) > 0 { // uvarints are read from one piece
		d.b, d.rest = slices.Concat(append([][]byte{d.b}, d.rest...)...), nil
	}
	n := d.count(1)
	out := make([]uint32, n)
	next := uint64(0) // the smallest the next entry may be
	for i := range out {
		if d.err != nil {
			return nil
		}
		gap, k := binary.Uvarint(d.b)
		if k <= 0 {
			d.err = errTruncated
			return nil
		}
		d.b = d.b[k:]
		if gap > math.MaxUint32 || next+gap > math.MaxUint32 {
			d.err = errors.New("transport: increasing list beyond uint32")
			return nil
		}
		out[i] = uint32(next + gap)
		next += gap + 1
	}
	return out
}

func (d *dec) done() error {
	if d.err == nil && d.left() != 0 {
		return errors.New("transport: trailing bytes in payload")
	}
	return d.err
}
