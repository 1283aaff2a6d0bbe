package train

import (
	"bytes"
	"crypto/sha256"
	"encoding/gob"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/shard"
)

// TestCheckpointRefusesDamage: a checkpoint reads back as written, and any
// flipped bit, a truncation, the format before checksums and another
// version are refused, so a damaged copy never resumes into another model.
func TestCheckpointRefusesDamage(t *testing.T) {
	cp := &Checkpoint{Version: checkpointVersion, Data: "data", Flags: "flags", G0Norm: []float64{1.5, 2},
		Opt: osgm.Snapshot{Method: "lbfgs", Evals: 7, Iters: []int{3, 4}, Converged: []bool{false, true}, Stalled: []bool{false, false},
			States: [][]byte{{1, 2, 3}, {4, 5}}}}
	b, err := cp.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeCheckpoint(b)
	if err != nil || !reflect.DeepEqual(got, cp) {
		t.Fatalf("read back as %+v, %v", got, err)
	}
	for i := range b {
		bad := bytes.Clone(b)
		bad[i] ^= 1 << (i % 8)
		if _, err := DecodeCheckpoint(bad); err == nil {
			t.Fatalf("a bit flipped in byte %d of %d was not noticed", i, len(b))
		}
	}
	for n := range len(b) {
		if _, err := DecodeCheckpoint(b[:n]); err == nil {
			t.Fatalf("cut to %d of %d bytes: not noticed", n, len(b))
		}
	}

	var old bytes.Buffer // version 4: the gob alone
	v4 := *cp
	v4.Version = 4
	gob.NewEncoder(&old).Encode(&v4)
	if _, err := DecodeCheckpoint(old.Bytes()); err == nil || !strings.Contains(err.Error(), "before version 5") {
		t.Fatalf("the format before checksums: %v", err)
	}
	v5 := *cp // version 5: the states inside the gob
	v5.Version = 5
	framed := bytes.NewBufferString(checkpointMagic)
	gob.NewEncoder(framed).Encode(&v5)
	sum := sha256.Sum256(framed.Bytes())
	if _, err := DecodeCheckpoint(append(framed.Bytes(), sum[:]...)); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("checkpoint version 5, this build reads %d", checkpointVersion)) {
		t.Fatalf("version 5: %v", err)
	}
	other := *cp
	other.Version = checkpointVersion + 1
	b, _ = other.Encode()
	if _, err := DecodeCheckpoint(b); err == nil || !strings.Contains(err.Error(), "this build reads") {
		t.Fatalf("another version: %v", err)
	}
}

// TestResumeRefusesCheckpointsThatDoNotFit: a checkpoint of this data and
// these flags whose contents do not fit the run (read back whole, so not
// damaged: made by a faulty build, say) is refused with an error before
// any pass, never resumed from.
func TestResumeRefusesCheckpointsThatDoNotFit(t *testing.T) {
	path := sparseFeatureFile(t, 3)
	cfg := Config{Problem: Problem{C: 1, Bias: 1}, Settings: Settings{Options: osgm.Options{MaxIter: 100000}, Eps: 1e-8}}
	var saved *Checkpoint
	stop := cfg
	stop.CheckpointEvery = 1000
	stop.Save = func(c *Checkpoint) error { saved = c; return nil }
	passes := 0
	stop.Interrupt = func() bool { passes++; return passes == 10 }
	if _, err := Train(localBackend(t, path), stop); !errors.Is(err, osgm.ErrInterrupted) || saved == nil {
		t.Fatalf("interrupted run: %v, checkpoint %v", err, saved != nil)
	}
	for _, c := range []struct {
		name   string
		change func(*Checkpoint)
		want   string
	}{
		{"starting gradients of 2 problems", func(c *Checkpoint) { c.G0Norm = c.G0Norm[:2] }, "2 problems' starting gradients"},
		{"states of 2 problems", func(c *Checkpoint) { c.Opt.States = c.Opt.States[:2] }, "2, 3, 3 and 3 entries for 3 problems"},
		{"a state cut short", func(c *Checkpoint) { c.Opt.States[1] = c.Opt.States[1][:len(c.Opt.States[1])/2] }, "method state"},
		{"other data", func(c *Checkpoint) { c.Data = "other" }, "other data"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cp := *saved
			cp.G0Norm = slices.Clone(cp.G0Norm)
			cp.Opt.States = slices.Clone(cp.Opt.States)
			c.change(&cp)
			resume := cfg
			resume.Resume = &cp
			resumed := 0
			resume.Interrupt = func() bool { resumed++; return false }
			_, err := Train(localBackend(t, path), resume)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
			if resumed > 0 {
				t.Fatalf("%d rounds ran before the refusal", resumed)
			}
		})
	}
	// Another loss is another problem: its state cannot continue this one.
	other := cfg
	other.Loss, other.Resume = shard.Logistic, saved
	if _, err := Train(localBackend(t, path), other); !errors.Is(err, ErrMismatch) {
		t.Fatalf("a squared-hinge checkpoint resumed as logistic regression: %v", err)
	}
}
