// Package e2e runs the real binaries as separate processes: a nats-server
// built from the module this project depends on, a coordinator and
// workers, and checks that where the work runs and what fails along the
// way changes no bit of the model.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/osgm-svm/osgm/internal/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m, "..") }

// The process helpers, by the names these tests have always used.
type proc = e2etest.Proc

var (
	start    = e2etest.Start
	launch   = e2etest.Launch
	tail     = e2etest.Tail
	checkFor = e2etest.CheckFor
	freePort = e2etest.FreePort
	readFile = e2etest.ReadFile
	train    = e2etest.Train
	dataset  = e2etest.Dataset
	// natsServer starts a nats-server with JetStream on a free port.
	natsServer            = e2etest.NATSServer
	serverOn              = e2etest.ServerOn
	dial                  = e2etest.Dial
	interruptAtCheckpoint = e2etest.InterruptAtCheckpoint
)

// shardObjects is how many objects the shards' object store on the server
// at url holds.
func shardObjects(t *testing.T, url string) int {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	store, err := js.ObjectStore(context.Background(), "osgm-shards")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := store.List(context.Background())
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		t.Fatal(err)
	}
	return len(objs)
}

func workers(t *testing.T, url string, n int, prefix string) []*proc {
	var out []*proc
	for i := 0; i < n; i++ {
		out = append(out, start(t, "worker", "-nats", url, "-name", fmt.Sprintf("%s%d", prefix, i), "-parallel", "1"))
	}
	return out
}

var flags = []string{"-e", "1e-4", "-heartbeat-timeout", "1s"}

// TestSameModelEverywhere trains a binary and a multi-class set in-process,
// on the embedded default, and on a separate nats-server with one and with
// three worker processes: the model files must be byte-identical.
func TestSameModelEverywhere(t *testing.T) {
	for _, name := range []string{"a9a", "dna.scale"} {
		t.Run(name, func(t *testing.T) {
			data := dataset(t, name)
			local := train(t, data, append(flags, "-local", "-workers", "2")...)
			embedded := train(t, data, append(flags, "-workers", "2")...)
			if !bytes.Equal(local, embedded) {
				t.Fatal("embedded run differs from the in-process run")
			}
			// The bzip2 file itself, whose text the coordinator keeps
			// for its in-process workers' loads.
			compressed := filepath.Join(e2etest.SharedData(), name+".bz2")
			for _, mode := range [][]string{{"-workers", "2"}, {"-local", "-workers", "2"}} {
				if got := train(t, compressed, append(flags, mode...)...); !bytes.Equal(got, local) {
					t.Fatalf("%v on the bzip2 file: the model differs from the plain file's", mode)
				}
			}
			want := train(t, data, append(flags, "-local", "-shards", "7")...)
			for _, c := range []struct {
				n              int
				points, reduce string
			}{{1, "auto", "auto"}, {3, "auto", "auto"}, {3, "own", "auto"}, {3, "auto", "tree"}} {
				url := natsServer(t)
				workers(t, url, c.n, "w")
				got := train(t, data, append(flags, "-nats", url, "-min-workers", fmt.Sprint(c.n), "-shards", "7", "-points", c.points, "-reduce", c.reduce)...)
				if !bytes.Equal(got, want) {
					t.Fatalf("%d external workers, -points %s -reduce %s: model differs from the in-process run", c.n, c.points, c.reduce)
				}
			}
		})
	}
}

// TestWorkerKilled kills one of three workers with SIGKILL in the middle of
// training, freezes it with SIGSTOP, or stops it with SIGTERM; its shards
// move, the round is redone, the model is the same. A killed worker's
// connection closes, which probes find (the heartbeat timeout is an hour);
// a frozen one keeps its connection and is missed after the heartbeat
// timeout; a stopped one says goodbye. With own points, the worker that
// takes the shards over asks for the whole point.
func TestWorkerKilled(t *testing.T) {
	data := dataset(t, "a9a")
	args := []string{"-e", "1e-6", "-shards", "9"}
	want := train(t, data, append(args, "-local")...)
	for _, tc := range []struct {
		sig     syscall.Signal
		timeout string
		logged  string
		points  string
	}{
		{syscall.SIGKILL, "1h", `"why":"its connection closed"`, "broadcast"},
		{syscall.SIGSTOP, "1s", `"msg":"worker lost"`, "broadcast"},
		{syscall.SIGTERM, "1h", `"msg":"worker left"`, "broadcast"},
		{syscall.SIGKILL, "1h", `"msg":"broadcasting the point whole"`, "own"},
	} {
		t.Run(tc.sig.String()+" "+tc.points, func(t *testing.T) {
			url := natsServer(t)
			ws := workers(t, url, 3, "k")
			model := filepath.Join(t.TempDir(), "model")
			c := start(t, "coordinator", append(args, "-heartbeat-timeout", tc.timeout, "-points", tc.points, "-nats", url, "-min-workers", "3", data, model)...)
			checkFor(t, 30*time.Second, "training to start", func() bool { return strings.Contains(c.Output(), `"msg":"loaded"`) })
			ws[1].Cmd.Process.Signal(tc.sig)
			c.Wait(t, 5*time.Minute)
			out := c.Output()
			if !strings.Contains(out, tc.logged) || !strings.Contains(out, `"msg":"shard reassigned"`) {
				t.Fatalf("the coordinator did not log %s and moved shards:\n%s", tc.logged, tail(out, 3000))
			}
			if !bytes.Equal(readFile(t, model), want) {
				t.Fatal("model after a killed worker differs from the uninterrupted run")
			}
			t.Logf("moves: %d", strings.Count(out, `"shard reassigned"`))
		})
	}
}

// TestWorkerKilledMidClass: one-vs-rest over NATS, its classes one at a
// time, each CG step a round; a worker killed a few seconds in (within
// some class) costs rounds, and the model is the in-process one.
func TestWorkerKilledMidClass(t *testing.T) {
	data := dataset(t, "news20.t")
	args := []string{"-shards", "9", "-place", "rows"}
	want := train(t, data, "-shards", "9", "-local")
	url := natsServer(t)
	ws := workers(t, url, 3, "c")
	model := filepath.Join(t.TempDir(), "model")
	c := start(t, "coordinator", append(args, "-heartbeat-timeout", "1h", "-nats", url, "-min-workers", "3", data, model)...)
	checkFor(t, time.Minute, "a class under way", func() bool { return strings.Contains(c.Output(), `"msg":"training"`) })
	ws[1].Cmd.Process.Signal(syscall.SIGKILL)
	c.Wait(t, 5*time.Minute)
	if out := c.Output(); !strings.Contains(out, `"msg":"shard reassigned"`) {
		t.Fatalf("no shard moved: the worker died after the run\n%s", tail(out, 3000))
	}
	if !bytes.Equal(readFile(t, model), want) {
		t.Fatal("the model after a worker killed mid-class differs from the in-process one")
	}
}

// TestWorkerKilledMidPlacedClass: over NATS, news20.t's classes train
// whole on the workers (-place auto: the data fits each), with
// checkpoints; a worker killed outright mid-class is found by a probe,
// although heartbeats would take an hour, and its class goes to another
// worker, to the in-process model's bytes.
func TestWorkerKilledMidPlacedClass(t *testing.T) {
	data := dataset(t, "news20.t")
	want := train(t, data, "-shards", "9", "-local")
	url := natsServer(t)
	ws := workers(t, url, 3, "p")
	dir := t.TempDir()
	model := filepath.Join(dir, "model")
	c := start(t, "coordinator", "-shards", "9", "-heartbeat-timeout", "1h", "-nats", url, "-min-workers", "3",
		"-checkpoint", filepath.Join(dir, "ck"), "-checkpoint-every", "100", data, model)
	placed := regexp.MustCompile(`"msg":"problem placed","event":"placed","worker":"p(\d)-`)
	checkFor(t, time.Minute, "three classes placed", func() bool { return len(placed.FindAllString(c.Output(), 3)) == 3 })
	// The worker placed last, killed as soon as that shows: its class
	// has just begun (a news20.t class takes 0.1 to 0.8 s), where one
	// killed after a fixed wait could have ended it first.
	last := placed.FindAllStringSubmatch(c.Output(), 3)[2][1]
	ws[last[0]-'0'].Cmd.Process.Signal(syscall.SIGKILL)
	c.Wait(t, 5*time.Minute)
	out := c.Output()
	if !strings.Contains(out, `"msg":"classes train whole on workers"`) || strings.Count(out, `"msg":"problem placed"`) <= 20 {
		t.Fatalf("no class placed again: the worker died after its class\n%s", tail(out, 3000))
	}
	if !bytes.Equal(readFile(t, model), want) {
		t.Fatal("the model after a worker killed mid-class differs from the in-process one")
	}
}

// TestPlacedClassesResumed: over NATS with classes placed on the
// workers, a coordinator interrupted once it has saved a checkpoint
// stops its workers' classes, saving their states, and resumed (by a new
// coordinator, to the same workers) writes the uninterrupted model.
func TestPlacedClassesResumed(t *testing.T) {
	data := dataset(t, "news20.t")
	want := train(t, data, "-local")
	url := natsServer(t)
	workers(t, url, 2, "r")
	dir := t.TempDir()
	ck, model := filepath.Join(dir, "ck"), filepath.Join(dir, "model")
	args := []string{"-nats", url, "-min-workers", "2", "-place", "classes", "-checkpoint", ck, "-checkpoint-every", "100", data, model}
	c := start(t, "coordinator", args...)
	interruptAtCheckpoint(t, c, ck, model)
	r := start(t, "coordinator", append([]string{"-resume"}, args...)...)
	r.Wait(t, 5*time.Minute)
	if out := r.Output(); !strings.Contains(out, `"resumed":true`) || !bytes.Equal(readFile(t, model), want) {
		t.Fatalf("the resumed run placed no class from its state, or its model differs from the uninterrupted one:\n%s", tail(out, 3000))
	}
}

// TestSideBySideResumed: the embedded default trains news20.t's classes
// two side by side; interrupted once it has saved a checkpoint, and
// resumed, it writes the uninterrupted model.
func TestSideBySideResumed(t *testing.T) {
	data := dataset(t, "news20.t")
	args := []string{"-workers", "2", "-checkpoint-every", "20"}
	want := train(t, data, args...)
	dir := t.TempDir()
	ck, model := filepath.Join(dir, "ck"), filepath.Join(dir, "model")
	args = append(args, "-checkpoint", ck)
	c := start(t, "coordinator", append(args, data, model)...)
	interruptAtCheckpoint(t, c, ck, model)
	if !strings.Contains(c.Output(), "-resume") {
		t.Fatalf("the interrupted run did not say how to resume:\n%s", tail(c.Output(), 2000))
	}
	r := start(t, "coordinator", append(append([]string{"-resume"}, args...), data, model)...)
	r.Wait(t, 5*time.Minute)
	if !strings.Contains(r.Output(), `"msg":"resuming"`) || !bytes.Equal(readFile(t, model), want) {
		t.Fatal("the resumed side-by-side run did not resume, or its model differs from the uninterrupted one")
	}
}

// TestWorkerJoins starts training with one worker and adds a second: it
// must take over shards at a round boundary, with the same model, and no
// round may wait for a resend. With own points the late worker, which
// held nothing when the round went out, gets the point whole once the
// shards change hands.
func TestWorkerJoins(t *testing.T) {
	data := dataset(t, "a9a")
	// HDM's 2,600 rounds leave the late worker time to join.
	args := []string{"-e", "1e-6", "-method", "hdm", "-shards", "8"}
	want := train(t, data, append(args, "-local")...)
	for _, points := range []string{"auto", "own"} {
		t.Run(points, func(t *testing.T) {
			url := natsServer(t)
			workers(t, url, 1, "first")
			model := filepath.Join(t.TempDir(), "model")
			c := start(t, "coordinator", append(args, "-points", points, "-nats", url, "-min-workers", "1", data, model)...)
			checkFor(t, 30*time.Second, "training to start", func() bool { return strings.Contains(c.Output(), `"msg":"loaded"`) })
			late := workers(t, url, 1, "late")[0]
			c.Wait(t, 5*time.Minute)
			out := c.Output()
			if !strings.Contains(out, `"to":"late0-`) {
				t.Fatalf("no shard moved to the late worker:\n%s", tail(out, 3000))
			}
			if !strings.Contains(late.Output(), `"msg":"loaded shards"`) {
				t.Fatalf("the late worker loaded nothing:\n%s", late.Output())
			}
			if strings.Contains(out, "round waiting on shards") {
				t.Fatalf("a round waited for a resend:\n%s", tail(out, 3000))
			}
			if !bytes.Equal(readFile(t, model), want) {
				t.Fatal("model with a late worker differs")
			}
		})
	}
}

// TestFiveMillionFeatures broadcasts 40 MB points through a server with
// the default 1 MiB max_payload.
func TestFiveMillionFeatures(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: run without -short")
	}
	data := filepath.Join(t.TempDir(), "wide.svm")
	start(t, "svmgen", "-rows", "3000", "-features", "5000000", "-nnz", "40", "-zipf", "1.01", "-o", data).Wait(t, time.Minute)
	url := natsServer(t)
	workers(t, url, 2, "wide")
	args := []string{"-max-iter", "4", "-shards", "4"}
	want := train(t, data, append(args, "-local")...)
	for _, points := range []string{"broadcast", "own"} {
		got := train(t, data, append(args, "-nats", url, "-min-workers", "2", "-points", points)...)
		if !bytes.Equal(got, want) {
			t.Fatalf("5M-feature model over NATS (-points %s) differs from the in-process one", points)
		}
	}
}

// TestObjectStore runs workers that cannot see the data file (a tmpfs
// mounted over its directory in their own mount namespace): they must get
// their shards from the JetStream object store.
func TestObjectStore(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare not available")
	}
	probe := t.TempDir()
	if err := exec.Command("unshare", "-m", "sh", "-c", "mount -t tmpfs none "+probe).Run(); err != nil {
		t.Skipf("cannot mount in a new mount namespace here: %v", err)
	}
	data := dataset(t, "dna.scale")
	dir := filepath.Dir(data)
	url := natsServer(t)
	for i := 0; i < 2; i++ {
		script := fmt.Sprintf("mount -t tmpfs none %s && test ! -e %s && exec %s -nats %s -name blind%d -parallel 1",
			dir, data, e2etest.Bin("worker"), url, i)
		launch(t, exec.Command("unshare", "-m", "sh", "-c", script), "blind worker")
	}
	args := []string{"-e", "1e-4", "-shards", "4"}
	got := train(t, data, append(args, "-nats", url, "-min-workers", "2", "-objstore")...)
	want := train(t, data, append(args, "-local")...)
	if !bytes.Equal(got, want) {
		t.Fatal("object-store model differs from the in-process one")
	}
	// The job's shards are gone from the store with the job.
	if n := shardObjects(t, url); n != 0 {
		t.Fatalf("%d objects left in the store", n)
	}
}

// TestWorkerShortOfMemory runs a worker whose memory (GOMEMLIMIT, one
// of the limits memory.Available reads) leaves no room for plain shards:
// it stores them compact by itself, and the model is the one plain
// shards give.
func TestWorkerShortOfMemory(t *testing.T) {
	data := dataset(t, "ijcnn1")
	url := natsServer(t)
	cmd := exec.Command(e2etest.Bin("worker"), "-nats", url, "-name", "short", "-parallel", "1")
	cmd.Env = []string{"GOMEMLIMIT=1MiB"}
	w := launch(t, cmd, "worker short of memory")
	args := []string{"-e", "1e-4", "-shards", "4"}
	got := train(t, data, append(args, "-nats", url)...)
	want := train(t, data, append(args, "-local", "-compact=false")...)
	if !bytes.Equal(got, want) {
		t.Fatal("the model from compacted shards differs from the plain one")
	}
	if log := w.Output(); !strings.Contains(log, `"count":4`) || !strings.Contains(log, `"compact":4`) {
		t.Fatalf("the worker did not compact its 4 shards:\n%s", tail(log, 2000))
	}
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// waitingArgs train a9a for long enough (osgm-h, 3,000 iterations) to
// lose a worker part way.
var waitingArgs = []string{"-method", "osgm-h", "-e", "1e-6", "-max-iter", "3000", "-heartbeat-timeout", "1s", "-shards", "9"}

// loseOnlyWorker trains data on one worker with args, which checkpoint to
// ck, and kills the worker once the first checkpoint is written.
func loseOnlyWorker(t *testing.T, data, url, ck string, args []string) *proc {
	t.Helper()
	w := workers(t, url, 1, "only")[0]
	c := start(t, "coordinator", append(args, "-nats", url, data, filepath.Join(t.TempDir(), "model"))...)
	checkFor(t, time.Minute, "a checkpoint", func() bool { return fileSize(ck) > 0 })
	w.Cmd.Process.Signal(syscall.SIGKILL)
	return c
}

// TestStoppedWhileWaitingOnWorkers: the only worker dies and no other
// comes; SIGTERM must still end the coordinator, promptly and with the
// checkpoint named, and a restart from that checkpoint with a new worker
// gives the uninterrupted model.
func TestStoppedWhileWaitingOnWorkers(t *testing.T) {
	data := dataset(t, "a9a")
	want := train(t, data, append(waitingArgs, "-local")...)
	ck := filepath.Join(t.TempDir(), "ck")
	args := append(waitingArgs, "-checkpoint", ck, "-checkpoint-every", "100")
	url := natsServer(t)
	c := loseOnlyWorker(t, data, url, ck, args)
	checkFor(t, 30*time.Second, "the worker to be lost", func() bool { return strings.Contains(c.Output(), `"msg":"worker lost"`) })
	if strings.Contains(c.Output(), `"msg":"trained"`) {
		t.Skip("training ended before the worker was killed")
	}
	c.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the coordinator waits on workers after SIGTERM")
	}
	if c.Err() == nil || !strings.Contains(c.Output(), "interrupted; the state is in "+ck) {
		t.Fatalf("exit %v, and no word of the checkpoint:\n%s", c.Err(), tail(c.Output(), 2000))
	}
	workers(t, url, 1, "new")
	got := train(t, data, append(args, "-nats", url, "-resume")...)
	if !bytes.Equal(got, want) {
		t.Fatal("the model resumed after the stop differs from the uninterrupted one")
	}
}

// TestGivesUpWithoutWorkers: with -no-worker-timeout the coordinator
// whose only worker died fails by itself, naming the checkpoint.
func TestGivesUpWithoutWorkers(t *testing.T) {
	data := dataset(t, "a9a")
	ck := filepath.Join(t.TempDir(), "ck")
	c := loseOnlyWorker(t, data, natsServer(t), ck, append(waitingArgs, "-checkpoint", ck, "-checkpoint-every", "100", "-no-worker-timeout", "1s"))
	select {
	case <-c.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the coordinator still waits on workers")
	}
	if strings.Contains(c.Output(), `"msg":"trained"`) {
		t.Skip("training ended before the worker was killed")
	}
	if c.Err() == nil || !strings.Contains(c.Output(), "no live worker for 1s; the state is in "+ck) {
		t.Fatalf("exit %v, and no word of the checkpoint:\n%s", c.Err(), tail(c.Output(), 2000))
	}
}

// TestMetricsEndpoints scrapes -metrics-addr of a coordinator while it
// trains and of a worker after: the counters move with the run.
func TestMetricsEndpoints(t *testing.T) {
	data := dataset(t, "a9a")
	url := natsServer(t)
	wport, cport := freePort(t), freePort(t)
	w := start(t, "worker", "-nats", url, "-name", "m", "-parallel", "1", "-metrics-addr", fmt.Sprintf("127.0.0.1:%d", wport))
	model := filepath.Join(t.TempDir(), "model")
	c := start(t, "coordinator", "-nats", url, "-method", "hdm", "-e", "1e-6", "-metrics-addr", fmt.Sprintf("127.0.0.1:%d", cport), data, model)
	var page string
	checkFor(t, 60*time.Second, "the coordinator's metrics mid-run", func() bool {
		page = scrape(fmt.Sprintf("http://127.0.0.1:%d/metrics", cport))
		return metric(page, "osgm_passes_total") > 0
	})
	if metric(page, "osgm_workers_alive") != 1 {
		t.Fatalf("osgm_workers_alive is not 1:\n%s", page)
	}
	c.Wait(t, 5*time.Minute)
	page = scrape(fmt.Sprintf("http://127.0.0.1:%d/metrics", wport))
	if metric(page, "osgm_worker_shards") == 0 || metric(page, "osgm_worker_eval_seconds_count") == 0 {
		t.Fatalf("the worker's metrics show no shards or no evaluation:\n%s\n%s", page, tail(w.Output(), 2000))
	}
	if h := scrape(fmt.Sprintf("http://127.0.0.1:%d/healthz", wport)); h != "ok\n" {
		t.Fatalf("a connected worker's /healthz: %q", h)
	}
	// A worker whose server is not there is alive but not ready, and
	// says why (a Kubernetes readiness probe's message).
	lone := freePort(t)
	start(t, "worker", "-nats", fmt.Sprintf("nats://127.0.0.1:%d", freePort(t)), "-metrics-addr", fmt.Sprintf("127.0.0.1:%d", lone))
	checkFor(t, 30*time.Second, "an unconnected worker's /healthz", func() bool {
		return strings.HasPrefix(scrape(fmt.Sprintf("http://127.0.0.1:%d/healthz", lone)), "not connected to NATS")
	})
}

// scrape is a metrics page's text, "" if it cannot be read.
func scrape(url string) string {
	r, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

// metric is the value of the first sample of name on a page (0 if none).
func metric(page, name string) float64 {
	for _, line := range strings.Split(page, "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) {
			f := strings.Fields(rest)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return v
		}
	}
	return 0
}

// TestServerWithoutJetStream: against a nats-server run without
// JetStream, a coordinator with -checkpoint and -resume=auto trains and
// says once that its checkpoints stay on its host, and -objstore fails at
// once saying what it needs.
func TestServerWithoutJetStream(t *testing.T) {
	data := dataset(t, "dna.scale")
	port := freePort(t)
	url := serverOn(t, port, "-a", "127.0.0.1", "-p", fmt.Sprint(port))
	workers(t, url, 1, "j")
	args := []string{"-e", "1e-4", "-shards", "4"}
	want := train(t, data, append(args, "-local")...)
	ckpt := filepath.Join(t.TempDir(), "ck")
	model := filepath.Join(t.TempDir(), "model")
	c := start(t, "coordinator", append(args, "-nats", url, "-checkpoint", ckpt, "-checkpoint-every", "5", "-resume=auto", data, model)...)
	c.Wait(t, 2*time.Minute)
	if !bytes.Equal(readFile(t, model), want) || fileSize(ckpt) == 0 {
		t.Fatal("no checkpoint, or not the in-process model")
	}
	if n := strings.Count(c.Output(), "runs without JetStream"); n != 1 {
		t.Fatalf("said %d times that the server runs without JetStream:\n%s", n, tail(c.Output(), 2000))
	}
	o := start(t, "coordinator", append(args, "-nats", url, "-objstore", data, model+".o")...)
	select {
	case <-o.Done():
	case <-time.After(time.Minute):
		t.Fatal("-objstore without JetStream hung")
	}
	if o.Err() == nil || !strings.Contains(o.Output(), "-objstore needs JetStream") {
		t.Fatalf("-objstore without JetStream: %v\n%s", o.Err(), tail(o.Output(), 2000))
	}
}

// TestSmallMaxPayload runs against a nats-server whose max_payload (16
// KB) is below the object store's own chunks (128 KB): rounds, shards
// through the store (-objstore) and checkpoint copies are all cut to fit,
// and a coordinator without its checkpoint file resumes from the copy.
func TestSmallMaxPayload(t *testing.T) {
	data := dataset(t, "dna.scale")
	port := freePort(t)
	conf := filepath.Join(t.TempDir(), "nats.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf("host: 127.0.0.1\nport: %d\nmax_payload: 16KB\njetstream { store_dir: %q }\n", port, t.TempDir())), 0o600)
	url := serverOn(t, port, "-c", conf)
	workers(t, url, 2, "p")
	args := []string{"-e", "1e-3", "-shards", "4"}
	want := train(t, data, append(args, "-local")...)
	ckpt := filepath.Join(t.TempDir(), "ck")
	model := filepath.Join(t.TempDir(), "model")
	run := append(args, "-nats", url, "-min-workers", "2", "-objstore", "-checkpoint", ckpt, "-checkpoint-every", "5", "-resume=auto")
	c := start(t, "coordinator", append(run, data, model)...)
	c.Wait(t, 2*time.Minute)
	if !bytes.Equal(readFile(t, model), want) || strings.Contains(c.Output(), "not copied") {
		t.Fatalf("not the in-process model, or a checkpoint not copied:\n%s", tail(c.Output(), 2000))
	}
	os.Remove(ckpt)
	r := start(t, "coordinator", append(run, data, model)...)
	r.Wait(t, 2*time.Minute)
	if !strings.Contains(r.Output(), "checkpoint read from the object store") || !bytes.Equal(readFile(t, model), want) {
		t.Fatalf("did not resume from the store's copy, or another model:\n%s", tail(r.Output(), 2000))
	}
}
