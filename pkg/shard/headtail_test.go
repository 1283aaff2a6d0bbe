package shard

import (
	"cmp"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"unsafe"
)

// This file measures a storage the shards do not use, the lever for
// worker memory (issue 4, target 3; BENCHMARKS.md, sessions 9 and 10):
// 89-90% of a wide shard's nonzeros fall in its 65,535 most frequent
// columns, so rows that hold those first, in 16-bit ids, and the others
// after, in 32-bit ids, take about 2.3 bytes an id instead of 3 or 4, with
// no decoding in the loops. The ids are then the layout's own ("kernel
// ids": the head's columns, then the tail's, each in the shard's order),
// while everything past a pass (reductions, the wire's column maps) takes
// a shard's columns in increasing order. BenchmarkHeadTailIDs times a K=1
// value and gradient pass on the first OSGM_BENCH_FILES file, at w = 0:
//
//	OSGM_BENCH_FILES=/tmp/gen1g.svm go test ./pkg/shard -run '^$' -bench HeadTailIDs -v
//
//   - plain: evalBinary on 32-bit ids (decimal values);
//   - headtail: the layout's pass alone;
//   - plain+gather: plain with the gather of the shard's weights from the
//     global point, as Shard.Eval does;
//   - headtail+perm: the layout with that gather and the gradient put back
//     in the shard's order through one bit per column (no memory beyond
//     the layout);
//   - headtail+lists: the same through a list of each kernel id's global
//     column and shard position (8 bytes a column more).
//
// The layout sums each row in another order, so its results are not
// those of the other svmdata.Storages to the bit; building it for real means
// every kernel's row loop in two parts, and either one of the
// permutations above or reductions and column maps that take a shard's
// columns as two increasing runs.

// headTail is a shard's ids (and decimal mantissas) in the prototype's
// layout; local ids are renumbered by decreasing frequency.
type headTail struct {
	rowPtr []uint32 // values, as before
	hp     []uint32 // per row: start of its head ids in h16; then len(h16)
	h16    []uint16
	t32    []uint32
	mant   []int32
	old    []uint32 // new local id -> the shard's
	nh     int      // head columns
	bits   []uint64 // the shard's column l is in the head
}

// gather is wl in kernel order from w over the global features.
func (ht *headTail) gather(cols []uint32, w, wl []float64) {
	h, t := 0, ht.nh
	for l, g := range cols {
		b := int(ht.bits[l>>6] >> (l & 63) & 1)
		k := b*h + (1-b)*t
		wl[k] = w[g]
		h += b
		t += 1 - b
	}
}

// scatter is gl, in kernel order, in the shard's order in out.
func (ht *headTail) scatter(gl, out []float64) {
	h, t := 0, ht.nh
	for l := range out {
		b := int(ht.bits[l>>6] >> (l & 63) & 1)
		k := b*h + (1-b)*t
		out[l] = gl[k]
		h += b
		t += 1 - b
	}
}

func buildHeadTail(s *Shard) *headTail {
	n := s.Cols.Len()
	cnt := make([]int, n)
	for q := 0; q < s.NNZ(); q++ {
		cnt[s.col(q)]++
	}
	order := make([]uint32, n)
	for i := range order {
		order[i] = uint32(i)
	}
	slices.SortStableFunc(order, func(a, b uint32) int { return cmp.Compare(cnt[b], cnt[a]) })
	// Kernel ids: the head's columns in the shard's order, then the
	// tail's, so one bit per column maps between the two orders.
	head := make([]bool, n)
	for _, old := range order[:min(n, 65535)] {
		head[old] = true
	}
	order = order[:0]
	for l := range n {
		if head[l] {
			order = append(order, uint32(l))
		}
	}
	nh := len(order)
	for l := range n {
		if !head[l] {
			order = append(order, uint32(l))
		}
	}
	newID := make([]uint32, n)
	for r, old := range order {
		newID[old] = uint32(r)
	}
	ht := &headTail{rowPtr: s.RowPtr, old: order, nh: nh, bits: make([]uint64, (n+63)/64)}
	for l := range n {
		if head[l] {
			ht.bits[l/64] |= 1 << (l % 64)
		}
	}
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
	loss, _ := evalBinary(s.RowPtr, s.Idx, valuesOf(s, s.Mant), s.Class, r, vecs{w: wl, g: gl, bias: -1})
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
		wmax = max(wmax, s.Cols.Len())
	}
	wl, gl, wl2 := make([]float64, wmax), make([]float64, wmax), make([]float64, wmax)
	r := rows{w: [2]float64{1, 1}, pos: 0}
	// The layout computes the pass: the same loss and gradient, up to
	// rounding, at a point where some rows are active and some not.
	s, ht := shards[0], hts[0]
	// gather, eval and scatter give the pass in the shard's order: the
	// same loss and gradient, up to rounding, at a point where some rows
	// are active and some not.
	maxIdx := uint32(0)
	for _, s := range shards {
		maxIdx = max(maxIdx, s.Cols.Last()+1)
	}
	w := make([]float64, maxIdx)
	rng := rand.New(rand.NewPCG(1, 2))
	for j := range w {
		w[j] = rng.NormFloat64() * 0.3
	}
	ids := make([][]uint32, len(shards)) // the column maps decoded
	for k, s := range shards {
		ids[k] = s.Cols.Slice()
	}
	gk, gs := make([]float64, wmax), make([]float64, s.Cols.Len())
	for l, g := range ids[0] {
		wl[l] = w[g]
	}
	ht.gather(ids[0], w, wl2)
	want := evalBinaryLoss(s, wl[:s.Cols.Len()], gl[:s.Cols.Len()], &r)
	got := ht.eval(s.Class, &r, wl2[:s.Cols.Len()], gk[:s.Cols.Len()], 1/s.Scale)
	ht.scatter(gk[:s.Cols.Len()], gs)
	if math.Abs(got-want) > 1e-9*math.Abs(want) {
		b.Fatalf("loss %v in the layout, %v in the shard", got, want)
	}
	for l := range gs {
		if math.Abs(gs[l]-gl[l]) > 1e-9*(1+math.Abs(gl[l])) {
			b.Fatalf("gradient at column %d: %v in the layout, %v in the shard", l, gs[l], gl[l])
		}
	}
	clear(w)
	clear(wl)
	clear(wl2)
	kcols := make([][]uint32, len(shards))
	for k := range shards {
		for _, o := range hts[k].old {
			kcols[k] = append(kcols[k], ids[k][o])
		}
	}
	// sweep times passes over every shard, shard k by pass(k, s).
	sweep := func(name string, pass func(k int, s *Shard)) {
		b.Run(name, func(b *testing.B) {
			runtime.GC() // the layouts' building leaves garbage
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for k, s := range shards {
					pass(k, s)
				}
			}
			b.ReportMetric(float64(nnz)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mnnz/s")
		})
	}
	sweep("plain", func(_ int, s *Shard) { evalBinaryLoss(s, wl[:s.Cols.Len()], gl[:s.Cols.Len()], &r) })
	sweep("plain+gather", func(k int, s *Shard) {
		for l, g := range ids[k] {
			wl[l] = w[g]
		}
		evalBinaryLoss(s, wl[:s.Cols.Len()], gl[:s.Cols.Len()], &r)
	})
	sweep("headtail+perm", func(k int, s *Shard) {
		hts[k].gather(ids[k], w, wl2)
		clear(gk[:s.Cols.Len()])
		hts[k].eval(s.Class, &r, wl2[:s.Cols.Len()], gk[:s.Cols.Len()], 1/s.Scale)
		hts[k].scatter(gk[:s.Cols.Len()], gl[:s.Cols.Len()])
	})
	sweep("headtail+lists", func(k int, s *Shard) {
		for l, g := range kcols[k] {
			wl2[l] = w[g]
		}
		clear(gk[:s.Cols.Len()])
		hts[k].eval(s.Class, &r, wl2[:s.Cols.Len()], gk[:s.Cols.Len()], 1/s.Scale)
		g := gl[:s.Cols.Len()]
		for l, o := range hts[k].old {
			g[o] = gk[l]
		}
	})
	sweep("headtail", func(k int, s *Shard) {
		clear(gl[:s.Cols.Len()])
		hts[k].eval(s.Class, &r, wl2[:s.Cols.Len()], gl[:s.Cols.Len()], 1/s.Scale)
	})
}
