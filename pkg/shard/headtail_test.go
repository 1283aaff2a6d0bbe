package shard

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

// This file measures a storage the shards do not use yet, the next step
// for worker memory (issue 4, target 3; BENCHMARKS.md, session 9): 89-90%
// of a wide shard's nonzeros fall in its 65,535 most frequent columns, so
// rows that hold those first, in 16-bit ids, and the others after, in
// 32-bit ids, take about 2.3 bytes an id instead of 3 or 4, with no
// decoding in the loops. BenchmarkHeadTailIDs compares a K=1 value and
// gradient pass in that layout with evalBinary on 32-bit ids (decimal
// values, at w = 0), on the first OSGM_BENCH_FILES file:
//
//	OSGM_BENCH_FILES=/tmp/gen1g.svm go test ./pkg/shard -run '^$' -bench HeadTailIDs -v
//
// The layout sums each row in another order, so its results are not
// those of the other storages to the bit; building it for real means
// every kernel's row loop in two parts.

// headTail is a shard's ids (and decimal mantissas) in the prototype's
// layout; local ids are renumbered by decreasing frequency.
type headTail struct {
	rowPtr []uint32 // values, as before
	hp     []uint32 // per row: start of its head ids in h16; then len(h16)
	h16    []uint16
	t32    []uint32
	mant   []int32
	old    []uint32 // new local id -> the shard's
}

func buildHeadTail(s *Shard) *headTail {
	n := len(s.Cols)
	cnt := make([]int, n)
	for q := 0; q < s.NNZ(); q++ {
		cnt[s.col(q)]++
	}
	order := make([]uint32, n)
	for i := range order {
		order[i] = uint32(i)
	}
	slices.SortStableFunc(order, func(a, b uint32) int { return cmp.Compare(cnt[b], cnt[a]) })
	newID := make([]uint32, n)
	for r, old := range order {
		newID[old] = uint32(r)
	}
	ht := &headTail{rowPtr: s.RowPtr, old: order}
	for i := 0; i < s.Rows(); i++ {
		ht.hp = append(ht.hp, uint32(len(ht.h16)))
		a, b := int(s.RowPtr[i]), int(s.RowPtr[i+1])
		for q := a; q < b; q++ {
			if j := newID[s.col(q)]; j < 65535 {
				ht.h16 = append(ht.h16, uint16(j))
				ht.mant = append(ht.mant, s.Mant[q])
			}
		}
		for q := a; q < b; q++ {
			if j := newID[s.col(q)]; j >= 65535 {
				ht.t32 = append(ht.t32, j)
				ht.mant = append(ht.mant, s.Mant[q])
			}
		}
	}
	ht.hp = append(ht.hp, uint32(len(ht.h16)))
	ht.h16 = slices.Clip(ht.h16)
	ht.t32 = slices.Clip(ht.t32)
	return ht
}

func (ht *headTail) eval(class []int32, r *rows, wl, gl []float64, inv float64) (loss float64) {
	wp, gp := unsafe.Pointer(unsafe.SliceData(wl)), unsafe.Pointer(unsafe.SliceData(gl))
	hip, tip, vp := unsafe.Pointer(unsafe.SliceData(ht.h16)), unsafe.Pointer(unsafe.SliceData(ht.t32)), unsafe.Pointer(unsafe.SliceData(ht.mant))
	h16 := func(k uintptr) uintptr { return uintptr(*(*uint16)(unsafe.Add(hip, k*2))) }
	t32 := func(k uintptr) uintptr { return uintptr(*(*uint32)(unsafe.Add(tip, k*4))) }
	val := func(q uintptr) float64 { return float64(*(*int32)(unsafe.Add(vp, q*4))) }
	a := uintptr(ht.rowPtr[0])
	for i := range class[:len(ht.rowPtr)-1] {
		b := uintptr(ht.rowPtr[i+1])
		hs, he := uintptr(ht.hp[i]), uintptr(ht.hp[i+1])
		m := a + (he - hs) // the row's first tail value
		ts := a - hs       // its first tail id: earlier rows' nonzeros less their head ids
		var s0, s1, s2, s3 float64
		q, k := a, hs
		for ; q+4 <= m; q, k = q+4, k+4 {
			s0 += val(q) * *at(wp, h16(k))
			s1 += val(q+1) * *at(wp, h16(k+1))
			s2 += val(q+2) * *at(wp, h16(k+2))
			s3 += val(q+3) * *at(wp, h16(k+3))
		}
		for ; q < m; q, k = q+1, k+1 {
			s0 += val(q) * *at(wp, h16(k))
		}
		for k = ts; q < b; q, k = q+1, k+1 {
			s1 += val(q) * *at(wp, t32(k))
		}
		z := ((s0 + s1) + (s2 + s3)) * inv
		sd := r.side(class[i]) & 1
		y := signs[sd]
		if d := 1 - y*z; d > 0 {
			loss += d * d
			ci := -2 * y * d * inv
			q, k := a, hs
			for ; q+4 <= m; q, k = q+4, k+4 {
				*at(gp, h16(k)) += ci * val(q)
				*at(gp, h16(k+1)) += ci * val(q+1)
				*at(gp, h16(k+2)) += ci * val(q+2)
				*at(gp, h16(k+3)) += ci * val(q+3)
			}
			for ; q < m; q, k = q+1, k+1 {
				*at(gp, h16(k)) += ci * val(q)
			}
			for k = ts; q < b; q, k = q+1, k+1 {
				*at(gp, t32(k)) += ci * val(q)
			}
		}
		a = b
	}
	return loss
}

// evalBinaryLoss is evalBinary's loss on one shard with 32-bit ids and
// decimal values, its gradient in gl.
func evalBinaryLoss(s *Shard, wl, gl []float64, r *rows) float64 {
	clear(gl)
	loss, _ := evalBinary(s.RowPtr, s.Idx, valuesOf(s, s.Mant), s.Class, r, wl, gl, -1, 0)
	return loss
}

func BenchmarkHeadTailIDs(b *testing.B) {
	files := benchFiles(b)
	if files == nil {
		b.Skip()
	}
	shards, _ := loadBench(b, files[0])
	if shards[0].Mant == nil || shards[0].Idx == nil {
		b.Skip("needs decimal values in shards with 32-bit ids (wide, plain)")
	}
	hts := make([]*headTail, len(shards))
	nnz, bytesPlain, bytesHT := 0, 0, 0
	for i, s := range shards {
		s.SetClasses([]float64{1, -1})
		hts[i] = buildHeadTail(s)
		nnz += s.NNZ()
		bytesPlain += 4 * s.NNZ()
		bytesHT += 2*len(hts[i].h16) + 4*len(hts[i].t32) + 4*len(hts[i].hp)
	}
	b.Logf("ids: %.2f B/nnz plain, %.2f head/tail", float64(bytesPlain)/float64(nnz), float64(bytesHT)/float64(nnz))
	wmax := 0
	for _, s := range shards {
		wmax = max(wmax, len(s.Cols))
	}
	wl, gl, wl2 := make([]float64, wmax), make([]float64, wmax), make([]float64, wmax)
	r := rows{w: [2]float64{1, 1}, pos: 0}
	// The layout computes the pass: the same loss and gradient, up to
	// rounding, at a point where some rows are active and some not.
	s, ht := shards[0], hts[0]
	rng := rand.New(rand.NewPCG(1, 2))
	gl2 := make([]float64, len(s.Cols))
	for j := range s.Cols {
		wl[j] = rng.NormFloat64() * 0.3
	}
	for j, o := range ht.old {
		wl2[j] = wl[o]
	}
	want := evalBinaryLoss(s, wl[:len(s.Cols)], gl[:len(s.Cols)], &r)
	got := ht.eval(s.Class, &r, wl2[:len(s.Cols)], gl2, 1/s.Scale)
	if math.Abs(got-want) > 1e-9*math.Abs(want) {
		b.Fatalf("loss %v in the layout, %v in the shard", got, want)
	}
	for j, o := range ht.old {
		if math.Abs(gl2[j]-gl[o]) > 1e-9*(1+math.Abs(gl[o])) {
			b.Fatalf("gradient at column %d: %v in the layout, %v in the shard", o, gl2[j], gl[o])
		}
	}
	clear(wl)
	clear(wl2)
	b.Run("plain", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			for _, s := range shards {
				evalBinaryLoss(s, wl[:len(s.Cols)], gl[:len(s.Cols)], &r)
			}
		}
		b.ReportMetric(float64(nnz)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mnnz/s")
	})
	b.Run("headtail", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			for k, s := range shards {
				clear(gl[:len(s.Cols)])
				hts[k].eval(s.Class, &r, wl2[:len(s.Cols)], gl[:len(s.Cols)], 1/s.Scale)
			}
		}
		b.ReportMetric(float64(nnz)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mnnz/s")
	})
}
