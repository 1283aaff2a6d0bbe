package wire

import (
	"errors"
	"time"

	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
)

// The solve messages' types, field by field in declaration order, as the
// rest of the wire is laid out: what a peer reads is what this file
// writes, not what reflection finds in a struct today (a field added to
// osgm.Settings changed gob's bytes under the same version).
// TestSolveCodecCoversEveryField fills every field of every type below
// and expects it back, so a field this file does not carry fails it;
// testdata/golden pins the bytes to Version.
//
// Integers go as 8 bytes, booleans as 1, strings and byte slices as a
// length and their bytes, and optional values (pointers, and slices
// whose nil differs from empty) after a byte that says whether they are
// there.

func (e *enc) int(v int)   { e.u64(uint64(int64(v))) }
func (d *dec) int() int    { return int(int64(d.u64())) }
func (e *enc) flag(v bool) { e.u8(b2u(v)) }
func (d *dec) flag() bool {
	switch d.u8() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail(errors.New("transport: a boolean neither 0 nor 1"))
	return false
}

func b2u(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

// fail records err unless an earlier error came first.
func (d *dec) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (e *enc) str(s string) {
	e.u32(uint32(len(s)))
	e.b = append(e.b, s...)
}
func (d *dec) str() string { return string(d.take(d.count(1))) }

// some writes whether an optional value is there, and reports it.
func (e *enc) some(there bool) bool { e.flag(there); return there }

func (e *enc) bytes(b []byte) {
	if e.some(b != nil) {
		e.str(string(b))
	}
}
func (d *dec) bytes() []byte {
	if !d.flag() {
		return nil
	}
	return append([]byte{}, d.take(d.count(1))...)
}

// vec is a vector whose nil differs from empty (Settings.F0, Pass.D).
func (e *enc) vec(v []float64) {
	if e.some(v != nil) {
		e.f64s(v)
	}
}
func (d *dec) vec() []float64 {
	if !d.flag() {
		return nil
	}
	return d.f64s()
}

func (e *enc) vecs(vs [][]float64)    { encOpt(e, vs, e.vec) }
func (d *dec) vecs() [][]float64      { return decOpt(d, 1, d.vec) }
func (e *enc) byteSlices(bs [][]byte) { encOpt(e, bs, e.bytes) }
func (d *dec) byteSlices() [][]byte   { return decOpt(d, 1, d.bytes) }
func (e *enc) ints(v []int)           { encOpt(e, v, e.int) }
func (d *dec) ints() []int            { return decOpt(d, 8, d.int) }
func (e *enc) flags(v []bool)         { encOpt(e, v, e.flag) }
func (d *dec) flags() []bool          { return decOpt(d, 1, d.flag) }
func (e *enc) optU64s(v []uint64)     { encOpt(e, v, e.u64) }
func (d *dec) optU64s() []uint64      { return decOpt(d, 8, d.u64) }

// encOpt writes a list whose nil differs from empty: whether it is
// there, then encList's.
func encOpt[T any](e *enc, v []T, put func(T)) {
	if e.some(v != nil) {
		encList(e, v, put)
	}
}

// decOpt reads what encOpt wrote.
func decOpt[T any](d *dec, size int, get func() T) []T {
	if !d.flag() {
		return nil
	}
	return decList(d, size, get)
}

// decList reads what encList wrote, each entry at least size bytes.
func decList[T any](d *dec, size int, get func() T) []T {
	out := make([]T, d.count(size))
	for i := range out {
		out[i] = get()
	}
	return out
}

func (e *enc) source(s Source) {
	e.str(s.Path)
	e.u64(uint64(s.File.Size))
	e.u64(uint64(s.File.ModTime))
	e.str(s.File.ETag)
	e.str(s.Bucket)
	e.str(s.Prefix)
}
func (d *dec) source() Source {
	var s Source
	s.Path = d.str()
	s.File.Size, s.File.ModTime, s.File.ETag = int64(d.u64()), int64(d.u64()), d.str()
	s.Bucket, s.Prefix = d.str(), d.str()
	return s
}

func (e *enc) ranges(rs []input.Range) {
	encList(e, rs, func(r input.Range) { e.int(r.ID); e.u64(uint64(r.Start)); e.u64(uint64(r.End)) })
}
func (d *dec) ranges() []input.Range {
	return decList(d, 24, func() input.Range { return input.Range{ID: d.int(), Start: int64(d.u64()), End: int64(d.u64())} })
}

func (e *enc) constants(c objective.Constants) {
	e.int(c.Rows)
	e.int(c.Features)
	e.f64(c.Lambda)
	e.terms(&c.Terms)
	e.flag(c.Live)
}
func (d *dec) constants() objective.Constants {
	var c objective.Constants
	c.Rows, c.Features, c.Lambda, c.Terms, c.Live = d.int(), d.int(), d.f64(), d.terms(), d.flag()
	return c
}

func (e *enc) problem(p osgm.Problem) {
	e.int(p.Dim)
	e.f64(p.L)
	e.f64(p.Mu)
	e.vec(p.Diag)
	e.f64(p.HessPasses)
	e.flag(p.EvalDiag)
}
func (d *dec) problem() osgm.Problem {
	return osgm.Problem{Dim: d.int(), L: d.f64(), Mu: d.f64(), Diag: d.vec(), HessPasses: d.f64(), EvalDiag: d.flag()}
}

// settings are osgm.Settings, plain values: the caller's osgm.Hooks
// never cross.
func (e *enc) settings(s *osgm.Settings) {
	o := &s.Options
	e.str(o.Method)
	q := &o.Params
	e.f64(q.Eta)
	e.f64(q.EtaScale)
	e.f64(q.EtaBeta)
	e.f64(q.Z)
	e.int(q.Memory)
	e.flag(q.NoDiag)
	e.int(o.MaxIter)
	e.int(o.Parallel)
	e.int(o.CheckpointEvery)
	e.f64(o.CheckpointShare)
	e.int(s.Shape.Dim)
	e.int(s.Shape.NNZ)
	e.int(s.Shape.Pairs)
	e.int(s.Shape.Shards)
	e.vec(s.GradTol)
	e.f64(s.MaxGap)
	e.vec(s.F0)
	e.vecs(s.G0)
	e.snapshot(s.Resume)
	e.int(s.Batch)
}
func (d *dec) settings() osgm.Settings {
	var s osgm.Settings
	o := &s.Options
	o.Method = d.str()
	o.Params = osgm.Params{Eta: d.f64(), EtaScale: d.f64(), EtaBeta: d.f64(), Z: d.f64(), Memory: d.int(), NoDiag: d.flag()}
	o.MaxIter, o.Parallel, o.CheckpointEvery, o.CheckpointShare = d.int(), d.int(), d.int(), d.f64()
	s.Shape = osgm.Shape{Dim: d.int(), NNZ: d.int(), Pairs: d.int(), Shards: d.int()}
	s.GradTol, s.MaxGap, s.F0, s.G0 = d.vec(), d.f64(), d.vec(), d.vecs()
	s.Resume, s.Batch = d.snapshot(), d.int()
	return s
}

func (e *enc) snapshot(s *osgm.Snapshot) {
	if !e.some(s != nil) {
		return
	}
	e.str(s.Method)
	e.int(s.Evals)
	e.ints(s.Iters)
	e.flags(s.Converged)
	e.flags(s.Stalled)
	e.byteSlices(s.States)
	e.int(s.Batch)
	e.int(s.First)
	e.bytes(s.Done)
	e.flag(s.Side)
	e.bytes(s.Ended)
	e.ints(s.Running)
	e.ints(s.RunEvals)
}
func (d *dec) snapshot() *osgm.Snapshot {
	if !d.flag() {
		return nil
	}
	s := &osgm.Snapshot{Method: d.str(), Evals: d.int(), Iters: d.ints(), Converged: d.flags(), Stalled: d.flags(), States: d.byteSlices()}
	s.Batch, s.First, s.Done = d.int(), d.int(), d.bytes()
	s.Side, s.Ended, s.Running, s.RunEvals = d.flag(), d.bytes(), d.ints(), d.ints()
	return s
}

func (e *enc) record(r *osgm.Record) {
	if !e.some(r != nil) {
		return
	}
	e.int(r.Problem)
	e.int(r.Iter)
	e.int(r.Evals)
	e.f64(r.F)
	e.f64(r.GradNorm)
	e.f64(r.GradTol)
	e.flag(r.Accepted)
	e.u64(uint64(r.Elapsed))
	e.flag(r.Converged)
}
func (d *dec) record() *osgm.Record {
	if !d.flag() {
		return nil
	}
	return &osgm.Record{Problem: d.int(), Iter: d.int(), Evals: d.int(), F: d.f64(), GradNorm: d.f64(), GradTol: d.f64(),
		Accepted: d.flag(), Elapsed: time.Duration(d.u64()), Converged: d.flag()}
}

func (e *enc) result(r *osgm.Result) {
	if !e.some(r != nil) {
		return
	}
	e.vecs(r.X)
	e.vec(r.F)
	e.vec(r.GradNorm)
	e.ints(r.Iters)
	e.flags(r.Converged)
	encList(e, r.Stop, func(s osgm.Stop) { e.u8(uint8(s)) })
	e.int(r.Evals)
}
func (d *dec) result() *osgm.Result {
	if !d.flag() {
		return nil
	}
	r := &osgm.Result{X: d.vecs(), F: d.vec(), GradNorm: d.vec(), Iters: d.ints(), Converged: d.flags()}
	r.Stop = decList(d, 1, func() osgm.Stop { return osgm.Stop(d.u8()) })
	r.Evals = d.int()
	return r
}

func (e *enc) pass(p *osgm.Pass) {
	if !e.some(p != nil) {
		return
	}
	e.u8(uint8(p.Op))
	e.ints(p.Ks)
	e.vecs(p.X)
	e.vecs(p.V)
	e.vec(p.F)
	e.vecs(p.G)
	e.vecs(p.D)
	e.vecs(p.H)
	e.vecs(p.HV)
	e.optU64s(p.At)
}
func (d *dec) pass() *osgm.Pass {
	if !d.flag() {
		return nil
	}
	return &osgm.Pass{Op: osgm.Op(d.u8()), Ks: d.ints(), X: d.vecs(), V: d.vecs(), F: d.vec(), G: d.vecs(), D: d.vecs(),
		H: d.vecs(), HV: d.vecs(), At: d.optU64s()}
}

func (m *Solve) encode(e *enc) {
	e.source(m.Source)
	e.ranges(m.Ranges)
	e.vec(m.Order)
	e.int(m.Folds)
	e.constants(m.Constants)
	e.int(m.K)
	e.vec(m.X0)
	e.problem(m.Problem)
	e.settings(&m.Settings)
	e.flag(m.Snapshots)
	e.pass(m.Pass)
}
func (m *Solve) decode(d *dec) {
	m.Source, m.Ranges, m.Order, m.Folds = d.source(), d.ranges(), d.vec(), d.int()
	m.Constants, m.K, m.X0, m.Problem = d.constants(), d.int(), d.vec(), d.problem()
	m.Settings, m.Snapshots, m.Pass = d.settings(), d.flag(), d.pass()
}

func (m *Solving) encode(e *enc) {
	e.record(m.Record)
	e.snapshot(m.Snapshot)
}
func (m *Solving) decode(d *dec) { m.Record, m.Snapshot = d.record(), d.snapshot() }

func (m *Solved) encode(e *enc) {
	e.result(m.Result)
	e.pass(m.Pass)
	e.str(m.Err)
	e.flag(m.Interrupted)
}
func (m *Solved) decode(d *dec) {
	m.Result, m.Pass, m.Err, m.Interrupted = d.result(), d.pass(), d.str(), d.flag()
}
