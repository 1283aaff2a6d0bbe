package e2e

import (
	"bytes"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOtherLossesOverNATS: logistic regression (-s 0, two classes and
// one-vs-rest) and the L2-loss SVR (-s 11) train to the in-process run's
// model bytes on three worker processes over a separate nats-server,
// points and partials carrying the loss and its epsilon. With one worker
// frozen right after the load (its heartbeat missed after 1 s), its
// shards move and the model is still the same.
func TestOtherLossesOverNATS(t *testing.T) {
	for _, c := range []struct {
		name   string
		args   []string
		freeze bool // the run outlasts the signal: a small file may not
	}{
		{"a9a", []string{"-s", "0", "-e", "1e-6"}, true},
		{"dna.scale", []string{"-s", "0", "-e", "1e-4"}, true},
		{"housing_scale", []string{"-s", "11", "-e", "1e-6", "-p", "0.5"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := dataset(t, c.name)
			args := append([]string{"-shards", "9", "-heartbeat-timeout", "1s"}, c.args...)
			want := train(t, data, append(args, "-local")...)
			url := natsServer(t)
			ws := workers(t, url, 3, "l")
			if got := train(t, data, append(args, "-nats", url, "-min-workers", "3")...); !bytes.Equal(got, want) {
				t.Fatal("three worker processes: the model differs from the in-process run's")
			}
			if !c.freeze {
				return
			}
			model := filepath.Join(t.TempDir(), "model")
			co := start(t, "coordinator", append(args, "-nats", url, "-min-workers", "3", data, model)...)
			checkFor(t, 30*time.Second, "the load", func() bool { return strings.Contains(co.Output(), `"msg":"loaded"`) })
			ws[1].Cmd.Process.Signal(syscall.SIGSTOP)
			co.Wait(t, 5*time.Minute)
			if out := co.Output(); !strings.Contains(out, `"msg":"worker lost"`) || !strings.Contains(out, `"msg":"shard reassigned"`) {
				t.Fatalf("the frozen worker was not missed, or its shards did not move:\n%s", tail(out, 3000))
			}
			if !bytes.Equal(readFile(t, model), want) {
				t.Fatal("with a worker frozen: the model differs from the in-process run's")
			}
		})
	}
}
