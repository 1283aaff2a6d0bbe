package wire

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"

	"github.com/osgm-svm/osgm/pkg/cols"
	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/shard"
)

// Subjects of the protocol.
const (
	SubjectHeartbeat = "osgm.hb"
	// SubjectHello is where a coordinator that starts asks every worker
	// for a heartbeat now, instead of waiting up to a heartbeat period to
	// learn who is there.
	SubjectHello = "osgm.hello"
)

// WorkerSubject is where one worker takes commands.
func WorkerSubject(id string) string { return "osgm.w." + id }

// DownSubject carries a job's points to its workers.
func DownSubject(job uint64) string { return fmt.Sprintf("osgm.j.%016x.down", job) }

// UpSubject carries a job's results to its coordinator.
func UpSubject(job uint64) string { return fmt.Sprintf("osgm.j.%016x.up", job) }

// RelaySubject carries, in a job, the sums relayed to the worker that
// adds them.
func RelaySubject(job uint64, worker string) string {
	return fmt.Sprintf("osgm.j.%016x.sum.%s", job, worker)
}

// Op is a point's operation as its byte on the wire: osgm's four
// evaluations, and two kinds only the protocol has.
type Op uint8

const (
	OpEval Op = iota
	OpHessVec
	OpEvalDiag
	OpEvalHess
	// OpCorrect asks workers to tally rows and correct predictions
	// per class (shard.Tally) instead of evaluating: rows come back as
	// the partial's Loss, correct ones as its BiasGrad.
	OpCorrect
	// OpHessVecAt is a Hessian-vector product at the point the worker last
	// received, named by the stamp: the message carries V alone. Newton's CG
	// steps multiply at the x of the round before (the trial point just
	// accepted, or the step before), so their points are half the bytes (8 MB
	// a worker at 1 M features, not 16). A worker that does not hold that
	// point (it missed the round before) says so (KindNeedX) and answers the
	// broadcast with x that the coordinator sends at once.
	OpHessVecAt
)

// Point is a round's evaluation request: the point (and, for a
// Hessian-vector product, the vector), with everything a worker needs to
// evaluate its shards: the bias and the label order that defines classes.
type Point struct {
	Op Op
	// Terms are the problem's, as the kernels take them (its Holdout, a
	// fold of Folds, is left out).
	shard.Terms
	Labels  []float64 // class order; a row's class is its label's position
	Classes []uint32  // each problem's class, as shard.Point.Classes (empty: problem k is class k)
	Stamp   uint64    // names X for Hessian-vector passes, as shard.Point.Stamp
	// Cross-validation: with Folds > 0 the Rows rows of the job are split
	// into folds as objective.Folds does, shard s's rows starting at global row
	// Starts[s].
	Folds  uint32
	Rows   uint64
	Starts []uint64
	// Full, when not 0, is the vectors' length with every coordinate, and
	// X and V carry only those set in the bitmap Live (see cols.LiveMap):
	// features no row holds are not sent.
	Full uint32
	Live []uint64
	// Owners, when not empty, has the workers add the reduction tree
	// among themselves: shard s's owner is Relays[Owners[s]], and a
	// node's adder is its first shard's owner (see reduce.Relay). Empty,
	// every worker sends its sums to the coordinator.
	Relays []string
	Owners []uint32
	X      [][]float64 // K vectors of dim entries (features, then bias weight)
	V      [][]float64 // OpHessVec only
}

// EncodePoint lays out a point as little-endian float64s.
func EncodePoint(p *Point) []byte { return AppendPoint(nil, p) }

// AppendPoint is EncodePoint appending to dst.
func AppendPoint(dst []byte, p *Point) []byte {
	vecs := p.vectors()
	e := enc{b: appendPointHead(dst, p, 8*len(vecs)*p.Dim())}
	for _, x := range vecs {
		e.rawF64s(x)
	}
	return e.b
}

// PointPieces is AppendPoint's payload as its head, laid out in head's
// memory, and views of the vectors (on little-endian machines): the
// coordinator sends a round's point without first copying x into a
// message. The pieces are valid while p's vectors are.
func PointPieces(head []byte, p *Point) [][]byte {
	if !littleEndian {
		return [][]byte{AppendPoint(head[:0], p)}
	}
	pieces := [][]byte{appendPointHead(head[:0], p, 0)}
	for _, x := range p.vectors() {
		pieces = append(pieces, f64Bytes(x))
	}
	return pieces
}

// vectors are the point's vectors in wire order: X, then V for a
// Hessian-vector product; V alone at the last point (X stays unsent).
func (p *Point) vectors() [][]float64 {
	if p.Op == OpHessVec {
		return slices.Concat(p.X, p.V)
	}
	return p.sent()
}

// sent are the vectors that size the message's head: X, or V alone at the
// last point.
func (p *Point) sent() [][]float64 {
	if p.Op == OpHessVecAt {
		return p.V
	}
	return p.X
}

func (p *Point) Dim() int {
	if v := p.sent(); len(v) > 0 {
		return len(v[0])
	}
	return 0
}

// appendPointHead lays out everything before the vectors, padded so that
// they start 8-byte aligned from the payload's start, with room for more
// bytes after it.
func appendPointHead(dst []byte, p *Point, more int) []byte {
	start := len(dst)
	names := 0
	for _, r := range p.Relays {
		names += 4 + len(r)
	}
	e := enc{b: slices.Grow(dst, 96+names+4*(len(p.Classes)+len(p.Owners))+8*(len(p.Labels)+len(p.Weights)+len(p.Starts)+len(p.Live))+more)}
	e.u8(uint8(p.Op))
	e.terms(&p.Terms)
	e.f64s(p.Labels)
	e.u32s(p.Classes)
	e.u64(p.Stamp)
	e.u32(p.Folds)
	e.u64(p.Rows)
	e.u64s(p.Starts)
	e.u32(p.Full)
	e.u64s(p.Live)
	e.strs(p.Relays)
	e.u32s(p.Owners)
	e.u32(uint32(len(p.sent())))
	e.u32(uint32(p.Dim()))
	e.pad8(start)
	return e.b
}

// terms are a problem's shard.Terms, as points and placed problems'
// constants carry them.
func (e *enc) terms(t *shard.Terms) {
	e.u8(uint8(t.Loss))
	e.f64(t.Epsilon)
	e.f64(t.Bias)
	e.vec(t.Weights)
	e.int(t.Holdout)
}

func (d *dec) terms() shard.Terms {
	t := shard.Terms{Loss: shard.Loss(d.u8()), Epsilon: d.f64(), Bias: d.f64(), Weights: d.vec(), Holdout: d.int()}
	if d.err == nil && !t.Loss.Valid() {
		d.fail(fmt.Errorf("transport: unknown loss %d", t.Loss))
	}
	return t
}

// DecodePoint reads a point, checking every size against the payload.
func DecodePoint(b []byte) (*Point, error) { return DecodePointInto(b, nil) }

// DecodePointInto is DecodePoint that reads the vectors in place, as views
// of b (see f64View), or, where they cannot be, copies them into the
// memory of old's when it is large enough (old may be nil): a worker
// decodes each round's point without a copy or into the last one's.
func DecodePointInto(b []byte, old *Point) (*Point, error) {
	return DecodePointParts([][]byte{b}, old)
}

// DecodePointParts is DecodePointInto from a message's chunks in order
// (see Assembler.AddParts): a point of one chunk is read in place, and a
// 1 M-feature point is never copied whole.
func DecodePointParts(parts [][]byte, old *Point) (*Point, error) {
	d := decParts(parts)
	p := &Point{Op: Op(d.u8())}
	if d.err == nil && p.Op > OpHessVecAt {
		return nil, fmt.Errorf("transport: point: unknown op %d", p.Op)
	}
	p.Terms = d.terms()
	p.Labels = d.f64s()
	p.Classes = d.u32s()
	p.Stamp = d.u64()
	p.Folds = d.u32()
	p.Rows = d.u64()
	p.Starts = d.u64s()
	p.Full = d.u32()
	var oldLive []uint64
	if old != nil {
		oldLive = old.Live
	}
	p.Live = d.u64sInto(oldLive)
	p.Relays, p.Owners = d.strs(), d.u32s()
	K, dim := int(d.u32()), int(d.u32())
	d.skipPad()
	vecs := K
	if p.Op == OpHessVec {
		vecs *= 2
	}
	if d.err != nil {
		return nil, d.err
	}
	if K == 0 || dim == 0 || uint64(vecs)*uint64(dim)*8 != uint64(d.left()) {
		return nil, fmt.Errorf("transport: point: %d x %d vectors do not match %d bytes", vecs, dim, d.left())
	}
	if err := p.checkHeader(K, dim); err != nil {
		return nil, err
	}
	var oldX, oldV [][]float64
	if old != nil {
		oldX, oldV = old.X, old.V
	}
	if p.Op != OpHessVecAt {
		p.X = d.vectors(K, dim, oldX)
	}
	if p.Op == OpHessVec || p.Op == OpHessVecAt {
		p.V = d.vectors(K, dim, oldV)
	}
	return p, d.done()
}

// checkHeader checks what a point of K problems over dim coordinates
// says of its problems, so that no kernel reads past what it was given.
func (p *Point) checkHeader(K, dim int) error {
	if len(p.Labels) == 0 && !p.Loss.Regression() {
		// Shards number their rows' classes by the labels: without them
		// a kernel would read classes that were never set.
		return errors.New("transport: point: no class labels")
	}
	if p.Loss.Regression() && (len(p.Labels) != 0 || K != 1 || !(p.Epsilon >= 0)) {
		// A regression's rows carry their targets: one problem.
		return fmt.Errorf("transport: point: a regression of %d problems, %d labels, epsilon %v", K, len(p.Labels), p.Epsilon)
	}
	if len(p.Classes) != 0 && len(p.Classes) != K {
		return fmt.Errorf("transport: point: %d classes for %d problems", len(p.Classes), K)
	}
	for _, c := range p.Classes {
		if int(c) >= max(len(p.Labels), 2) {
			return fmt.Errorf("transport: point: class %d of %d labels", c, len(p.Labels))
		}
	}
	if len(p.Weights) != 0 && len(p.Weights) != 2*K {
		return fmt.Errorf("transport: point: %d class weights for %d problems", len(p.Weights), K)
	}
	if err := checkLive(p.Full, p.Live, dim); err != nil {
		return err
	}
	for _, o := range p.Owners {
		if int(o) >= len(p.Relays) {
			return fmt.Errorf("transport: point: owner %d of %d workers", o, len(p.Relays))
		}
	}
	if p.Holdout < 0 || p.Holdout > int(p.Folds) || (p.Folds > 0 && p.Folds > objective.MaxFolds) {
		return fmt.Errorf("transport: point: fold %d held out of %d", p.Holdout, p.Folds)
	}
	return nil
}

// vectors reads K vectors of dim: in place where one lies in one chunk,
// else into old's memory when it is large enough.
func (d *dec) vectors(K, dim int, old [][]float64) [][]float64 {
	out := make([][]float64, K)
	for k := range out {
		if v, ok := d.viewF64s(dim); ok {
			out[k] = v
			continue
		}
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

// checkLive checks that a point's bitmap covers its full length, and no
// more, and carries dim coordinates: what cols.NewLiveMap needs.
func checkLive(full uint32, live []uint64, dim int) error {
	if full == 0 && len(live) == 0 {
		return nil
	}
	if uint64(len(live)) != (uint64(full)+63)/64 {
		return fmt.Errorf("transport: point: %d words of live coordinates for %d coordinates", len(live), full)
	}
	if r := full % 64; r != 0 && live[len(live)-1]>>r != 0 {
		return fmt.Errorf("transport: point: live coordinates past the %d there are", full)
	}
	n := 0
	for _, w := range live {
		n += bits.OnesCount64(w)
	}
	if n != dim {
		return fmt.Errorf("transport: point: %d live coordinates for vectors of %d", n, dim)
	}
	return nil
}

// EncodeMeta lays out a shard's description, tagged with the worker.
func EncodeMeta(worker string, m *shard.Meta) []byte {
	e := enc{b: make([]byte, 0, 64+len(worker)+2*m.Cols.Len()+8*len(m.Labels)+4*len(m.LabelCount))}
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
	e.increasing(m.Cols.Slice())
	return e.b
}

// DecodeMeta reads a shard description and the worker that holds it.
func DecodeMeta(id int, b []byte) (string, *shard.Meta, error) {
	d := decParts([][]byte{b})
	worker := string(d.take(d.count(1)))
	m := &shard.Meta{ID: id, Rows: int(d.u64()), NNZ: int(d.u64()), Pairs: int(d.u64()), MaxIndex: d.u32(), NormSq: d.f64(), MaxNormSq: d.f64()}
	m.Labels = d.f64s()
	for _, c := range d.u32s() {
		m.LabelCount = append(m.LabelCount, int(c))
	}
	m.Cols = cols.NewList(d.increasing())
	if err := d.done(); err != nil {
		return "", nil, err
	}
	if len(m.Labels) != len(m.LabelCount) || m.Rows < 0 || m.NNZ < 0 || m.Pairs < 0 {
		return "", nil, errors.New("transport: meta: sizes differ")
	}
	// Columns are zero-based, MaxIndex one-based: the coordinator sizes
	// the problem by MaxIndex and indexes it by the columns.
	if m.Cols.Len() > 0 && m.Cols.Last() >= m.MaxIndex {
		return "", nil, fmt.Errorf("transport: meta: column %d past the largest feature index %d", m.Cols.Last(), m.MaxIndex)
	}
	return worker, m, nil
}

// Source says where a worker finds the data.
type Source struct {
	// Path is the file, at the same path on every host, and the version
	// of it the job started with.
	Path string       `json:"path,omitempty"`
	File input.FileID `json:"file"`
	// Bucket, when set, is a JetStream object store holding one object per
	// shard (zstd-compressed text, named by ObjectName under Prefix), for
	// hosts that cannot see the file.
	Bucket string `json:"bucket,omitempty"`
	Prefix string `json:"prefix,omitempty"`
}

// ShardBucket is the object store every job's shards go through, each
// job's under its own prefix. One bucket, not one a job: NATS permissions
// match whole subject tokens only, so workers can be allowed to read one
// named bucket (deploy/nats.conf), never every bucket whose name starts
// with osgm-.
const ShardBucket = "osgm-shards"

// ObjectName is the object store name of a shard's text.
func (s Source) ObjectName(id int) string {
	if s.Prefix == "" {
		return fmt.Sprintf("shard-%06d", id)
	}
	return fmt.Sprintf("%s/shard-%06d", s.Prefix, id)
}

// Assign is the full list of shards a worker must hold for a job. It is
// idempotent: a worker loads what it lacks and drops what is not listed.
type Assign struct {
	Job    uint64        `json:"job"`
	Source Source        `json:"source"`
	Shards []input.Range `json:"shards"`
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
	// Read is how many bytes the worker's loads have read: while it
	// loads, a count that stops growing is a hung load (see LoadStall).
	Read uint64 `json:"read"`
	// Reconnects counts the worker's reconnections to NATS. A worker
	// sends a heartbeat as soon as it is back, and a coordinator that
	// sees the count grow broadcasts the round under way again: what was
	// sent while the worker was cut off is lost, and waiting for
	// ResendAfter would waste seconds.
	Reconnects uint64 `json:"reconnects,omitempty"`
	// Leaving is a worker's last heartbeat when it stops (SIGTERM, a
	// scale-down): its shards move at once, not after the heartbeat
	// timeout.
	Leaving bool `json:"leaving,omitempty"`
	// OwnPoints says the worker also takes points on its own subject
	// (see PointMode): workers built before those do not.
	OwnPoints bool `json:"own_points,omitempty"`
	// Solves says the worker minimises whole problems (Solve); Avail is
	// the memory it may still take, in bytes (-1: unknown), which says
	// whether a job's every shard would fit beside what it holds.
	Solves bool  `json:"solves,omitempty"`
	Avail  int64 `json:"avail,omitempty"`
	// Placed is the placements it has queued or under way; Slots how
	// many it runs at once.
	Placed []uint64 `json:"placed,omitempty"`
	Slots  int      `json:"slots,omitempty"`
	// What a status page shows of the worker: its host, its process's
	// resident memory, the rounds it answered and the bytes its
	// subscriptions took in and its messages sent out. Only the worker
	// counts these exactly (broadcasts, relays between workers).
	Host     string `json:"host,omitempty"`
	RSS      int64  `json:"rss,omitempty"`
	Rounds   uint64 `json:"rounds,omitempty"`
	BytesIn  int64  `json:"bytes_in,omitempty"`
	BytesOut int64  `json:"bytes_out,omitempty"`
}

// LoadError reports a shard a worker could not load.
type LoadError struct {
	Worker string `json:"worker"`
	Shard  int    `json:"shard"`
	Err    string `json:"err"`
}
