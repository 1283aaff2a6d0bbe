package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/transport"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// TestPlacedClasses: over NATS with workers of their own (no shard
// shared with the coordinator), one-vs-rest classes placed whole on the
// workers write -local's model, and so does a run over the workers'
// row shards; cross-validation with placed classes prints -local's
// accuracy. The placed runs send Solves, the row-sharded one none.
func TestPlacedClasses(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "five")
	var b strings.Builder
	// A feature a row, as TestShelvedModel's: a class's state is past
	// what a batch may hold, so the classes go one at a time.
	for i := 0; i < 40000; i++ {
		c := i % 5
		fmt.Fprintf(&b, "%d %d:1 %d:%g %d:0.5\n", c+1, 1+i, 40001+c, 0.2+0.1*float64(i%3), 40010+(i*7)%5)
	}
	os.WriteFile(data, []byte(b.String()), 0o644)
	srv, err := transport.Embedded("")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	for range 2 {
		stop, err := startWorker(context.Background(), srv.ClientURL(), 2, shard.CompactAuto, nil, nil, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var (
		mu      sync.Mutex
		placed  = map[uint64]bool{} // placements sent, by id
		numbers = map[[2]uint64]int{}
	)
	sub, err := nc.Subscribe("osgm.w.>", func(m *nats.Msg) {
		if h, _, err := wire.DecodeChunk(m.Data); err == nil && h.Kind == wire.KindSolve {
			mu.Lock()
			placed[h.Round] = true
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	// Each of a placement's messages has a key of its own (see
	// wire.KindSolving): chunks of two are never put together as one.
	up, err := nc.Subscribe("osgm.j.*.up", func(m *nats.Msg) {
		if h, _, err := wire.DecodeChunk(m.Data); err == nil && h.Seq == 0 && (h.Kind == wire.KindSolving || h.Kind == wire.KindSolved) {
			mu.Lock()
			numbers[[2]uint64{h.Round, uint64(h.Shard)}]++
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Unsubscribe()
	url := srv.ClientURL()
	// A placed class is two placements, its first pass and the rest:
	// every class of every training (3 for -v 3) is placed.
	runs := []struct {
		args   []string
		placed int
	}{
		{[]string{"-local"}, 0},
		{[]string{"-nats", url, "-min-workers", "2", "-place", "classes"}, 10},
		{[]string{"-nats", url, "-min-workers", "2", "-place", "rows"}, 0},
		{[]string{"-local", "-v", "3"}, 0},
		{[]string{"-nats", url, "-min-workers", "2", "-v", "3"}, 30}, // auto: the data fits
		// Logistic regression: the loss travels with the placement.
		{[]string{"-local", "-s", "0"}, 0},
		{[]string{"-nats", url, "-min-workers", "2", "-place", "classes", "-s", "0"}, 10},
		{[]string{"-nats", url, "-min-workers", "2", "-place", "rows", "-s", "0"}, 0},
	}
	want := map[shard.Loss][]byte{} // -local's model
	var wantCV string
	for _, r := range runs {
		model := filepath.Join(dir, "m.model")
		os.Remove(model)
		o, err := parse(append(append([]string{"-q", "-shards", "4"}, r.args...), data, model))
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		clear(placed)
		mu.Unlock()
		out := captureStdout(t, func() {
			if err := run(o); err != nil {
				t.Fatalf("%v: %v", r.args, err)
			}
		})
		nc.Flush()
		mu.Lock()
		n := len(placed)
		mu.Unlock()
		if n != r.placed {
			t.Fatalf("%v: %d placements, want %d", r.args, n, r.placed)
		}
		mu.Lock()
		for k, n := range numbers {
			if n > 1 {
				t.Fatalf("%v: placement %d sent %d messages numbered %d", r.args, k[0], n, k[1])
			}
		}
		mu.Unlock()
		if o.folds > 0 {
			if wantCV == "" {
				wantCV = out
			}
			if out != wantCV || !strings.Contains(out, "Accuracy") {
				t.Fatalf("%v: printed %q, -local %q", r.args, out, wantCV)
			}
			continue
		}
		got, _ := os.ReadFile(model)
		if want[o.cfg.Loss] == nil {
			want[o.cfg.Loss] = got
		}
		if len(got) == 0 || !bytes.Equal(got, want[o.cfg.Loss]) {
			t.Fatalf("%v: another model than -local's", r.args)
		}
	}
}
