package transport

import (
	"errors"
	"fmt"
	"slices"

	"github.com/osgm-svm/osgm/pkg/shard"
)

// Subjects of the protocol.
const (
	SubjectHeartbeat = "osgm.hb"
)

// WorkerSubject is where one worker takes commands.
func WorkerSubject(id string) string { return "osgm.w." + id }

// DownSubject carries a job's points to its workers.
func DownSubject(job uint64) string { return fmt.Sprintf("osgm.j.%016x.down", job) }

// UpSubject carries a job's results to its coordinator.
func UpSubject(job uint64) string { return fmt.Sprintf("osgm.j.%016x.up", job) }

// Point is a round's evaluation request: the point (and, for a
// Hessian-vector product, the vector), with everything a worker needs to
// evaluate its shards: the bias and the label order that defines classes.
type Point struct {
	Op      shard.Op
	Bias    float64
	Labels  []float64 // class order; a row's class is its label's position
	Weights []float64 // class weights, as shard.Point.Weights (empty: none)
	Classes []uint32  // each problem's class, as shard.Point.Classes (empty: problem k is class k)
	Stamp   uint64    // names X for Hessian-vector passes, as shard.Point.Stamp
	// Cross-validation: with Folds > 0 the Rows rows of the job are split
	// into folds as shard.Folds does, shard s's rows starting at global row
	// Starts[s]; Holdout (1..Folds, 0 none) is the fold left out.
	Folds, Holdout uint32
	Rows           uint64
	Starts         []uint64
	X              [][]float64 // K vectors of dim entries (features, then bias weight)
	V              [][]float64 // OpHessVec only
}

// EncodePoint lays out a point as little-endian float64s.
func EncodePoint(p *Point) []byte { return AppendPoint(nil, p) }

// AppendPoint is EncodePoint appending to dst: the coordinator lays out
// every round's point in the same memory.
func AppendPoint(dst []byte, p *Point) []byte {
	K := len(p.X)
	dim := 0
	if K > 0 {
		dim = len(p.X[0])
	}
	vecs := K
	if p.Op == shard.OpHessVec {
		vecs *= 2
	}
	e := enc{b: slices.Grow(dst, 64+4*len(p.Classes)+8*(len(p.Labels)+len(p.Weights)+len(p.Starts)+vecs*dim))}
	e.u8(uint8(p.Op))
	e.f64(p.Bias)
	e.f64s(p.Labels)
	e.f64s(p.Weights)
	e.u32s(p.Classes)
	e.u64(p.Stamp)
	e.u32(p.Folds)
	e.u32(p.Holdout)
	e.u64(p.Rows)
	e.u64s(p.Starts)
	e.u32(uint32(K))
	e.u32(uint32(dim))
	for _, x := range p.X {
		e.rawF64s(x)
	}
	if p.Op == shard.OpHessVec {
		for _, x := range p.V {
			e.rawF64s(x)
		}
	}
	return e.b
}

// DecodePoint reads a point, checking every size against the payload.
func DecodePoint(b []byte) (*Point, error) { return DecodePointInto(b, nil) }

// DecodePointInto is DecodePoint that puts the vectors in the memory of
// old's when they are large enough (old may be nil): a worker decodes
// each round's point into the last one's.
func DecodePointInto(b []byte, old *Point) (*Point, error) {
	return DecodePointParts([][]byte{b}, old)
}

// DecodePointParts is DecodePointInto from a message's chunks in order
// (see Assembler.AddParts): a 1 M-feature point is never copied whole.
func DecodePointParts(parts [][]byte, old *Point) (*Point, error) {
	d := decParts(parts)
	p := &Point{Op: shard.Op(d.u8())}
	if d.err == nil && p.Op != shard.OpEval && p.Op != shard.OpHessVec && p.Op != shard.OpEvalDiag && p.Op != shard.OpEvalHess && p.Op != opCorrect {
		return nil, fmt.Errorf("transport: point: unknown op %d", p.Op)
	}
	p.Bias = d.f64()
	p.Labels = d.f64s()
	p.Weights = d.f64s()
	p.Classes = d.u32s()
	p.Stamp = d.u64()
	p.Folds, p.Holdout = d.u32(), d.u32()
	p.Rows = d.u64()
	p.Starts = d.u64s()
	K, dim := int(d.u32()), int(d.u32())
	vecs := K
	if p.Op == shard.OpHessVec {
		vecs *= 2
	}
	if d.err != nil {
		return nil, d.err
	}
	if K == 0 || dim == 0 || uint64(vecs)*uint64(dim)*8 != uint64(d.left()) {
		return nil, fmt.Errorf("transport: point: %d x %d vectors do not match %d bytes", vecs, dim, d.left())
	}
	if len(p.Classes) != 0 && len(p.Classes) != K {
		return nil, fmt.Errorf("transport: point: %d classes for %d problems", len(p.Classes), K)
	}
	for _, c := range p.Classes {
		if int(c) >= max(len(p.Labels), 2) {
			return nil, fmt.Errorf("transport: point: class %d of %d labels", c, len(p.Labels))
		}
	}
	if len(p.Weights) != 0 && len(p.Weights) != 2*K {
		return nil, fmt.Errorf("transport: point: %d class weights for %d problems", len(p.Weights), K)
	}
	if p.Holdout > p.Folds || (p.Folds > 0 && p.Folds > shard.MaxFolds) {
		return nil, fmt.Errorf("transport: point: fold %d held out of %d", p.Holdout, p.Folds)
	}
	var oldX, oldV [][]float64
	if old != nil {
		oldX, oldV = old.X, old.V
	}
	read := func(old [][]float64) [][]float64 {
		out := make([][]float64, K)
		for k := range out {
			var buf []float64
			if k < len(old) && cap(old[k]) >= dim {
				buf = old[k][:dim]
			} else {
				buf = make([]float64, dim)
			}
			d.rawF64s(buf)
			out[k] = buf
		}
		return out
	}
	p.X = read(oldX)
	if p.Op == shard.OpHessVec {
		p.V = read(oldV)
	}
	return p, d.done()
}

// EncodePartial lays out one shard's partial sums.
func EncodePartial(p *shard.Partial) []byte { return AppendPartial(nil, p) }

// AppendPartial is EncodePartial appending to dst.
func AppendPartial(dst []byte, p *shard.Partial) []byte {
	e := enc{b: slices.Grow(dst, 4*4+8+8*(2*len(p.Loss)+len(p.Grad)+len(p.Hess)))}
	e.f64s(p.Loss)
	e.f64s(p.BiasGrad)
	e.f64s(p.Grad)
	e.f64s(p.Hess)
	e.f64(p.Seconds)
	return e.b
}

// partialPieces is AppendPartial's payload as pieces that view p's
// vectors rather than copy them (on little-endian machines): a worker
// sends a node sum of a million columns and keeps it for resends without
// a second copy. The pieces are valid while p's memory is.
func partialPieces(p *shard.Partial) [][]byte {
	if !littleEndian {
		return [][]byte{AppendPartial(nil, p)}
	}
	var head enc
	head.f64s(p.Loss)
	head.f64s(p.BiasGrad)
	head.u32(uint32(len(p.Grad)))
	var mid, tail enc
	mid.u32(uint32(len(p.Hess)))
	tail.f64(p.Seconds)
	return [][]byte{head.b, f64Bytes(p.Grad), mid.b, f64Bytes(p.Hess), tail.b}
}

// DecodePartial reads a partial for shard id.
func DecodePartial(id int, b []byte) (*shard.Partial, error) { return DecodePartialInto(id, b, nil) }

// DecodePartialInto is DecodePartial into p's memory (p may be nil): the
// coordinator decodes each round's partials into the last round's.
func DecodePartialInto(id int, b []byte, p *shard.Partial) (*shard.Partial, error) {
	if p == nil {
		p = new(shard.Partial)
	}
	d := dec{b: b}
	*p = shard.Partial{Shard: id, Loss: d.f64sInto(p.Loss), BiasGrad: d.f64sInto(p.BiasGrad), Grad: d.f64sInto(p.Grad), Hess: d.f64sInto(p.Hess)}
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

// EncodeMeta lays out a shard's description, tagged with the worker.
func EncodeMeta(worker string, m *shard.Meta) []byte {
	e := enc{b: make([]byte, 0, 64+len(worker)+2*len(m.Cols)+8*len(m.Labels)+4*len(m.LabelCount))}
	e.u32(uint32(len(worker)))
	e.b = append(e.b, worker...)
	e.u64(uint64(m.Rows))
	e.u64(uint64(m.NNZ))
	e.u64(uint64(m.Pairs))
	e.u32(m.MaxIndex)
	e.f64(m.NormSq)
	e.f64(m.MaxNormSq)
	e.f64s(m.Labels)
	counts := make([]uint32, len(m.LabelCount))
	for i, c := range m.LabelCount {
		counts[i] = uint32(c)
	}
	e.u32s(counts)
	e.increasing(m.Cols)
	return e.b
}

// DecodeMeta reads a shard description and the worker that holds it.
func DecodeMeta(id int, b []byte) (string, *shard.Meta, error) {
	d := dec{b: b}
	worker := string(d.take(d.count(1)))
	m := &shard.Meta{ID: id, Rows: int(d.u64()), NNZ: int(d.u64()), Pairs: int(d.u64()), MaxIndex: d.u32(), NormSq: d.f64(), MaxNormSq: d.f64()}
	m.Labels = d.f64s()
	for _, c := range d.u32s() {
		m.LabelCount = append(m.LabelCount, int(c))
	}
	m.Cols = d.increasing()
	if err := d.done(); err != nil {
		return "", nil, err
	}
	if len(m.Labels) != len(m.LabelCount) || m.Rows < 0 || m.NNZ < 0 || m.Pairs < 0 {
		return "", nil, errors.New("transport: meta: sizes differ")
	}
	return worker, m, nil
}

// Source says where a worker finds the data.
type Source struct {
	// Path is the file, at the same path on every host, and the version
	// of it the job started with.
	Path string       `json:"path,omitempty"`
	File shard.FileID `json:"file"`
	// Bucket, when set, is a JetStream object store holding one object per
	// shard (zstd-compressed text, named by ObjectName), for hosts that
	// cannot see the file.
	Bucket string `json:"bucket,omitempty"`
}

// ObjectName is the object store name of a shard's text.
func ObjectName(id int) string { return fmt.Sprintf("shard-%06d", id) }

// Assign is the full list of shards a worker must hold for a job. It is
// idempotent: a worker loads what it lacks and drops what is not listed.
type Assign struct {
	Job    uint64        `json:"job"`
	Source Source        `json:"source"`
	Shards []shard.Range `json:"shards"`
	Total  int           `json:"total"` // shards in the job, which fixes the groups
	// Describe lists held shards whose descriptions the coordinator did
	// not get (lost on the way): the worker sends them again.
	Describe []int `json:"describe,omitempty"`
}

// Heartbeat is a worker's periodic announcement.
type Heartbeat struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Job     uint64 `json:"job"`
	Held    []int  `json:"held"`    // shards loaded
	Loading []int  `json:"loading"` // shards being loaded
}

// LoadError reports a shard a worker could not load.
type LoadError struct {
	Worker string `json:"worker"`
	Shard  int    `json:"shard"`
	Err    string `json:"err"`
}
