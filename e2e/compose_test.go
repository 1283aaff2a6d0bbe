package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/osgm-svm/osgm/internal/e2etest"
)

// composeCommands reads the command of every service in the compose
// files, later files' replacing earlier ones' as docker compose layers
// them, with ${VAR:-default} and ${VAR:?message} expanded from env.
func composeCommands(t *testing.T, env map[string]string, files ...string) map[string][]string {
	vars := regexp.MustCompile(`\$\{(\w+)(:[-?])?([^}]*)\}`)
	expand := func(s string) string {
		return vars.ReplaceAllStringFunc(s, func(m string) string {
			p := vars.FindStringSubmatch(m)
			if v, ok := env[p[1]]; ok {
				return v
			}
			if p[2] == ":?" {
				t.Fatalf("the compose files need %s: %s", p[1], p[3])
			}
			return p[3]
		})
	}
	out := map[string][]string{}
	for _, file := range files {
		f, err := os.Open(filepath.Join("../deploy", file))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		inServices, service := false, ""
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line != "" && line[0] != ' ' && line[0] != '#': // services:, volumes:, x-...:
				inServices, service = line == "services:", ""
			case inServices && strings.HasPrefix(line, "  ") && line[2] != ' ' && strings.HasSuffix(line, ":"):
				service = strings.TrimSuffix(strings.TrimSpace(line), ":")
			}
			trimmed := strings.TrimSpace(line)
			if rest, ok := strings.CutPrefix(trimmed, "command:"); ok && service != "" {
				var argv []string
				if err := json.Unmarshal([]byte(expand(strings.TrimSpace(rest))), &argv); err != nil {
					t.Fatalf("%s: service %s: command is not a JSON-style list: %v", file, service, err)
				}
				out[service] = argv
			}
		}
	}
	for _, s := range []string{"nats", "worker", "coordinator"} {
		if out[s] == nil {
			t.Fatalf("%v: no command for %s", files, s)
		}
	}
	return out
}

// checksMatch: the one-shot checks run the command they check, with
// -check, so they cannot test other files or credentials than it uses.
func checksMatch(t *testing.T, cmds map[string][]string) {
	t.Helper()
	for check, service := range map[string]string{"check": "coordinator", "worker-check": "worker"} {
		want := append([]string{cmds[service][0], "-check"}, cmds[service][1:]...)
		if !slices.Equal(cmds[check], want) {
			t.Errorf("%s runs %q; the check of %s's command is %q", check, cmds[check], service, want)
		}
	}
}

// TestComposeCommands runs what docker compose would run, as plain
// processes: nats-server with deploy/nats.conf (authentication on), two
// workers and the coordinator, with the same arguments. Only host names
// and mount points are mapped to this machine.
func TestComposeCommands(t *testing.T) {
	data := dataset(t, "heart_scale")
	dataDir, outDir := filepath.Dir(data), t.TempDir()
	env := map[string]string{"COORDINATOR_PASSWORD": "c-secret", "WORKER_PASSWORD": "w-secret",
		"TRAIN_FILE": filepath.Base(data)}
	cmds := composeCommands(t, env, "compose.yaml")
	checksMatch(t, cmds)

	confPath, port, _ := deployConf(t, t.TempDir())
	mapArgs := func(argv []string) []string {
		out := make([]string, len(argv))
		for i, a := range argv {
			a = strings.ReplaceAll(a, "nats://nats:4222", fmt.Sprintf("nats://127.0.0.1:%d", port))
			a = strings.Replace(a, "/etc/nats/nats.conf", confPath, 1)
			a = strings.Replace(a, "0.0.0.0:8080", "127.0.0.1:0", 1) // the status page
			if strings.HasPrefix(a, "/data/") {
				a = filepath.Join(dataDir, strings.TrimPrefix(a, "/data/"))
			}
			if strings.HasPrefix(a, "/out/") {
				a = filepath.Join(outDir, strings.TrimPrefix(a, "/out/"))
			}
			out[i] = a
		}
		return out
	}
	// run starts a service's command, with extra flags first.
	run := func(service string, password string, extra ...string) *proc {
		argv := mapArgs(cmds[service])
		name := argv[0]
		if service == "nats" {
			name = "nats-server" // the image's entrypoint
		} else {
			argv = append(extra, argv[1:]...)
		}
		cmd := exec.Command(e2etest.Bin(name), argv...)
		cmd.Env = []string{"COORDINATOR_PASSWORD=c-secret", "WORKER_PASSWORD=w-secret", "NATS_PASSWORD=" + password}
		return launch(t, cmd, service)
	}
	run("nats", "")
	checkFor(t, 10*time.Second, "nats-server", func() bool { return dial(port) })
	good := []*proc{run("worker", "w-secret"), run("worker", "w-secret")}
	intruder := run("worker", "wrong")
	c := run("coordinator", "c-secret")
	c.Wait(t, 2*time.Minute)
	model := filepath.Join(outDir, filepath.Base(data)+".model")
	want := train(t, data, "-local", "-e", "0.01")
	if got := readFile(t, model); !bytes.Equal(got, want) {
		t.Fatal("the compose cluster's model differs from the in-process one")
	}
	// A worker with the wrong password never joins.
	checkFor(t, 10*time.Second, "the intruder to be refused", func() bool {
		return strings.Contains(intruder.Output(), "uthorization")
	})
	if n := strings.Count(c.Output(), `"msg":"worker joined"`); n != 2 {
		t.Fatalf("%d workers joined; the one with the wrong password must not", n)
	}
	// Sums added along the tree among the workers: they may send them
	// to each other.
	os.Remove(model)
	c = run("coordinator", "c-secret", "-reduce", "tree", "-shards", "8")
	c.Wait(t, 2*time.Minute)
	if got := readFile(t, model); !bytes.Equal(got, train(t, data, "-local", "-e", "0.01", "-shards", "8")) || !strings.Contains(c.Output(), `"tree_hops":2`) {
		t.Fatalf("-reduce tree: not the in-process model, or not along the tree:\n%s", tail(c.Output(), 2000))
	}
	// Shards through the object store: workers may read its bucket.
	os.Remove(model)
	c = run("coordinator", "c-secret", "-objstore")
	c.Wait(t, 2*time.Minute)
	if got := readFile(t, model); !bytes.Equal(got, want) || !strings.Contains(c.Output(), "shards published to the object store") {
		t.Fatalf("-objstore: not the in-process model, or no shards published:\n%s", tail(c.Output(), 2000))
	}
	// A coordinator restarted on another host (its checkpoint file not
	// there) resumes from the copy in the object store.
	ckpt := filepath.Join(outDir, filepath.Base(data)+".ckpt")
	os.Remove(ckpt)
	c = run("coordinator", "c-secret", "-checkpoint-every", "1")
	c.Wait(t, 2*time.Minute)
	os.Remove(ckpt)
	os.Remove(model)
	c = run("coordinator", "c-secret")
	c.Wait(t, 2*time.Minute)
	if got := readFile(t, model); !bytes.Equal(got, want) || !strings.Contains(c.Output(), "checkpoint read from the object store") {
		t.Fatalf("resumed from the object store: not the in-process model, or not from the store:\n%s", tail(c.Output(), 2000))
	}
	if r := replicas(t, fmt.Sprintf("nats://127.0.0.1:%d", port), "osgm-checkpoints", "osgm-shards"); !slices.Equal(r, []int{1, 1}) {
		t.Fatalf("on one server the buckets have %v replicas, not 1", r)
	}
	for _, w := range good {
		if out := w.Output(); strings.Contains(out, "ermissions") {
			t.Fatalf("a worker was refused a subject it needs:\n%s", tail(out, 2000))
		}
	}
	// A worker may publish what workers publish, and nothing else.
	nc, violations := e2etest.WorkerConn(t, fmt.Sprintf("nats://127.0.0.1:%d", port))
	for _, subject := range []string{"osgm.hb", "osgm.j.0000000000000001.sum.w-1"} {
		if err := nc.Publish(subject, []byte("x")); err != nil {
			t.Fatal(err)
		}
		nc.Flush()
		select {
		case err := <-violations:
			t.Fatalf("publishing on %s was refused: %v", subject, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	// Nor may it read another bucket, such as the checkpoints'.
	e2etest.WantRefused(t, nc, violations, "osgm.j.0000000000000001.down", "osgm.hello", "$JS.API.STREAM.INFO.OBJ_osgm-checkpoints")
}

// TestComposeClusterCommands runs what compose.cluster.yaml layered over
// compose.yaml would run: three nats-server processes routed into one
// cluster with deploy/nats-cluster.conf, two workers and the coordinator
// given the three servers. The model is the in-process one, and the
// workers' and coordinator's commands are compose.yaml's but for the
// server list, so the two files cannot drift apart.
func TestComposeClusterCommands(t *testing.T) {
	data := dataset(t, "heart_scale")
	dataDir, outDir := filepath.Dir(data), t.TempDir()
	env := map[string]string{"COORDINATOR_PASSWORD": "c-secret", "WORKER_PASSWORD": "w-secret",
		"TRAIN_FILE": filepath.Base(data)}
	single := composeCommands(t, env, "compose.yaml")
	cmds := composeCommands(t, env, "compose.yaml", "compose.cluster.yaml")
	const list = "nats://nats:4222,nats://nats-2:4222,nats://nats-3:4222"
	for _, s := range []string{"worker", "coordinator", "worker-check", "check"} {
		got := strings.Join(cmds[s], " ")
		if want := strings.Join(single[s], " "); strings.ReplaceAll(got, list, "nats://nats:4222") != want || !strings.Contains(got, list) {
			t.Fatalf("%s: compose.cluster.yaml runs\n  %s\nwhere compose.yaml runs\n  %s", s, got, want)
		}
	}

	checksMatch(t, cmds)

	names := []string{"nats", "nats-2", "nats-3"}
	client, routes, monitors, dirs := map[string]string{}, map[string]string{}, map[string]int{}, map[string]string{}
	for _, n := range names {
		// Each server's directory holds both files, as its container's
		// /etc/nats does: the cluster file includes ./nats.conf.
		dirs[n] = t.TempDir()
		_, port, monitor := deployConf(t, dirs[n])
		client[n], monitors[n] = fmt.Sprintf("127.0.0.1:%d", port), monitor
		routes[n] = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	}
	certs := certsFor(t)
	for _, n := range names {
		startClusterServer(t, cmds["nats"], dirs[n], n, routes, clusterEnv(certs, "r-secret", routes))
	}
	// compose starts the others once every server is healthy: JetStream
	// has a leader across the cluster.
	for _, n := range names {
		checkFor(t, 30*time.Second, n+" to be healthy", func() bool { return healthy(monitors[n]) })
	}

	run := func(service, password string, extra ...string) *proc {
		argv := append(slices.Clone(extra), cmds[service][1:]...)
		for i, a := range argv {
			for _, n := range names {
				a = strings.ReplaceAll(a, "nats://"+n+":4222", "nats://"+client[n])
			}
			if rest, ok := strings.CutPrefix(a, "/data/"); ok {
				a = filepath.Join(dataDir, rest)
			}
			if rest, ok := strings.CutPrefix(a, "/out/"); ok {
				a = filepath.Join(outDir, rest)
			}
			argv[i] = a
		}
		cmd := exec.Command(e2etest.Bin(cmds[service][0]), argv...)
		cmd.Env = []string{"NATS_PASSWORD=" + password}
		return launch(t, cmd, service)
	}
	run("worker", "w-secret")
	run("worker", "w-secret")
	c := run("coordinator", "c-secret")
	c.Wait(t, 2*time.Minute)
	want := train(t, data, "-local", "-e", "0.01")
	if got := readFile(t, filepath.Join(outDir, filepath.Base(data)+".model")); !bytes.Equal(got, want) {
		t.Fatal("the cluster's model differs from the in-process one")
	}
	if strings.Contains(c.Output(), "ermissions") {
		t.Fatalf("the coordinator was refused a subject:\n%s", tail(c.Output(), 2000))
	}
	// The run was too short for a checkpoint. Again with one every pass:
	// each is copied to the cluster's JetStream object store first.
	os.Remove(filepath.Join(outDir, filepath.Base(data)+".model"))
	c = run("coordinator", "c-secret", "-checkpoint-every", "1")
	c.Wait(t, 2*time.Minute)
	if _, err := os.Stat(filepath.Join(outDir, filepath.Base(data)+".ckpt")); err != nil || strings.Contains(c.Output(), "not copied") {
		t.Fatalf("no checkpoint, or one not copied to the object store (%v):\n%s", err, tail(c.Output(), 2000))
	}
	if got := readFile(t, filepath.Join(outDir, filepath.Base(data)+".model")); !bytes.Equal(got, want) {
		t.Fatal("the model written with checkpoints differs")
	}
	// Shards through the cluster's object store, the workers reading
	// them from whichever server holds the stream.
	os.Remove(filepath.Join(outDir, filepath.Base(data)+".ckpt"))
	c = run("coordinator", "c-secret", "-objstore")
	c.Wait(t, 2*time.Minute)
	if !strings.Contains(c.Output(), "object store") {
		t.Fatalf("the shards did not go through the object store:\n%s", tail(c.Output(), 2000))
	}
	if got := readFile(t, filepath.Join(outDir, filepath.Base(data)+".model")); !bytes.Equal(got, want) {
		t.Fatal("the model trained from the object store differs")
	}
	// On three servers the buckets are on three: losing one loses no
	// shard and no checkpoint copy.
	if r := replicas(t, "nats://"+client["nats"], "osgm-checkpoints", "osgm-shards"); !slices.Equal(r, []int{3, 3}) {
		t.Fatalf("the buckets have %v replicas, not 3", r)
	}
	for _, n := range names {
		if r := routesOf(t, monitors[n]); r < len(names)-1 {
			t.Fatalf("%s has %d routes: the servers did not form one cluster", n, r)
		}
	}
}

// routesOf is how many route connections the nats-server monitoring on
// port has (a pool of them to each other server).
func routesOf(t *testing.T, port int) int {
	r, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/routez", port))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var z struct {
		NumRoutes int `json:"num_routes"`
	}
	if err := json.NewDecoder(r.Body).Decode(&z); err != nil {
		t.Fatal(err)
	}
	return z.NumRoutes
}

// healthy reports whether the nats-server monitoring on port says it is
// healthy (with JetStream, that its cluster has a leader).
func healthy(port int) bool {
	r, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
	if err != nil {
		return false
	}
	r.Body.Close()
	return r.StatusCode == http.StatusOK
}

// certsFor is a folder of scripts/certs.sh's certificates (for nats,
// nats-2, nats-3, localhost and 127.0.0.1).
func certsFor(t *testing.T) string {
	certs := t.TempDir()
	if out, err := exec.Command("../scripts/certs.sh", certs).CombinedOutput(); err != nil {
		t.Fatalf("scripts/certs.sh: %v\n%s", err, out)
	}
	return certs
}

// clusterEnv is what compose.cluster.yaml gives every server for
// nats-cluster.conf: the passwords, the route URLs to routes (server
// name to address), which carry the routes' password, and the TLS files
// in certs.
func clusterEnv(certs, routePassword string, routes map[string]string) []string {
	env := []string{"COORDINATOR_PASSWORD=c-secret", "WORKER_PASSWORD=w-secret", "ROUTE_PASSWORD=" + routePassword,
		"ROUTE_TLS_CERT=" + filepath.Join(certs, "server.pem"), "ROUTE_TLS_KEY=" + filepath.Join(certs, "server-key.pem"),
		"ROUTE_TLS_CA=" + filepath.Join(certs, "ca.pem")}
	for _, n := range []string{"nats", "nats-2", "nats-3"} {
		v := "ROUTE_" + strings.ToUpper(strings.ReplaceAll(n, "-", "_"))
		env = append(env, fmt.Sprintf("%s=nats-route://route:%s@%s", v, routePassword, routes[n]))
	}
	return env
}

// startClusterServer runs server name as compose.cluster.yaml does
// (argv, its command), from dir, which holds deployConf's nats.conf:
// nats-cluster.conf, listening for routes at routes[name], with env.
func startClusterServer(t *testing.T, argv []string, dir, name string, routes map[string]string, env []string) *proc {
	cl := string(readFile(t, "../deploy/nats-cluster.conf"))
	cl = strings.Replace(cl, "listen: 0.0.0.0:6222", "listen: "+routes[name], 1)
	os.WriteFile(filepath.Join(dir, "nats-cluster.conf"), []byte(cl), 0o600)
	argv = slices.Clone(argv)
	for i, a := range argv {
		argv[i] = strings.Replace(a, "/etc/nats/nats-cluster.conf", filepath.Join(dir, "nats-cluster.conf"), 1)
	}
	cmd := exec.Command(e2etest.Bin("nats-server"), argv...)
	cmd.Env = append(env, "SERVER_NAME="+name)
	return launch(t, cmd, name)
}

// TestClusterRoutesRefused: nats-cluster.conf's routes take neither a
// server without the routes' password nor one whose certificate is
// not of the cluster's CA, and the server's log says which.
func TestClusterRoutesRefused(t *testing.T) {
	names := []string{"nats", "nats-2", "nats-3"}
	routes, dirs := map[string]string{}, map[string]string{}
	monitor := 0
	for _, n := range names {
		dirs[n] = t.TempDir()
		_, _, m := deployConf(t, dirs[n])
		if n == "nats" {
			monitor = m
		}
		routes[n] = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	}
	argv := []string{"-c", "/etc/nats/nats-cluster.conf"}
	certs, otherCA := certsFor(t), certsFor(t)
	good := startClusterServer(t, argv, dirs["nats"], "nats", routes, clusterEnv(certs, "r-secret", routes))
	// nats-2 knows another password, nats-3 another CA's certificate.
	startClusterServer(t, argv, dirs["nats-2"], "nats-2", routes, clusterEnv(certs, "wrong", routes))
	startClusterServer(t, argv, dirs["nats-3"], "nats-3", routes, clusterEnv(otherCA, "r-secret", routes))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the server's log:\n%s", tail(good.Output(), 4000))
		}
	})
	says := func(what string) bool { return strings.Contains(good.Output(), what) }
	checkFor(t, 30*time.Second, "both routes refused, the log saying why", func() bool {
		return says(`authentication error - User "route"`) && says("TLS route handshake error")
	})
	r, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/routez", monitor))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var rz struct {
		NumRoutes int `json:"num_routes"`
	}
	if err := json.NewDecoder(r.Body).Decode(&rz); err != nil || rz.NumRoutes != 0 {
		t.Fatalf("the server holds %d routes (%v), want none", rz.NumRoutes, err)
	}
}

// deployConf writes deploy/nats.conf into dir with its ports and store
// mapped to this machine, and returns its path and the client and
// monitoring ports.
func deployConf(t *testing.T, dir string) (path string, port, monitor int) {
	port, monitor = freePort(t), freePort(t)
	conf := string(readFile(t, "../deploy/nats.conf"))
	conf = strings.Replace(conf, "port: 4222", fmt.Sprintf("port: %d", port), 1)
	conf = strings.Replace(conf, "127.0.0.1:8222", fmt.Sprintf("127.0.0.1:%d", monitor), 1)
	conf = strings.Replace(conf, "store_dir: /data", "store_dir: "+t.TempDir(), 1)
	path = filepath.Join(dir, "nats.conf")
	os.WriteFile(path, []byte(conf), 0o600)
	return path, port, monitor
}

// deployServer starts nats-server with deploy/nats.conf (deployConf) and
// returns its client URL.
func deployServer(t *testing.T) string {
	confPath, port, _ := deployConf(t, t.TempDir())
	cmd := exec.Command(e2etest.Bin("nats-server"), "-c", confPath)
	cmd.Env = []string{"COORDINATOR_PASSWORD=c-secret", "WORKER_PASSWORD=w-secret"}
	launch(t, cmd, "nats-server")
	checkFor(t, 10*time.Second, "nats-server", func() bool { return dial(port) })
	return fmt.Sprintf("nats://127.0.0.1:%d", port)
}

// TestDeployObjectStores checks deploy/nats.conf's permissions on the
// object stores with objects of 64 MB, large enough that reading one
// needs the server's flow control, which small ones (the compose tests'
// heart_scale) never do: the coordinator puts and reads back a
// checkpoint (a resumed news20.t's is 150 MB) and puts shards; a worker
// reads shards, and not checkpoints.
func TestDeployObjectStores(t *testing.T) {
	url := deployServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := func(user, password, bucket string, create bool) jetstream.ObjectStore {
		nc, err := nats.Connect(url, nats.UserInfo(user, password))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, _ := jetstream.New(nc)
		if create {
			s, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: bucket})
			if err != nil {
				t.Fatalf("%s creates %s: %v", user, bucket, err)
			}
			return s
		}
		s, err := js.ObjectStore(ctx, bucket)
		if err != nil {
			t.Fatalf("%s opens %s: %v", user, bucket, err)
		}
		return s
	}
	big := make([]byte, 64<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	for _, bucket := range []string{"osgm-checkpoints", "osgm-shards"} {
		if _, err := store("coordinator", "c-secret", bucket, true).PutBytes(ctx, "big", big); err != nil {
			t.Fatalf("the coordinator puts into %s: %v", bucket, err)
		}
	}
	if got, err := store("coordinator", "c-secret", "osgm-checkpoints", false).GetBytes(ctx, "big"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("the coordinator reads its checkpoint back: %v", err)
	}
	if got, err := store("worker", "w-secret", "osgm-shards", false).GetBytes(ctx, "big"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("a worker reads shards: %v", err)
	}
	nc, err := nats.Connect(url, nats.UserInfo("worker", "w-secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	short, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	if _, err := js.ObjectStore(short, "osgm-checkpoints"); err == nil {
		t.Fatal("a worker opened the checkpoints' bucket")
	}
}

// replicas is how many servers hold each object store bucket, read as
// the coordinator user (0: the bucket is not there).
func replicas(t *testing.T, url string, buckets ...string) []int {
	nc, err := nats.Connect(url, nats.UserInfo("coordinator", "c-secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	var out []int
	for _, b := range buckets {
		n := 0
		if store, err := js.ObjectStore(context.Background(), b); err == nil {
			if st, err := store.Status(context.Background()); err == nil {
				n = st.Replicas()
			}
		}
		out = append(out, n)
	}
	return out
}
