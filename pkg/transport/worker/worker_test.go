package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/osgm-svm/osgm/internal/natstest"
	"github.com/osgm-svm/osgm/internal/svmdata"
	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/transport"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// FuzzWorkerPoint hands a worker's core holding real shards any point
// message, whole or cut into two chunks, of a new round or of the round in
// hand: it must evaluate it, ask for the whole point or drop it, never
// panic. Decoding alone (FuzzDecodeMessages) does not see what a point
// that decodes does to the kernels: one without labels once did.
func FuzzWorkerPoint(f *testing.F) {
	path := svmdata.WriteFile(f, svmdata.Stepped(rand.New(rand.NewPCG(3, 4)), 200, 3, 1, 60))
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
	var bad transport.Counter
	bad.Log = zap.NewNop()
	w := newWorkerCore("fuzz", &Config{Parallel: 2}, rec, zap.NewNop(), &bad)
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
		{Op: wire.OpEval, X: three(61, 0.1), Terms: shard.Terms{Bias: 1}},
		{Op: wire.OpEval, Labels: labels, X: three(61, 0.1), Terms: shard.Terms{Bias: 1}},
		{Op: wire.OpEval, Labels: labels, Classes: []uint32{2}, X: [][]float64{vec(60, 0.1)}, Terms: shard.Terms{Bias: -1, Weights: []float64{1, 2}}},
		{Op: wire.OpHessVec, Labels: labels, Stamp: 5, X: three(61, 0.1), V: three(61, 1), Terms: shard.Terms{Bias: 1}},
		{Op: wire.OpHessVecAt, Labels: labels, Stamp: 5, V: three(61, 1), Terms: shard.Terms{Bias: 1}},
		{Op: wire.OpEvalDiag, Labels: labels, Stamp: 6, X: [][]float64{vec(61, 0.1)}, Terms: shard.Terms{Bias: 1}},
		{Op: wire.OpEvalHess, Labels: labels, X: [][]float64{vec(61, 0.1)}, Terms: shard.Terms{Bias: 1}},
		{Op: wire.OpCorrect, Labels: labels, X: three(61, 0.1), Terms: shard.Terms{Bias: 1}},
		{Op: wire.OpEval, Labels: labels, Folds: 3, Rows: 200, Starts: []uint64{0, 50, 100, 150}, X: three(61, 0.1), Terms: shard.Terms{Bias: 1, Holdout: 2}},
		{Op: wire.OpEval, Labels: labels, Full: 61, Live: []uint64{1<<61 - 1}, X: three(61, 0.1), Terms: shard.Terms{Bias: 1}},
		// An own point that lacks the columns of half the shards' features.
		{Op: wire.OpEval, Labels: labels, Full: 61, Live: []uint64{1<<30 - 1 | 1<<60}, X: three(31, 0.1), Terms: shard.Terms{Bias: 1}},
		{Op: wire.OpHessVecAt, Labels: labels, Stamp: 5, Full: 61, Live: []uint64{1<<30 - 1 | 1<<60}, V: three(31, 1), Terms: shard.Terms{Bias: 1}},
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
	srv, err := transport.Embedded("")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := transport.Connect(srv.ClientURL(), "leaving", transport.Auth{}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := transport.WaitConnected(context.Background(), nc, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(nc, Config{Name: "leaving", Log: zap.New(core)}).Run(ctx) }()
	srv.Shutdown()
	natstest.WaitFor(t, 10*time.Second, "the connection to drop", func() bool { return !nc.IsConnected() })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessage("could not say goodbye").Len(); n != 0 {
		t.Errorf("%d warnings that it could not say goodbye", n)
	}
}

// TestCoordinatorOfAnotherVersion: a worker written to by a coordinator
// of another release (its refusal's probe) says so once, with both
// wire versions.
func TestCoordinatorOfAnotherVersion(t *testing.T) {
	srv, err := transport.Embedded("")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := transport.Connect(srv.ClientURL(), "w", transport.Auth{}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	beats, err := nc.SubscribeSync(wire.SubjectHeartbeat)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go New(nc, Config{Name: "w", Log: zap.New(core)}).Run(ctx)
	m, err := beats.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, payload, err := wire.DecodeChunk(m.Data)
	var hb wire.Heartbeat
	if err != nil || json.Unmarshal(payload, &hb) != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	wire.Chunks(wire.KindProbe, 1, 0, 0, nil, 1<<20, func(b []byte) error {
		b[0] = wire.Version + 1
		for range 3 {
			nc.Publish(wire.WorkerSubject(hb.ID), b)
		}
		return nil
	})
	const msg = "a coordinator of another release refuses this worker: run one release on every host"
	natstest.WaitFor(t, 5*time.Second, "the worker to say so", func() bool { return logs.FilterMessage(msg).Len() > 0 })
	nc.Flush()
	e := logs.FilterMessage(msg).All()
	if f := e[0].ContextMap(); len(e) != 1 || fmt.Sprint(f["its_wire_version"]) != fmt.Sprint(wire.Version+1) || fmt.Sprint(f["wire_version"]) != fmt.Sprint(wire.Version) {
		t.Fatalf("logged %+v", e)
	}
}
