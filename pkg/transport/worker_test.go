package transport

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// FuzzWorkerPoint hands a worker's core holding real shards any point
// message, whole or cut into two chunks, of a new round or of the round in
// hand: it must evaluate it, ask for the whole point or drop it, never
// panic. Decoding alone (FuzzDecodeMessages) does not see what a point
// that decodes does to the kernels: one without labels once did.
func FuzzWorkerPoint(f *testing.F) {
	path := randomData(f, rand.New(rand.NewPCG(3, 4)), 200, 3, 1, 60)
	id, err := input.Identify(path)
	if err != nil {
		f.Fatal(err)
	}
	info, err := input.Stat(path)
	if err != nil {
		f.Fatal(err)
	}
	const job = 7
	ranges := input.Layout(info.Size, 4)
	rec := &recorder{}
	var bad counter
	bad.log = zap.NewNop()
	w := newWorkerCore("fuzz", &WorkerConfig{Parallel: 2}, rec, zap.NewNop(), &bad)
	w.assign(wire.Assign{Job: job, Source: wire.Source{Path: path, File: id}, Shards: ranges, Total: len(ranges)})
	shards, err := shard.LoadChecked(path, ranges, shard.Options{Parallel: 2}, id)
	if err != nil {
		f.Fatal(err)
	}
	w.finishLoad(loadResult{job: job, shards: shards, ranges: ranges})

	labels := []float64{1, 2, 3}
	vec := func(dim int, scale float64) []float64 {
		v := make([]float64, dim)
		for j := range v {
			v[j] = scale * float64(j%5-2)
		}
		return v
	}
	three := func(dim int, scale float64) [][]float64 {
		return [][]float64{vec(dim, scale), vec(dim, -scale), vec(dim, scale/2)}
	}
	for _, p := range []*wire.Point{
		// First, while the shards have never been given the labels.
		{Op: wire.OpEval, Bias: 1, X: three(61, 0.1)},
		{Op: wire.OpEval, Bias: 1, Labels: labels, X: three(61, 0.1)},
		{Op: wire.OpEval, Bias: -1, Labels: labels, Classes: []uint32{2}, Weights: []float64{1, 2}, X: [][]float64{vec(60, 0.1)}},
		{Op: wire.OpHessVec, Bias: 1, Labels: labels, Stamp: 5, X: three(61, 0.1), V: three(61, 1)},
		{Op: wire.OpHessVecAt, Bias: 1, Labels: labels, Stamp: 5, V: three(61, 1)},
		{Op: wire.OpEvalDiag, Bias: 1, Labels: labels, Stamp: 6, X: [][]float64{vec(61, 0.1)}},
		{Op: wire.OpEvalHess, Bias: 1, Labels: labels, X: [][]float64{vec(61, 0.1)}},
		{Op: wire.OpCorrect, Bias: 1, Labels: labels, X: three(61, 0.1)},
		{Op: wire.OpEval, Bias: 1, Labels: labels, Folds: 3, Holdout: 2, Rows: 200, Starts: []uint64{0, 50, 100, 150}, X: three(61, 0.1)},
		{Op: wire.OpEval, Bias: 1, Labels: labels, Full: 61, Live: []uint64{1<<61 - 1}, X: three(61, 0.1)},
		// An own point that lacks the columns of half the shards' features.
		{Op: wire.OpEval, Bias: 1, Labels: labels, Full: 61, Live: []uint64{1<<30 - 1 | 1<<60}, X: three(31, 0.1)},
		{Op: wire.OpHessVecAt, Bias: 1, Labels: labels, Stamp: 5, Full: 61, Live: []uint64{1<<30 - 1 | 1<<60}, V: three(31, 1)},
	} {
		b := wire.EncodePoint(p)
		for _, same := range []bool{false, true} {
			f.Add(b, uint16(0), same)
			f.Add(b, uint16(len(b)/2), same)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, cut uint16, same bool) {
		// The worker keeps the point, which may view its message: the
		// fuzzer's bytes are not ours to keep.
		b = bytes.Clone(b)
		parts := [][]byte{b}
		if c := int(cut); c > 0 && c < len(b) {
			parts = [][]byte{b[:c], b[c:]}
		}
		// A point of the round in hand is a resend, which may come in
		// another layout.
		round := w.round + 1
		if same && w.point != nil {
			round = w.round
		}
		w.onPoint(roundMsg{round: round, job: job, parts: parts})
	})
}

// TestGoodbyeWithoutServer: a worker stopped while its server is down
// has no one to tell it is leaving; it ends without waiting for the
// flush to fail and without a warning that it could not say goodbye.
func TestGoodbyeWithoutServer(t *testing.T) {
	srv, err := Embedded("")
	if err != nil {
		t.Fatal(err)
	}
	nc := connected(t, srv.ClientURL())
	defer nc.Close()
	core, logs := observer.New(zap.InfoLevel)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewWorker(nc, WorkerConfig{Name: "leaving", Log: zap.New(core)}).Run(ctx) }()
	srv.Shutdown()
	waitFor(t, 10*time.Second, "the connection to drop", func() bool { return !nc.IsConnected() })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessage("could not say goodbye").Len(); n != 0 {
		t.Errorf("%d warnings that it could not say goodbye", n)
	}
}

// TestRetryStore: an object store request that fails for want of an
// answer is tried again, as storeRetries space it; one that finds nothing
// there is not.
func TestRetryStore(t *testing.T) {
	defer func(d []time.Duration) { storeRetries = d }(storeRetries)
	storeRetries = []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond}
	for _, c := range []struct {
		name  string
		fails int
		err   error
		calls int
		ok    bool
	}{
		{"answers at once", 0, nil, 1, true},
		{"answers after an election", 2, nats.ErrTimeout, 3, true},
		{"never answers", 10, nats.ErrTimeout, 4, false},
		{"nothing there", 10, jetstream.ErrObjectNotFound, 1, false},
		{"no JetStream", 10, nats.ErrNoResponders, 1, false},
	} {
		calls := 0
		err := RetryStore(zap.NewNop(), "x", func() error {
			if calls++; calls <= c.fails {
				return c.err
			}
			return nil
		})
		if calls != c.calls || (err == nil) != c.ok {
			t.Errorf("%s: %d calls, error %v; want %d calls, ok %v", c.name, calls, err, c.calls, c.ok)
		}
	}
}
