package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/internal/svmdata"
	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/metrics"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/transport"
	"github.com/osgm-svm/osgm/pkg/transport/internal/transcript"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// recorder is a worker core's world in tests: it writes down what the core
// sends, listens to and asks to load, and loads only when the transcript
// says so.
type recorder struct {
	out   strings.Builder
	loads []loadRequest
	keep  bool // write messages down (the fuzz target only counts them)
	sent  int
}

type loadRequest struct {
	job    uint64
	src    wire.Source
	ranges []input.Range
}

func (r *recorder) send(kind wire.Kind, job, round uint64, shardID uint32, pieces ...[]byte) {
	r.sent++
	if r.keep {
		r.out.WriteString(describeUp(kind, job, round, shardID, bytes.Join(pieces, nil)) + "\n")
	}
}

func (r *recorder) relay(to string, kind wire.Kind, job, round uint64, id uint32, pieces ...[]byte) {
	r.sent++
	if r.keep {
		r.out.WriteString("to " + to + ": " + describeUp(kind, job, round, id, bytes.Join(pieces, nil)) + "\n")
	}
}

func (r *recorder) listen(job uint64) {
	if r.keep {
		fmt.Fprintf(&r.out, "listen job=%d\n", job)
	}
}

func (r *recorder) startLoad(job uint64, src wire.Source, ranges []input.Range) {
	r.loads = append(r.loads, loadRequest{job, src, ranges})
	if r.keep {
		fmt.Fprintf(&r.out, "load job=%d shards=%s\n", job, idList(ranges))
	}
}

func (r *recorder) holding(job uint64, held, loading []int) {
	if r.keep {
		fmt.Fprintf(&r.out, "holding job=%d held=%s loading=%s\n", job, transcript.Spans(held), transcript.Spans(loading))
	}
}

// describeUp is a message up as one line: its kind, round and shard, what
// it says, and for partials and sums a hash of their bytes.
func describeUp(kind wire.Kind, job, round uint64, shardID uint32, b []byte) string {
	h := fnv.New32a()
	h.Write(b)
	switch kind {
	case wire.KindMeta:
		worker, m, err := wire.DecodeMeta(int(shardID), b)
		if err != nil {
			return fmt.Sprintf("meta job=%d shard=%d: %v", job, shardID, err)
		}
		return fmt.Sprintf("meta job=%d shard=%d rows=%d from=%s", job, shardID, m.Rows, worker)
	case wire.KindPartial, wire.KindGroup:
		p, err := wire.DecodePartial(int(shardID), b)
		if err != nil {
			return fmt.Sprintf("%v round=%d shard=%d: %v", kind, round, shardID, err)
		}
		what := fmt.Sprintf("shard=%d", shardID)
		if kind == wire.KindGroup {
			what = fmt.Sprintf("node=%d.%d", shardID>>24, shardID&(1<<24-1))
		}
		return fmt.Sprintf("%v job=%d round=%d %s loss=%s #%08x", kind, job, round, what, floats(p.Loss), h.Sum32())
	case wire.KindRelayNode, wire.KindRelayShard:
		hops, p, err := wire.DecodeRelay(int(shardID), b, nil, nil)
		if err != nil {
			return fmt.Sprintf("%v round=%d: %v", kind, round, err)
		}
		what := fmt.Sprintf("shard=%d", shardID)
		if kind == wire.KindRelayNode {
			what = fmt.Sprintf("node=%d.%d", shardID>>24, shardID&(1<<24-1))
		}
		return fmt.Sprintf("%v job=%d round=%d %s hops=%d loss=%s #%08x", kind, job, round, what, hops, floats(p.Loss), h.Sum32())
	case wire.KindError:
		var e wire.LoadError
		json.Unmarshal(b, &e)
		return fmt.Sprintf("error job=%d shard=%d: %s", job, shardID, e.Err)
	}
	return fmt.Sprintf("%v job=%d round=%d shard=%d %q", kind, job, round, shardID, b)
}

func floats(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'g', 6, 64)
	}
	return "[" + strings.Join(s, " ") + "]"
}

func idList(ranges []input.Range) string {
	ids := make([]int, len(ranges))
	for i, r := range ranges {
		ids[i] = r.ID
	}
	return transcript.Spans(ids)
}

// transcript is one worker core on a recorder, over files of 16 shards.
type workerTranscript struct {
	t     *testing.T
	core  *workerCore
	rec   *recorder
	files map[string]wire.Source
	dim   int // features and bias weight
}

// The data every transcript's files hold: three classes over 40 features.
const (
	transcriptClasses  = 3
	transcriptFeatures = 40
	transcriptShards   = 16
)

func newWorkerTranscript(t *testing.T) *workerTranscript {
	rec := &recorder{keep: true}
	cfg := &Config{Parallel: 1, Metrics: metrics.NewWorker()}
	var bad transport.Counter
	bad.Log = zap.NewNop()
	core := newWorkerCore("w1", cfg, rec, zap.NewNop(), &bad)
	// The clock stands still: partials report no time, and the same
	// numbers are the same bytes.
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	core.now = func() time.Time { return clock }
	tr := &workerTranscript{t: t, core: core, rec: rec, files: map[string]wire.Source{}, dim: transcriptFeatures + 1}
	for i, name := range []string{"a", "b"} {
		path := svmdata.WriteFile(t, svmdata.Stepped(rand.New(rand.NewPCG(uint64(i), 9)), 320, transcriptClasses, 1, transcriptFeatures))
		id, err := input.Identify(path)
		if err != nil {
			t.Fatal(err)
		}
		tr.files[name] = wire.Source{Path: path, File: id}
	}
	return tr
}

// evaluations counts the core's passes over its shards (tallies aside),
// as its metrics do.
func (tr *workerTranscript) evaluations() uint64 {
	var m dto.Metric
	if err := tr.core.cfg.Metrics.Eval.Write(&m); err != nil {
		tr.t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// layout is the file's cut into the transcripts' 16 shards.
func (tr *workerTranscript) layout(src wire.Source) []input.Range {
	info, err := input.Stat(src.Path)
	if err != nil {
		tr.t.Fatal(err)
	}
	ranges := input.Layout(info.Size, transcriptShards)
	if len(ranges) != transcriptShards {
		tr.t.Fatalf("%d shards, want %d", len(ranges), transcriptShards)
	}
	return ranges
}

// TestWorkerTranscripts steps a worker's core through the protocol's
// cases, message by message, and compares what it sends with the
// transcripts in testdata/worker (go test -run TestWorkerTranscripts
// -rewrite writes them anew; read the difference before keeping it).
//
// Commands:
//
//	assign job=J file=a|b shards=0-7,9 [describe=3]
//	loaded [fail=ID]              finishes the oldest load asked for
//	point job=J round=R op=eval|hessvec|hessvecat|evaldiag|evalhess|correct [stamp=S] [x=0.1] [live=0-19] [cut=N]
//	forget                        the worker loses the point it holds
//	dropped                       the messages it dropped, by reason
func TestWorkerTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/worker", func(t *testing.T, path string) {
		tr := newWorkerTranscript(t)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			tr.t = t
			tr.rec.out.Reset()
			evals := tr.evaluations()
			if err := tr.step(d); err != nil {
				return "error: " + err.Error() + "\n"
			}
			// Whether the kernels ran tells a resend from an evaluation
			// made again, which sends the same bytes.
			if n := tr.evaluations() - evals; n > 0 {
				fmt.Fprintf(&tr.rec.out, "evaluations: %d\n", n)
			}
			return tr.rec.out.String()
		})
	})
}

func (tr *workerTranscript) step(d *datadriven.TestData) error {
	args := map[string]string{}
	for _, a := range d.CmdArgs {
		args[a.Key] = strings.Join(a.Vals, ",")
	}
	num := func(key string, def uint64) uint64 {
		if s, ok := args[key]; ok {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				tr.t.Fatalf("%s: %s=%q", d.Pos, key, s)
			}
			return v
		}
		return def
	}
	switch d.Cmd {
	case "assign":
		src, ok := tr.files[args["file"]]
		if !ok {
			return fmt.Errorf("no file %q", args["file"])
		}
		ids, err := transcript.ParseSpans(args["shards"])
		if err != nil {
			return err
		}
		all := tr.layout(src)
		a := wire.Assign{Job: num("job", 1), Source: src, Total: len(all)}
		for _, id := range ids {
			a.Shards = append(a.Shards, all[id])
		}
		if s, ok := args["describe"]; ok {
			if a.Describe, err = transcript.ParseSpans(s); err != nil {
				return err
			}
		}
		tr.core.Step(gotAssign{a})
	case "loaded":
		if len(tr.rec.loads) == 0 {
			return errors.New("no load was asked for")
		}
		req := tr.rec.loads[0]
		tr.rec.loads = tr.rec.loads[1:]
		r := loadResult{job: req.job, ranges: req.ranges}
		if s, ok := args["fail"]; ok {
			r.failed, _ = strconv.Atoi(s)
			r.err = fmt.Errorf("shard %d: read: input/output error", r.failed)
		} else {
			r.shards, r.err = shard.LoadChecked(req.src.Path, req.ranges, shard.Options{Parallel: 1}, req.src.File)
			if r.err != nil {
				return r.err
			}
		}
		tr.core.Step(gotLoad{r})
	case "point":
		p, err := tr.point(args, num("stamp", 0))
		if err != nil {
			return err
		}
		b := wire.EncodePoint(p)
		if n := num("cut", 0); n > 0 && n < uint64(len(b)) {
			b = b[:n]
		}
		tr.core.Step(gotPoint{roundMsg{job: num("job", 1), round: num("round", 1), parts: [][]byte{b}}})
	case "relay":
		return tr.relay(args, num("round", 1), num("hops", 1))
	case "forget":
		tr.core.point = nil
	case "dropped":
		transcript.WriteDropped(&tr.rec.out, tr.core.bad.Dropped())
	default:
		return fmt.Errorf("unknown command %q", d.Cmd)
	}
	return nil
}

// relay is a sum another worker relays here: a shard's partial or a
// node's sum (node=L.I), over every coordinate, of the transcript's
// three problems.
func (tr *workerTranscript) relay(args map[string]string, round, hops uint64) error {
	kind, id := wire.KindRelayShard, uint32(0)
	if s, ok := args["node"]; ok {
		node, err := transcript.ParseNode(s)
		if err != nil {
			return err
		}
		kind, id = wire.KindRelayNode, node.Wire()
	} else {
		v, err := strconv.Atoi(args["shard"])
		if err != nil {
			return err
		}
		id = uint32(v)
	}
	K, width := transcriptClasses, tr.dim-1
	part := &reduce.Partial{Loss: make([]float64, K), BiasGrad: make([]float64, K), Grad: make([]float64, K*width)}
	for _, v := range [][]float64{part.Loss, part.BiasGrad, part.Grad} {
		for i := range v {
			v[i] = 0.25 * float64(i%3+1)
		}
	}
	b := slices.Concat(wire.RelayPieces(int(hops), part, nil, false)...)
	tr.core.Step(gotRelay{relayMsg{kind: kind, job: 1, round: round, id: id, payload: b}})
	return nil
}

// point is the point a command describes: the three classes' vectors
// filled from x (and v for Hessian-vector products), all coordinates or
// the live ones.
func (tr *workerTranscript) point(args map[string]string, stamp uint64) (*wire.Point, error) {
	ops := map[string]wire.Op{"eval": wire.OpEval, "hessvec": wire.OpHessVec, "hessvecat": wire.OpHessVecAt,
		"evaldiag": wire.OpEvalDiag, "evalhess": wire.OpEvalHess, "correct": wire.OpCorrect}
	op, ok := ops[args["op"]]
	if !ok {
		return nil, fmt.Errorf("no op %q", args["op"])
	}
	scale := 0.1
	if s, ok := args["x"]; ok {
		var err error
		if scale, err = strconv.ParseFloat(s, 64); err != nil {
			return nil, err
		}
	}
	p := &wire.Point{Op: op, Stamp: stamp, Labels: []float64{1, 2, 3}, Terms: shard.Terms{Bias: 1}}
	if s, ok := args["owners"]; ok {
		// Each shard's owner, by name: the workers add the tree.
		for _, name := range strings.Split(s, ",") {
			i := slices.Index(p.Relays, name)
			if i < 0 {
				i = len(p.Relays)
				p.Relays = append(p.Relays, name)
			}
			p.Owners = append(p.Owners, uint32(i))
		}
	}
	dim := tr.dim
	if s, ok := args["live"]; ok {
		// Features by their 0-based column; the bias weight is always sent.
		cols, err := transcript.ParseSpans(s)
		if err != nil {
			return nil, err
		}
		p.Full, p.Live = uint32(tr.dim), make([]uint64, (tr.dim+63)/64)
		for _, c := range append(cols, tr.dim-1) {
			p.Live[c/64] |= 1 << (c % 64)
		}
		dim = len(cols) + 1
	}
	vecs := func(scale float64) [][]float64 {
		out := make([][]float64, transcriptClasses)
		for k := range out {
			out[k] = make([]float64, dim)
			for j := range out[k] {
				out[k][j] = scale * float64((j+k)%5-2)
			}
		}
		return out
	}
	if op != wire.OpHessVecAt {
		p.X = vecs(scale)
	}
	if op == wire.OpHessVec || op == wire.OpHessVecAt {
		p.V = vecs(1)
	}
	if op == wire.OpEvalHess || op == wire.OpEvalDiag {
		p.X = p.X[:1] // one problem: the Hessian's is the point's whole dimension
		p.Classes = []uint32{1}
	}
	return p, nil
}
