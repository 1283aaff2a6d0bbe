package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"unsafe"

	"github.com/osgm-svm/osgm/pkg/cols"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/shard"
)

func chunksOf(t testing.TB, kind Kind, round uint64, id uint32, payload []byte, max int) [][]byte {
	var out [][]byte
	err := Chunks(kind, 7, round, id, payload, max, func(b []byte) error {
		out = append(out, bytes.Clone(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestChunksReassembleInAnyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	var a Assembler // one for all: each message may be put together in the last one's memory
	for round, size := range []int{0, 1, 59, 60, 61, 1000, 12345, 999, 12345} {
		payload := make([]byte, size)
		for i := range payload {
			payload[i] = byte(rng.IntN(256))
		}
		chunks := chunksOf(t, KindPartial, uint64(round), 9, payload, HeaderSize+20)
		if want := max((size+19)/20, 1); len(chunks) != want {
			t.Fatalf("size %d: %d chunks, want %d", size, len(chunks), want)
		}
		rng.Shuffle(len(chunks), func(i, j int) { chunks[i], chunks[j] = chunks[j], chunks[i] })
		if len(chunks) > 1 {
			chunks = append(chunks, chunks[0]) // a duplicate must not confuse it
		}
		var got []byte
		done := 0
		for _, c := range chunks {
			h, p, err := DecodeChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			if whole, ok := a.Add(h, p); ok {
				got = whole
				done++
			}
		}
		if done != 1 || !bytes.Equal(got, payload) {
			t.Fatalf("size %d: reassembled %d times, equal=%v", size, done, bytes.Equal(got, payload))
		}
		a.Recycle(got)
	}
}

// misaligned is b's bytes at an address that is not 8-byte aligned.
func misaligned(b []byte) []byte {
	buf := make([]byte, len(b)+1)[1:]
	copy(buf, b)
	return buf
}

// within reports whether v's memory lies inside b's.
func within(v []float64, b []byte) bool {
	if len(v) == 0 || len(b) == 0 {
		return false
	}
	lo, hi := uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&b[len(b)-1]))
	p := uintptr(unsafe.Pointer(&v[0]))
	return p >= lo && p <= hi
}

// TestDecodingInPlace: vectors are read as views of an aligned payload,
// copied nowhere; from a misaligned one a point is copied into the last
// point's memory when it is large enough, and a partial into fresh
// memory. What comes out is what was encoded in every case.
func TestDecodingInPlace(t *testing.T) {
	mk := func(x float64, dim int) *Point {
		p := &Point{Op: OpHessVec, Labels: []float64{1, -1, 3}, X: [][]float64{make([]float64, dim)}, V: [][]float64{make([]float64, dim)}}
		for j := range dim {
			p.X[0][j], p.V[0][j] = x+float64(j), x-float64(j)
		}
		return p
	}
	old, err := DecodePoint(misaligned(EncodePoint(mk(1, 5))))
	if err != nil {
		t.Fatal(err)
	}
	buf := EncodePoint(mk(1, 5))
	for _, dim := range []int{5, 3, 8} {
		want := mk(float64(dim)*10, dim)
		buf = AppendPoint(buf[:0], want)
		if !bytes.Equal(buf, EncodePoint(want)) {
			t.Fatalf("dim %d: AppendPoint into old bytes differs from EncodePoint", dim)
		}
		if pieces := PointPieces(nil, want); !bytes.Equal(slices.Concat(pieces...), buf) {
			t.Fatalf("dim %d: the point's pieces differ from its encoding", dim)
		}
		got, err := DecodePoint(buf)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.X[0], want.X[0]) || !slices.Equal(got.V[0], want.V[0]) || !within(got.X[0], buf) || !within(got.V[0], buf) {
			t.Fatalf("dim %d: from aligned bytes decoded %v %v, want %v %v as views", dim, got.X[0], got.V[0], want.X[0], want.V[0])
		}
		oldX := &old.X[0][:1][0]
		off := misaligned(buf)
		got, err = DecodePointInto(off, old)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.X[0], want.X[0]) || !slices.Equal(got.V[0], want.V[0]) || within(got.X[0], off) {
			t.Fatalf("dim %d: from misaligned bytes decoded %v %v, want %v %v copied", dim, got.X[0], got.V[0], want.X[0], want.V[0])
		}
		if reused := &got.X[0][0] == oldX; reused != (dim <= cap(old.X[0])) {
			t.Fatalf("dim %d: reused old memory %v with capacity %d", dim, reused, cap(old.X[0]))
		}
		old = got
	}

	var into reduce.Partial
	for _, n := range []int{4, 2, 6} {
		want := &reduce.Partial{Shard: 3, Loss: []float64{float64(n)}, BiasGrad: []float64{-1}, Grad: make([]float64, n), Hess: []float64{2, 3, 5}, Seconds: 0.25}
		for j := range want.Grad {
			want.Grad[j] = float64(n * j)
		}
		enc := AppendPartial(nil, want)
		if !bytes.Equal(slices.Concat(PartialPieces(want, nil, false)...), enc) {
			t.Fatalf("partial of %d: its pieces differ from its encoding", n)
		}
		for _, b := range [][]byte{enc, misaligned(enc)} {
			oldGrad := into.Grad
			got, err := DecodePartialInto(3, b, &into, nil)
			if err != nil || got != &into || !slices.Equal(got.Grad, want.Grad) || !slices.Equal(got.Loss, want.Loss) ||
				!slices.Equal(got.BiasGrad, want.BiasGrad) || !slices.Equal(got.Hess, want.Hess) || got.Seconds != want.Seconds || got.Shard != 3 || got.Group {
				t.Fatalf("partial of %d: %v %+v", n, err, got)
			}
			aligned := uintptr(unsafe.Pointer(&b[0]))%8 == 0
			if within(got.Grad, b) != aligned || within(got.Loss, b) != aligned || within(got.Hess, b) != aligned {
				t.Fatalf("partial of %d: views %v of a payload aligned %v", n, within(got.Grad, b), aligned)
			}
			if len(oldGrad) > 0 && &got.Grad[0] == &oldGrad[0] {
				t.Fatalf("partial of %d: decoded into the last partial's vector", n)
			}
		}
	}
}

// TestPointFromChunks: a worker decodes a point from its chunks' payloads
// without joining them. Chunks of 13 bytes cut every scalar and vector
// value across pieces; the point must be the one encoded, in the old
// point's memory.
func TestPointFromChunks(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	want := &Point{Op: OpHessVec, Labels: []float64{1, -1, 2}, Classes: []uint32{0, 2}, Stamp: 7, Rows: 99, Starts: []uint64{0, 50}, Relays: []string{"w-1", "w-2"}, Owners: []uint32{1, 0, 1}, X: [][]float64{make([]float64, 37), make([]float64, 37)}, V: [][]float64{make([]float64, 37), make([]float64, 37)}, Terms: shard.Terms{Weights: []float64{1, 2, 3, 4}}}
	for _, vs := range [][][]float64{want.X, want.V} {
		for _, v := range vs {
			for j := range v {
				v[j] = rng.NormFloat64()
			}
		}
	}
	chunks := chunksOf(t, KindPoint, 5, 0, EncodePoint(want), HeaderSize+13)
	rng.Shuffle(len(chunks), func(i, j int) { chunks[i], chunks[j] = chunks[j], chunks[i] })
	var a Assembler
	var parts [][]byte
	for _, c := range chunks {
		h, p, err := DecodeChunk(c)
		if err != nil {
			t.Fatal(err)
		}
		if ps, ok := a.AddParts(h, p); ok {
			parts = ps
		}
	}
	if len(parts) != len(chunks) {
		t.Fatalf("%d parts from %d chunks", len(parts), len(chunks))
	}
	old, _ := DecodePoint(EncodePoint(want))
	oldX := &old.X[1][0]
	got, err := DecodePointParts(parts, old)
	if err != nil {
		t.Fatal(err)
	}
	if &got.X[1][0] != oldX {
		t.Fatal("not decoded into the old point's memory")
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	if _, err := DecodePointParts(parts[:len(parts)-1], nil); err == nil {
		t.Fatal("a point missing its last chunk was accepted")
	}
}

// TestPiecesAreThePayload: a node sum sent from views of its memory must
// be, chunk for chunk, the message its encoding gives.
func TestPiecesAreThePayload(t *testing.T) {
	for _, p := range []*reduce.Partial{
		{Loss: []float64{1}, BiasGrad: []float64{2}, Grad: []float64{3, 4, 5}, Seconds: 0.5},
		{Loss: []float64{1, 2}, BiasGrad: []float64{3, 4}, Grad: []float64{5, 6, 7, 8, 9, 10, 11}, Hess: []float64{12, 13, 14}},
		{Loss: []float64{1}, BiasGrad: []float64{0}},
	} {
		want := EncodePartial(p)
		if got := bytes.Join(PartialPieces(p, nil, false), nil); !bytes.Equal(got, want) {
			t.Fatalf("pieces %x, encoding %x", got, want)
		}
		for _, size := range []int{HeaderSize + 1, HeaderSize + 7, HeaderSize + 1000} {
			var c Chunker
			var got [][]byte
			c.SendPieces(KindGroup, 7, 2, 3, PartialPieces(p, nil, false), size, func(b []byte) error { got = append(got, slices.Clone(b)); return nil })
			if w := chunksOf(t, KindGroup, 2, 3, want, size); !reflect.DeepEqual(got, w) {
				t.Fatalf("chunks of %d bytes differ from the encoding's", size)
			}
		}
	}
}

// TestDecodeChunkRejects is the table of bad chunks: each is refused with
// its own error, so receivers can count them by kind.
func TestDecodeChunkRejects(t *testing.T) {
	good := chunksOf(t, KindPoint, 1, 0, []byte("payload"), 1<<20)[0]
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"short", good[:10], ErrShort},
		{"version", mutate(func(b []byte) []byte { b[0] = Version - 1; return b }), ErrVersion},
		{"kind 0", mutate(func(b []byte) []byte { b[1] = 0; return b }), ErrKind},
		{"kind 200", mutate(func(b []byte) []byte { b[1] = 200; return b }), ErrKind},
		{"length", mutate(func(b []byte) []byte { return b[:len(b)-1] }), ErrLength},
		{"seq >= total", mutate(func(b []byte) []byte { b[24] = 5; return b }), ErrChunk},
		{"total 0", mutate(func(b []byte) []byte { b[28] = 0; return b }), ErrChunk},
		{"oversized total", mutate(func(b []byte) []byte { b[31] = 0xff; return b }), ErrChunk},
		{"bit flip", mutate(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), ErrChecksum},
	}
	for _, tc := range tests {
		if _, _, err := DecodeChunk(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, _, err := DecodeChunk(good); err != nil {
		t.Fatalf("good chunk: %v", err)
	}
}

func TestMessagesRoundTrip(t *testing.T) {
	p := &Point{Op: OpHessVec, Terms: shard.Terms{Loss: shard.Logistic, Bias: 1.5, Weights: []float64{2, 1, 0.5, 1, 1, 1}, Holdout: 3},
		Labels: []float64{3, 1, 2}, Classes: []uint32{2, 0, 1}, Stamp: 0xdeadbeef12345678, Folds: 5, Rows: 1000, Starts: []uint64{0, 400, 700},
		X: [][]float64{{1, -2, math.Pi}, {0, 1e-300, -0.5}, {4, 5, 6}},
		V: [][]float64{{1, 1, 1}, {2, 2, 2}, {3, 3, 3}}}
	got, err := DecodePoint(EncodePoint(p))
	if err != nil {
		t.Fatal(err)
	}
	for k := range p.X {
		if !slices.Equal(got.X[k], p.X[k]) || !slices.Equal(got.V[k], p.V[k]) {
			t.Fatalf("point %d differs", k)
		}
	}
	if got.Bias != p.Bias || !slices.Equal(got.Labels, p.Labels) || got.Op != p.Op || got.Loss != p.Loss || !slices.Equal(got.Weights, p.Weights) || !slices.Equal(got.Classes, p.Classes) || got.Stamp != p.Stamp ||
		got.Folds != p.Folds || got.Holdout != p.Holdout || got.Rows != p.Rows || !slices.Equal(got.Starts, p.Starts) {
		t.Fatalf("point header differs: %+v", got)
	}

	// At the last point: V travels, X (held by the sender for a second
	// broadcast) does not.
	at := *p
	at.Op = OpHessVecAt
	full, short := EncodePoint(p), EncodePoint(&at)
	if len(full)-len(short) != 8*len(p.X)*len(p.X[0]) {
		t.Fatalf("a point without x takes %d bytes, with x %d", len(short), len(full))
	}
	if got, err := DecodePoint(short); err != nil || got.Op != OpHessVecAt || got.X != nil || got.Stamp != p.Stamp || !slices.Equal(got.V[2], p.V[2]) {
		t.Fatalf("point without x: %v %+v", err, got)
	}

	// Vectors of 70 coordinates that carry 3 of them.
	lp := &Point{Op: OpEval, Labels: []float64{1, -1}, Full: 70, Live: []uint64{0b101, 1 << 5}, X: [][]float64{{1, 2, 3}}}
	if got, err := DecodePoint(EncodePoint(lp)); err != nil || got.Full != 70 || !slices.Equal(got.Live, lp.Live) || !slices.Equal(got.X[0], lp.X[0]) {
		t.Fatalf("point with live coordinates: %v %+v", err, got)
	}

	hp := &Point{Op: OpEvalHess, Labels: []float64{1, -1}, X: [][]float64{{1, 2, 3}}}
	if got, err := DecodePoint(EncodePoint(hp)); err != nil || got.Op != OpEvalHess || !slices.Equal(got.X[0], hp.X[0]) || got.V != nil {
		t.Fatalf("Hessian point: %v %+v", err, got)
	}

	for _, part := range []*reduce.Partial{
		{Shard: 4, Loss: []float64{1, 2}, BiasGrad: []float64{0.5, -0.5}, Grad: []float64{1, 2, 3, 4}},
		{Shard: 4, Loss: []float64{1}, BiasGrad: []float64{0.5}, Grad: []float64{1, 2}, Hess: []float64{1, -2, 3, 4, 5, 6}},
	} {
		gp, err := DecodePartial(4, EncodePartial(part))
		if err != nil || !slices.Equal(gp.Grad, part.Grad) || !slices.Equal(gp.Loss, part.Loss) || !slices.Equal(gp.BiasGrad, part.BiasGrad) ||
			!slices.Equal(gp.Hess, part.Hess) || (len(part.Hess) == 0) != (len(gp.Hess) == 0) {
			t.Fatalf("partial: %v %+v", err, gp)
		}
	}

	m := &shard.Meta{Rows: 10, NNZ: 30, Pairs: 55, MaxIndex: math.MaxUint32, NormSq: 2.5, MaxNormSq: 0.75, Labels: []float64{1, -1}, LabelCount: []int{4, 6},
		Cols: cols.NewList([]uint32{0, 5, 98, 1 << 20, math.MaxUint32 - 2, math.MaxUint32 - 1})}
	w, gm, err := DecodeMeta(2, EncodeMeta("w1", m))
	if err != nil || w != "w1" || gm.Rows != 10 || gm.Pairs != 55 || gm.MaxNormSq != 0.75 || !gm.Cols.Equal(m.Cols) || !slices.Equal(gm.LabelCount, m.LabelCount) {
		t.Fatalf("meta: %v %s %+v", err, w, gm)
	}
}

// TestColumnMapBeyondUint32: column maps travel as gaps between columns;
// gaps that add up past the largest uint32 are refused, not wrapped.
func TestColumnMapBeyondUint32(t *testing.T) {
	for _, ids := range [][]uint32{{math.MaxUint32}, {0, math.MaxUint32}} {
		b := EncodeMeta("w", &shard.Meta{Cols: cols.NewList(ids)})
		// The map ends the description: give it one more column, a gap
		// of 0 after the last (one past it).
		var e enc
		e.increasing(ids)
		grown := binary.LittleEndian.AppendUint32(bytes.Clone(b[:len(b)-len(e.b)]), uint32(len(ids)+1))
		grown = append(append(grown, e.b[4:]...), 0)
		if _, _, err := DecodeMeta(0, grown); err == nil {
			t.Errorf("columns %v and one more decoded", ids)
		}
	}
}

func TestDecodeRejectsLies(t *testing.T) {
	p := EncodePoint(&Point{Op: OpEval, Labels: []float64{1, -1}, X: [][]float64{{1, 2}}})
	if _, err := DecodePoint(p[:len(p)-8]); err == nil {
		t.Error("a truncated point decoded")
	}
	bad := bytes.Clone(p)
	bad[0] = 7
	if _, err := DecodePoint(bad); err == nil {
		t.Error("a point with an unknown op decoded")
	}
	bad = bytes.Clone(p)
	bad[1] = 200
	if _, err := DecodePoint(bad); err == nil {
		t.Error("a point with an unknown loss decoded")
	}
	for _, lie := range []*Point{
		{Op: OpEval, Labels: []float64{1, -1}, Terms: shard.Terms{Weights: []float64{1, 2, 3}}, X: [][]float64{{1, 2}}},
		{Op: OpEval, Labels: []float64{1, -1}, Folds: 3, Terms: shard.Terms{Holdout: 4}, X: [][]float64{{1, 2}}},
		{Op: OpEval, Labels: []float64{1, -1}, Folds: 3, Terms: shard.Terms{Holdout: -1}, X: [][]float64{{1, 2}}},
		{Op: OpEval, Labels: []float64{1, -1}, Full: 70, Live: []uint64{0b111, 0}, X: [][]float64{{1, 2}}},
		{Op: OpEval, Labels: []float64{1, -1}, Full: 70, Live: []uint64{0b11}, X: [][]float64{{1, 2}}},
		{Op: OpEval, Labels: []float64{1, -1}, Full: 4, Live: []uint64{0b10001}, X: [][]float64{{1, 2}}},
		{Op: OpEval, Labels: []float64{1, -1}, Live: []uint64{0b11}, X: [][]float64{{1, 2}}},
		{Op: OpEval, X: [][]float64{{1, 2}}},
	} {
		if _, err := DecodePoint(EncodePoint(lie)); err == nil {
			t.Errorf("a point with %d labels, %d weights for 1 problem, fold %d of %d, or live coordinates %b of %d decoded",
				len(lie.Labels), len(lie.Weights), lie.Holdout, lie.Folds, lie.Live, lie.Full)
		}
	}
	if _, _, err := DecodeMeta(0, EncodeMeta("w", &shard.Meta{MaxIndex: 8, Cols: cols.NewList([]uint32{2, 8})})); err == nil {
		t.Error("a description with column 8 (feature 9) of 8 features decoded")
	}
	// A length prefix claiming more items than the payload holds must be
	// refused before anything is allocated.
	huge := []byte{0xff, 0xff, 0xff, 0x7f}
	if _, err := DecodePartial(0, huge); err == nil {
		t.Error("a partial claiming 2^31 losses decoded")
	}
}

func FuzzDecodeChunk(f *testing.F) {
	f.Add(chunksOf(f, KindPoint, 1, 0, []byte("abc"), 1<<20)[0])
	f.Add(chunksOf(f, KindPartial, 2, 3, make([]byte, 100), HeaderSize+30)[1])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, p, err := DecodeChunk(b)
		if err != nil {
			return
		}
		if h.Seq >= h.Total || int(h.Len) != len(p) {
			t.Fatalf("accepted inconsistent header %+v", h)
		}
		var a Assembler
		a.MaxPending = 2
		a.Add(h, p)
	})
}

func FuzzDecodeMessages(f *testing.F) {
	f.Add(uint8(0), EncodePoint(&Point{Op: OpEval, Labels: []float64{1, -1}, X: [][]float64{{1, 2}}}))
	f.Add(uint8(1), EncodePartial(&reduce.Partial{Loss: []float64{1}, BiasGrad: []float64{0}, Grad: []float64{1, 2}}))
	f.Add(uint8(1), EncodePartial(&reduce.Partial{Loss: []float64{1}, BiasGrad: []float64{0}, Grad: []float64{1, 2}, Hess: []float64{1, 2, 3}}))
	sparse := make([]float64, 70)
	sparse[3], sparse[66] = 1, -2
	f.Add(uint8(1), EncodePartial(&reduce.Partial{Loss: []float64{1}, BiasGrad: []float64{0}, Grad: sparse}))
	f.Add(uint8(0), EncodePoint(&Point{Op: OpEvalHess, Labels: []float64{1, -1}, X: [][]float64{{1, 2}}}))
	f.Add(uint8(0), EncodePoint(&Point{Op: OpHessVecAt, Labels: []float64{1, -1}, Stamp: 3, V: [][]float64{{1, 2}}}))
	f.Add(uint8(0), EncodePoint(&Point{Op: OpEval, Labels: []float64{1, -1}, Full: 70, Live: []uint64{1, 1}, X: [][]float64{{1, 2}}}))
	f.Add(uint8(0), EncodePoint(&Point{Op: OpEval, Labels: []float64{1, -1}, Relays: []string{"a", "bc"}, Owners: []uint32{0, 1, 1}, X: [][]float64{{1, 2}}}))
	f.Add(uint8(3), slices.Concat(RelayPieces(2, &reduce.Partial{Loss: []float64{1}, BiasGrad: []float64{0}, Grad: sparse}, nil, false)...))
	f.Add(uint8(2), EncodeMeta("w", &shard.Meta{MaxIndex: 301, Labels: []float64{1}, LabelCount: []int{1}, Cols: cols.NewList([]uint32{1, 7, 300})}))
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		switch which % 4 {
		case 0:
			p, err := DecodePoint(b)
			if err == nil {
				for _, o := range p.Owners {
					if int(o) >= len(p.Relays) {
						t.Fatalf("owner %d of %d workers accepted", o, len(p.Relays))
					}
				}
				for _, x := range p.vectors() {
					if len(x) != p.Dim() {
						t.Fatal("ragged point accepted")
					}
				}
				if len(p.Live) > 0 {
					if m, err := cols.NewLiveMap(p.Live, int(p.Full)); err != nil || m.Len() != p.Dim() {
						t.Fatalf("live coordinates %b of %d accepted for vectors of %d: %v", p.Live, p.Full, p.Dim(), err)
					}
				}
			}
			// The same bytes in pieces of 1 to 8 bytes (the sizes taken
			// from the bytes themselves) decode the same.
			var parts [][]byte
			for rest := b; len(rest) > 0; {
				n := min(int(rest[0]%8)+1, len(rest))
				parts, rest = append(parts, rest[:n]), rest[n:]
			}
			q, qerr := DecodePointParts(parts, nil)
			if (err == nil) != (qerr == nil) || (err == nil && !bytes.Equal(EncodePoint(p), EncodePoint(q))) {
				t.Fatalf("in pieces: %v, %v; whole: %v, %v", q, qerr, p, err)
			}
		case 1:
			p, err := DecodePartial(0, b)
			if err != nil {
				return
			}
			if len(p.Loss) != len(p.BiasGrad) {
				t.Fatal("inconsistent partial accepted")
			}
			// What decodes encodes again (sparse or whole) to the same
			// gradient, bit for bit.
			q, err := DecodePartial(0, EncodePartial(p))
			if err != nil || len(q.Grad) != len(p.Grad) {
				t.Fatalf("re-encoded partial: %v", err)
			}
			for j := range p.Grad {
				if math.Float64bits(q.Grad[j]) != math.Float64bits(p.Grad[j]) {
					t.Fatalf("entry %d re-encoded as %v, was %v", j, q.Grad[j], p.Grad[j])
				}
			}
		case 3:
			hops, p, err := DecodeRelay(0, b, nil, nil)
			if err != nil {
				return
			}
			q := slices.Concat(RelayPieces(hops, p, nil, false)...)
			if h, r, err := DecodeRelay(0, q, nil, nil); err != nil || h != hops || len(r.Grad) != len(p.Grad) {
				t.Fatalf("re-encoded relayed sum: %d hops, %v", h, err)
			}
		case 2:
			if _, m, err := DecodeMeta(0, b); err == nil {
				ids := m.Cols.Slice()
				for i := 1; i < len(ids); i++ {
					if ids[i] <= ids[i-1] {
						t.Fatalf("column map %v accepted: not increasing", ids)
					}
				}
				if n := len(ids); n > 0 && ids[n-1] >= m.MaxIndex {
					t.Fatalf("column %d accepted with largest feature index %d", ids[n-1], m.MaxIndex)
				}
			}
		}
	})
}

// TestSparseGradients: gradients with enough +0 entries travel as a
// bitmap and the other values, in fewer bytes, and decode to the same
// bits (-0 and NaN included), in the memory given or fresh.
func TestSparseGradients(t *testing.T) {
	negZero := math.Copysign(0, -1)
	mk := func(n int, zeroEvery int) []float64 {
		g := make([]float64, n)
		for j := range g {
			switch {
			case j%zeroEvery == 0:
				g[j] = float64(j) + 0.5
			case j == 7:
				g[j] = negZero
			case j == 9:
				g[j] = math.NaN()
			}
		}
		return g
	}
	for _, c := range []struct {
		name   string
		grad   []float64
		sparse bool
	}{
		{"dense", mk(300, 1), false},
		{"a quarter set", mk(300, 4), true},
		{"a third set", mk(300, 3), true},
		{"short", mk(40, 4), false},            // under 64 entries: whole
		{"past a word", mk(129, 8), true},      // a last word of one bit
		{"all +0", make([]float64, 200), true}, // a bitmap alone
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &reduce.Partial{Loss: []float64{1, 2}, BiasGrad: []float64{3, 4}, Grad: c.grad, Hess: []float64{5}, Seconds: 0.5}
			enc := EncodePartial(p)
			whole := 8 * (len(p.Grad) + 6)
			if sparse := len(enc) < whole; sparse != c.sparse {
				t.Fatalf("%d bytes for a gradient of %d entries: sparse %v, want %v", len(enc), len(p.Grad), sparse, c.sparse)
			}
			if !bytes.Equal(bytes.Join(PartialPieces(p, make([]byte, 3), false), nil), enc) {
				t.Fatal("pieces differ from the encoding")
			}
			buf := make([]float64, 5, 1000)
			for _, into := range []*[]float64{nil, &buf} {
				for _, b := range [][]byte{enc, misaligned(enc)} {
					got, err := DecodePartialInto(3, b, nil, into)
					if err != nil {
						t.Fatal(err)
					}
					for j := range p.Grad {
						if math.Float64bits(got.Grad[j]) != math.Float64bits(p.Grad[j]) {
							t.Fatalf("entry %d: %v, want %v", j, got.Grad[j], p.Grad[j])
						}
					}
					if len(got.Grad) != len(p.Grad) || !slices.Equal(got.Hess, p.Hess) || !slices.Equal(got.Loss, p.Loss) || got.Seconds != 0.5 {
						t.Fatalf("decoded %+v", got)
					}
					if c.sparse && into != nil && &got.Grad[0] != &buf[:1][0] {
						t.Fatal("a sparse gradient was not laid out in the memory given")
					}
				}
			}
		})
	}
	// Lies about the bitmap are refused.
	p := &reduce.Partial{Loss: []float64{1}, BiasGrad: []float64{2}, Grad: mk(100, 4)}
	enc := EncodePartial(p)
	// The head is six uint32s (the fifth the bitmap's words), then Loss
	// and BiasGrad; the bitmap's second word covers entries 64-127.
	second := 24 + 8 + 8 + 8
	for name, lie := range map[string]func([]byte){
		"words":        func(b []byte) { binary.LittleEndian.PutUint32(b[16:], 3) },
		"padding":      func(b []byte) { binary.LittleEndian.PutUint32(b[20:], 1) },
		"past the end": func(b []byte) { b[second+7] |= 0x80 }, // entry 127 of 100
		"one bit more": func(b []byte) { b[second] |= 0x02 },   // entry 65: +0, now claimed
	} {
		b := bytes.Clone(enc)
		lie(b)
		if _, err := DecodePartial(0, b); err == nil {
			t.Errorf("%s: a lying bitmap decoded", name)
		}
	}
}
