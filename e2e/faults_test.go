package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestCoordinatorKilledAndResumed kills the coordinator with SIGKILL in
// the middle of a cluster run and starts it again with the same command,
// as compose's restart policy does (-resume=auto): it resumes from its
// checkpoint, the model is byte-identical to an uninterrupted run, and
// the workers keep the shards they had loaded.
func TestCoordinatorKilledAndResumed(t *testing.T) {
	data := dataset(t, "a9a")
	args := []string{"-e", "1e-6", "-method", "hdm", "-shards", "6"}
	want := train(t, data, append(args, "-local")...)
	url := natsServer(t)
	ws := workers(t, url, 2, "r")
	ckpt := filepath.Join(t.TempDir(), "run.ckpt")
	model := filepath.Join(t.TempDir(), "model")
	cluster := append(args, "-nats", url, "-min-workers", "2", "-checkpoint", ckpt, "-checkpoint-every", "25", "-resume=auto")
	c := start(t, "coordinator", append(cluster, data, model)...)
	checkFor(t, 60*time.Second, "the first checkpoint", func() bool { return fileSize(ckpt) > 0 })
	c.Cmd.Process.Signal(syscall.SIGKILL)
	<-c.Done()
	if strings.Contains(c.Output(), `"msg":"trained"`) || !strings.Contains(c.Output(), "no checkpoint yet: training from the start") {
		t.Fatalf("the first run did not start afresh, or finished before the kill:\n%s", tail(c.Output(), 2000))
	}
	// The coordinator comes back on "another host": the local file is
	// gone, the copy in the JetStream object store remains.
	if err := os.Remove(ckpt); err != nil {
		t.Fatal(err)
	}
	r := start(t, "coordinator", append(cluster, data, model)...)
	r.Wait(t, 5*time.Minute)
	if !strings.Contains(r.Output(), `"msg":"resuming"`) || !strings.Contains(r.Output(), "checkpoint read from the object store") {
		t.Fatalf("did not resume from the object store:\n%s", tail(r.Output(), 2000))
	}
	if !bytes.Equal(readFile(t, model), want) {
		t.Fatal("model after kill and resume differs from the uninterrupted run")
	}
	for _, w := range ws {
		if out := w.Output(); strings.Count(out, `"msg":"loading shards"`) != 1 || !strings.Contains(out, "shards kept for the new job") {
			t.Fatalf("a worker loaded its shards again for the resumed run:\n%s", tail(out, 3000))
		}
	}
	// Another data set must be refused.
	other := dataset(t, "heart_scale")
	bad := start(t, "coordinator", append(append([]string{}, args...), "-local", "-checkpoint", ckpt, "-resume", other, model+".x")...)
	select {
	case <-bad.Done():
	case <-time.After(time.Minute):
		t.Fatal("resume on other data hung")
	}
	if bad.Err() == nil || !strings.Contains(bad.Output(), "other data") {
		t.Fatalf("resume on other data: %v\n%s", bad.Err(), bad.Output())
	}
	// So must a copy with one bit flipped.
	b := readFile(t, ckpt)
	b[len(b)/2] ^= 8
	damaged := ckpt + ".damaged"
	if err := os.WriteFile(damaged, b, 0o600); err != nil {
		t.Fatal(err)
	}
	bad = start(t, "coordinator", append(append([]string{}, args...), "-local", "-checkpoint", damaged, "-resume", data, model+".y")...)
	select {
	case <-bad.Done():
	case <-time.After(time.Minute):
		t.Fatal("resume from a damaged checkpoint hung")
	}
	if bad.Err() == nil || !strings.Contains(bad.Output(), damaged+": damaged checkpoint") {
		t.Fatalf("resume from a damaged checkpoint: %v\n%s", bad.Err(), bad.Output())
	}
}

// TestNATSServerRestarted stops the NATS server in the middle of training
// and starts a new one on the same port: clients reconnect, the round is
// broadcast again as they come back (not after 3 s without results), and
// the model is unchanged.
func TestNATSServerRestarted(t *testing.T) {
	data := dataset(t, "a9a")
	args := []string{"-e", "1e-6", "-method", "hdm", "-shards", "6"}
	want := train(t, data, append(args, "-local")...)
	c, model := serverRestartedMidRun(t, []string{"-js", "-sd", t.TempDir()}, `"msg":"loaded"`, append(args, data)...)
	if strings.Contains(c.Output(), "round waiting on shards") {
		t.Fatalf("a round waited for results after the restart:\n%s", tail(c.Output(), 3000))
	}
	if !bytes.Equal(readFile(t, model), want) {
		t.Fatal("model after a NATS restart differs")
	}
}

// TestNATSServerRestartedPlaced is TestNATSServerRestarted with
// one-vs-rest classes placed on the workers: what the outage lost (a
// Solve, a class's progress or end) is sent again, and the model is
// unchanged.
func TestNATSServerRestartedPlaced(t *testing.T) {
	data := dataset(t, "news20.t")
	want := train(t, data, "-local")
	_, model := serverRestartedMidRun(t, nil, `"msg":"problem placed"`, "-place", "classes", data)
	if !bytes.Equal(readFile(t, model), want) {
		t.Fatal("model after a NATS restart differs")
	}
}

// serverRestartedMidRun runs a coordinator with args (the training file
// last) over a nats-server (with serverArgs) and two workers, kills the
// server once the coordinator has logged started, and starts a new one
// on the same port. It returns the coordinator, ended and reconnected,
// and its model file.
func serverRestartedMidRun(t *testing.T, serverArgs []string, started string, args ...string) (*proc, string) {
	t.Helper()
	port := freePort(t)
	srvArgs := append([]string{"-a", "127.0.0.1", "-p", fmt.Sprint(port)}, serverArgs...)
	srv := start(t, "nats-server", srvArgs...)
	checkFor(t, 10*time.Second, "nats-server", func() bool { return dial(port) })
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	workers(t, url, 2, "n")
	model := filepath.Join(t.TempDir(), "model")
	c := start(t, "coordinator", append([]string{"-nats", url, "-min-workers", "2", "-heartbeat-timeout", "5s"}, append(args, model)...)...)
	checkFor(t, 60*time.Second, "training to start", func() bool { return strings.Contains(c.Output(), started) })
	srv.Cmd.Process.Signal(syscall.SIGKILL)
	<-srv.Done()
	checkFor(t, 10*time.Second, "the coordinator to notice", func() bool {
		return strings.Contains(c.Output(), "disconnected from NATS")
	})
	start(t, "nats-server", srvArgs...)
	c.Wait(t, 5*time.Minute)
	if !strings.Contains(c.Output(), "reconnected to NATS") {
		t.Fatalf("no reconnection logged:\n%s", tail(c.Output(), 3000))
	}
	return c, model
}

// TestSIGTERMWritesACheckpoint stops a run with SIGTERM: it must save its
// state, say how to continue, and the continued run must end with the
// uninterrupted model. With the embedded server too, whose in-process
// workers must outlive the signal so that the round under way completes
// and the state after it is saved.
func TestSIGTERMWritesACheckpoint(t *testing.T) {
	data := dataset(t, "a9a")
	for _, backend := range [][]string{{"-local"}, nil} {
		t.Run(fmt.Sprint("backend", backend), func(t *testing.T) {
			args := append(slices.Clone(backend), "-e", "1e-6", "-method", "hdm")
			want := train(t, data, args...)
			ckpt := filepath.Join(t.TempDir(), "run.ckpt")
			model := filepath.Join(t.TempDir(), "model")
			withCkpt := append(args, "-checkpoint", ckpt, "-checkpoint-every", "1000000")
			c := start(t, "coordinator", append(withCkpt, data, model)...)
			checkFor(t, 30*time.Second, "training to start", func() bool { return strings.Contains(c.Output(), `"msg":"loaded"`) })
			c.Cmd.Process.Signal(syscall.SIGTERM)
			<-c.Done()
			if c.Err() == nil || !strings.Contains(c.Output(), "continue with the same flags and -resume") || fileSize(ckpt) == 0 {
				t.Fatalf("SIGTERM: exit %v, checkpoint %d bytes:\n%s", c.Err(), fileSize(ckpt), tail(c.Output(), 2000))
			}
			r := start(t, "coordinator", append(withCkpt, "-resume", data, model)...)
			r.Wait(t, 5*time.Minute)
			if !bytes.Equal(readFile(t, model), want) {
				t.Fatal("model after SIGTERM and resume differs")
			}
		})
	}
}

// TestNATSServerOfClusterKilled kills, for good, one server of a cluster of
// three nats-server processes in the middle of training. Each client was
// given one server's URL alone: the coordinator the first's, each worker
// another's. The worker on the killed server fails over to a server it
// learnt of from the cluster, and the model is unchanged.
func TestNATSServerOfClusterKilled(t *testing.T) {
	data := dataset(t, "a9a")
	args := []string{"-e", "1e-6", "-method", "hdm", "-shards", "6"}
	want := train(t, data, append(args, "-local")...)
	servers := natsCluster(t, 3, false)
	workers(t, servers[1].url, 1, "a")
	w2 := workers(t, servers[2].url, 1, "b")
	model := filepath.Join(t.TempDir(), "model")
	c := start(t, "coordinator", append(args, "-nats", servers[0].url, "-min-workers", "2", "-heartbeat-timeout", "5s", data, model)...)
	checkFor(t, 60*time.Second, "training to start", func() bool { return strings.Contains(c.Output(), `"msg":"loaded"`) })
	servers[2].proc.Cmd.Process.Signal(syscall.SIGKILL)
	<-servers[2].proc.Done()
	c.Wait(t, 5*time.Minute)
	back, done := logTime(w2[0].Output(), "reconnected to NATS"), logTime(c.Output(), `"msg":"trained"`)
	if back == 0 || done == 0 || back > done {
		t.Fatalf("the worker on the killed server did not fail over before training ended (at %v, ended %v):\n%s",
			back, done, tail(w2[0].Output(), 3000))
	}
	if strings.Contains(c.Output(), `"worker lost"`) {
		t.Fatalf("a worker was taken for lost:\n%s", tail(c.Output(), 3000))
	}
	if !bytes.Equal(readFile(t, model), want) {
		t.Fatal("model after losing a server of the cluster differs")
	}
}

// logTime is the time stamp of the first JSON log line holding s, 0 if
// none does.
func logTime(out, s string) float64 {
	for _, line := range strings.Split(out, "\n") {
		var l struct{ TS float64 }
		if strings.Contains(line, s) && json.Unmarshal([]byte(line), &l) == nil {
			return l.TS
		}
	}
	return 0
}

// TestObjectStoreOutlivesAServer publishes -objstore's shards to a
// JetStream cluster of three nats-server processes, kills the server
// leading the shards' stream for good, and only then starts the workers:
// they read every shard from the replicas left, and the model is the
// in-process one.
func TestObjectStoreOutlivesAServer(t *testing.T) {
	data := dataset(t, "dna.scale")
	args := []string{"-e", "1e-4", "-shards", "4"}
	want := train(t, data, append(args, "-local")...)
	servers := natsCluster(t, 3, true)
	model := filepath.Join(t.TempDir(), "model")
	c := start(t, "coordinator", append(args, "-nats", clusterURLs(servers), "-objstore", "-min-workers", "2", data, model)...)
	checkFor(t, 60*time.Second, "the shards in the object store", func() bool {
		return strings.Contains(c.Output(), "shards published to the object store")
	})
	left := killShardsLeader(t, servers)
	workers(t, left[0].url, 1, "a")
	workers(t, left[1].url, 1, "b")
	c.Wait(t, 2*time.Minute)
	if !bytes.Equal(readFile(t, model), want) {
		t.Fatal("model from the replicas left differs")
	}
}

// TestShardsLeaderCutMidRun kills, in the middle of a run, the server of
// three that leads the shards' stream. A worker then leaves and another
// joins, so shards are read again from the two copies left; then the
// coordinator is killed too and restarted "on another host" (its file
// gone): it resumes from the checkpoint's copy on the servers left, and
// the model is the in-process one.
func TestShardsLeaderCutMidRun(t *testing.T) {
	data := dataset(t, "heart_scale")
	// A run of a fixed length that outlasts the faults on a quiet
	// machine, whose rounds over NATS take 1-2 ms (a test of -e ends in
	// seconds), on a file small enough that the in-process run is quick.
	args := []string{"-e", "1e-12", "-max-iter", "20000", "-method", "hdm", "-shards", "6"}
	want := train(t, data, append(args, "-local")...)
	servers := natsCluster(t, 3, true)
	ckpt := filepath.Join(t.TempDir(), "run.ckpt")
	model := filepath.Join(t.TempDir(), "model")
	run := append(args, "-objstore", "-min-workers", "2", "-heartbeat-timeout", "2s",
		"-checkpoint", ckpt, "-checkpoint-every", "25", "-resume=auto", data, model)
	c := start(t, "coordinator", append([]string{"-nats", clusterURLs(servers)}, run...)...)
	ws := workers(t, clusterURLs(servers), 2, "a")
	checkFor(t, 60*time.Second, "a checkpoint copied to the object store", func() bool {
		return strings.Contains(c.Output(), `"copied to the object store":true`)
	})
	left := killShardsLeader(t, servers)
	urls := clusterURLs(left)
	joined := workers(t, urls, 1, "b")[0]
	ws[0].Cmd.Process.Signal(syscall.SIGKILL)
	<-ws[0].Done()
	checkFor(t, 60*time.Second, "the shards moved read from the replicas", func() bool {
		return strings.Count(ws[1].Output()+joined.Output(), `"msg":"loaded shards"`) >= 2
	})
	c.Cmd.Process.Signal(syscall.SIGKILL)
	<-c.Done()
	if strings.Contains(c.Output(), `"msg":"trained"`) {
		t.Fatal("the run ended before the coordinator was killed: give it more passes")
	}
	if err := os.Remove(ckpt); err != nil {
		t.Fatal(err)
	}
	r := start(t, "coordinator", append([]string{"-nats", urls}, run...)...)
	r.Wait(t, 5*time.Minute)
	if !strings.Contains(r.Output(), "checkpoint read from the object store") {
		t.Fatalf("did not resume from the object store's copy:\n%s", tail(r.Output(), 2000))
	}
	if out := ws[1].Output() + joined.Output(); strings.Contains(out, "load failed") {
		t.Fatalf("a shard could not be read from the replicas:\n%s", tail(out, 3000))
	}
	if !bytes.Equal(readFile(t, model), want) {
		t.Fatal("model after the shards' leader was cut differs")
	}
}

// clusterURLs is the servers' client URLs, as -nats takes them.
func clusterURLs(servers []clusterServer) string {
	var urls []string
	for _, s := range servers {
		urls = append(urls, s.url)
	}
	return strings.Join(urls, ",")
}

// killShardsLeader kills, for good, the server leading the shards'
// stream, and returns the servers left once the stream has a new leader
// and each of them is healthy.
func killShardsLeader(t *testing.T, servers []clusterServer) []clusterServer {
	t.Helper()
	name := streamLeader(servers[0].url, "OBJ_osgm-shards")
	lost := slices.IndexFunc(servers, func(s clusterServer) bool { return s.name == name })
	if lost < 0 {
		t.Fatalf("the shards' stream has no leader among the servers (%q)", name)
	}
	servers[lost].proc.Cmd.Process.Signal(syscall.SIGKILL)
	<-servers[lost].proc.Done()
	left := slices.Delete(slices.Clone(servers), lost, lost+1)
	checkFor(t, 30*time.Second, "a new leader for the shards' stream", func() bool {
		l := streamLeader(left[0].url, "OBJ_osgm-shards")
		return l != "" && l != name
	})
	// Workers would wait out an election of the cluster's meta layer too
	// (transport.RetryStore), but not for ever.
	for _, s := range left {
		checkFor(t, 30*time.Second, s.url+" healthy", func() bool { return healthy(s.monitor) })
	}
	return left
}

// streamLeader is the name of the server leading a JetStream stream, ""
// when the server at url cannot say.
func streamLeader(url, stream string) string {
	nc, err := nats.Connect(url)
	if err != nil {
		return ""
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return ""
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}

// TestKilledRunsShardsRemoved kills a coordinator that put its shards in
// the object store (-objstore): they stay behind it, and the run resumed
// from its checkpoint, which names them, removes them.
func TestKilledRunsShardsRemoved(t *testing.T) {
	data := dataset(t, "a9a")
	args := []string{"-e", "1e-6", "-method", "hdm", "-shards", "6"}
	want := train(t, data, append(args, "-local")...)
	url := natsServer(t)
	workers(t, url, 2, "o")
	ckpt := filepath.Join(t.TempDir(), "run.ckpt")
	model := filepath.Join(t.TempDir(), "model")
	cluster := append(args, "-nats", url, "-objstore", "-min-workers", "2", "-checkpoint", ckpt, "-checkpoint-every", "25", "-resume=auto")
	c := start(t, "coordinator", append(cluster, data, model)...)
	checkFor(t, 60*time.Second, "the first checkpoint", func() bool { return fileSize(ckpt) > 0 })
	c.Cmd.Process.Signal(syscall.SIGKILL)
	<-c.Done()
	if n := shardObjects(t, url); n != 6 {
		t.Fatalf("the killed run left %d objects, not its 6 shards", n)
	}
	r := start(t, "coordinator", append(cluster, data, model)...)
	r.Wait(t, 5*time.Minute)
	if !strings.Contains(r.Output(), "removed the shards a killed run left") {
		t.Fatalf("the resumed run did not remove the shards left:\n%s", tail(r.Output(), 2000))
	}
	if n := shardObjects(t, url); n != 0 {
		t.Fatalf("%d objects left after the resumed run", n)
	}
	if !bytes.Equal(readFile(t, model), want) {
		t.Fatal("model after kill and resume differs from the uninterrupted run")
	}
}

// clusterServer is one nats-server process of a cluster natsCluster
// starts: server i is named s<i>.
type clusterServer struct {
	name    string // its server name
	url     string
	monitor int // its monitoring port
	proc    *proc
}

// natsCluster starts n nats-server processes routed into one cluster,
// with JetStream when js, and returns once each is healthy (with
// JetStream: in contact with the cluster's meta leader).
func natsCluster(t *testing.T, n int, js bool) []clusterServer {
	var servers []clusterServer
	var routes []string
	for range n {
		servers = append(servers, clusterServer{name: fmt.Sprint("s", len(servers)), url: fmt.Sprintf("nats://127.0.0.1:%d", freePort(t)), monitor: freePort(t)})
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", freePort(t)))
	}
	for i := range servers {
		s := &servers[i]
		args := []string{"-a", "127.0.0.1", "-p", strings.TrimPrefix(s.url, "nats://127.0.0.1:"), "-m", fmt.Sprint(s.monitor),
			"-n", s.name, "--cluster_name", "osgm", "--cluster", routes[i], "--routes", strings.Join(routes, ",")}
		if js {
			args = append(args, "-js", "-sd", t.TempDir())
		}
		s.proc = start(t, "nats-server", args...)
	}
	for i, s := range servers {
		checkFor(t, 30*time.Second, fmt.Sprint("server ", i, " healthy"), func() bool { return healthy(s.monitor) })
	}
	return servers
}
