package swarm

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/osgm-svm/osgm/internal/e2etest"
)

// TestSwarmRouteBytes measures what each route between stack.cluster.yaml's
// three NATS servers carries a round, with the workers' sums added at the
// coordinator (star) and along the workers' tree: 9 workers over the 3
// nodes that run a server, 3 a node, each on its own node's server (so
// that every run places them alike), on a file of 1 M features. The
// workers read the file from a path, as every node here sees the host's
// files, so that the load puts no shard on a route. A round's bytes are
// the difference between runs of two lengths over the difference of
// their rounds, so what a run sends once (connections, interest, the
// plan) drops out. It is a measurement for BENCHMARKS.md, run when
// OSGM_SWARM_ROUTES is set; what it asserts is that every run writes
// the same model.
func TestSwarmRouteBytes(t *testing.T) {
	if os.Getenv("OSGM_SWARM_ROUTES") == "" {
		t.Skip("a measurement for BENCHMARKS.md: set OSGM_SWARM_ROUTES=1 to run it")
	}
	needSwarm(t)
	natsOnWorkerNodes(t)
	manager := managerNode(t)
	label(t, manager, "-add", "osgm.worker=true")
	label(t, "h3", "-rm", "osgm.worker")
	t.Cleanup(func() {
		label(t, manager, "-rm", "osgm.worker")
		label(t, "h3", "-add", "osgm.worker=true")
	})
	dir := t.TempDir()
	e2etest.Start(t, "svmgen", "-rows", "40000", "-features", "1000000", "-nnz", "60", "-seed", "11",
		"-o", filepath.Join(dir, "wide.svm")).Wait(t, time.Minute)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var model []byte
	for _, reduce := range []string{"star", "tree"} {
		var runs [2]routeRun
		for i, iters := range []int{5, 65} {
			t.Run(fmt.Sprintf("%s/%d", reduce, iters), func(t *testing.T) {
				runs[i] = measureRoutes(t, dir, reduce, iters)
			})
		}
		if t.Failed() {
			return
		}
		if model == nil {
			model = runs[1].model
		} else if !slices.Equal(model, runs[1].model) {
			t.Errorf("-reduce %s wrote another model", reduce)
		}
		rounds := runs[1].rounds - runs[0].rounds
		for _, r := range slices.Sorted(maps.Keys(runs[1].bytes)) {
			per := float64(runs[1].bytes[r]-runs[0].bytes[r]) / float64(rounds)
			t.Logf("-reduce %s: route %s: %.3f MB a round (%d rounds)", reduce, r, per/1e6, rounds)
		}
	}
}

// routeRun is what one run carried over each route, "from -> to" by node.
type routeRun struct {
	bytes  map[string]int64
	rounds int
	model  []byte
}

func measureRoutes(t *testing.T, dir, reduce string, iters int) routeRun {
	urls := "nats://nats:4222,nats://nats-2:4222,nats://nats-3:4222"
	cmd := []string{"coordinator", "-nats", urls, "-user", "coordinator",
		"-min-workers", "9", "-reduce", reduce, "-method", "hdm", "-e", "1e-12", "-max-iter", strconv.Itoa(iters),
		"/data/wide.svm", "/out/wide.svm.model"}
	// The workers see the file where the coordinator does.
	over := coordinatorCommand(t, cmd, fmt.Sprintf("  worker:\n    volumes:\n      - {type: bind, source: %q, target: /data, read_only: true}\n", dir))
	s := newStack(t, []string{"../../deploy/stack.cluster.yaml", over}, "WORKERS=9", "DATA_DIR="+dir, "TRAIN_FILE=wide.svm")
	s.train = "wide.svm"
	s.mustDeploy()
	run := routeRun{model: s.waitModel(5 * time.Minute), bytes: map[string]int64{}}
	m := regexp.MustCompile(`"msg":"bus","rounds":(\d+)`).FindStringSubmatch(s.logs("coordinator"))
	if m == nil {
		t.Fatal("the coordinator logged no rounds")
	}
	run.rounds, _ = strconv.Atoi(m[1])
	for _, at := range []struct{ service, node string }{{"nats", managerNode(t)}, {"nats-2", "h1"}, {"nats-3", "h2"}} {
		for to, n := range s.routeBytes(at.service, at.node) {
			run.bytes[at.node+" -> "+to] += n
		}
	}
	return run
}

// routeBytes is what the service's NATS server on node has sent over its
// routes, by the host of the server at the other end.
func (s *stack) routeBytes(service, node string) map[string]int64 {
	s.t.Helper()
	on := s.on(node)
	docker := func(args ...string) string {
		out, err := on.docker(args...)
		if err != nil {
			s.t.Fatalf("docker %v on %s: %v\n%s", args, node, err, out)
		}
		return out
	}
	id := docker("ps", "-q", "-f", "label=com.docker.swarm.service.name="+s.name+"_"+service)
	var rz struct {
		Routes []struct {
			RemoteName string `json:"remote_name"`
			OutBytes   int64  `json:"out_bytes"`
		} `json:"routes"`
	}
	out := docker("exec", id, "wget", "-qO-", "http://127.0.0.1:8222/routez")
	if err := json.Unmarshal([]byte(out), &rz); err != nil {
		s.t.Fatalf("%s's /routez: %v\n%s", service, err, out)
	}
	sent := map[string]int64{}
	for _, r := range rz.Routes {
		_, host, _ := strings.Cut(r.RemoteName, "@")
		sent[host] += r.OutBytes
	}
	return sent
}
