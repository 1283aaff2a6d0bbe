// Package swarm runs deploy/stack.yaml on a Docker Swarm of four nodes on
// this machine: the host's engine as the manager, and three more engines,
// each in a network namespace of its own, made by scripts/swarm.sh before
// the tests and removed after them. Faults are what hosts suffer: a node
// cut off the network, a service scaled or updated mid-run. Every run
// ends in the bytes of the coordinator run locally, undisturbed.
//
// The tests need root (namespaces), and an engine not in a swarm of its
// own: they make the swarm, and leave it afterwards. They share it, so
// they run one after another.
package swarm

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/osgm-svm/osgm/internal/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m, "../..", e2etest.BuildImages, makeSwarm) }

const swarmScript = "../../scripts/swarm.sh"

// swarmState is where scripts/swarm.sh keeps its nodes, and marks a
// swarm it made.
var swarmState = cmp.Or(os.Getenv("OSGM_SWARM_DIR"), "/var/lib/osgm-swarm")

// errSwarm is why there is no swarm to test on; nil once makeSwarm has
// made it.
var errSwarm = fmt.Errorf("not made")

// makeSwarm makes the four-node swarm and the stack's secrets, and has
// Main take it down after the tests.
func makeSwarm() {
	if err := e2etest.NodesHere("swarm"); err != nil {
		errSwarm = err
		return
	}
	out, _ := exec.Command("docker", "info", "-f", "{{.Swarm.LocalNodeState}}").Output()
	if s := strings.TrimSpace(string(out)); s != "inactive" {
		errSwarm = fmt.Errorf("this engine is in a swarm already (%s): the tests make their own, and would leave yours", s)
		if _, err := os.Stat(swarmState + "/made-swarm"); err == nil {
			// Two test runs on one engine (or a run killed before its
			// cleanup) find this: the swarm is scripts/swarm.sh's.
			errSwarm = fmt.Errorf("%w; scripts/swarm.sh made it (%s/made-swarm): another run's, under way or killed; `scripts/swarm.sh down` removes it", errSwarm, swarmState)
		}
		return
	}
	osgm, nats, err := e2etest.ImageNames()
	if err != nil {
		errSwarm = err
		return
	}
	e2etest.AfterTests(func() { swarmSh("down") })
	cmd := exec.Command(swarmScript, "up", "3")
	cmd.Env = append(os.Environ(), "OSGM_IMAGE="+osgm, "NATS_IMAGE="+nats)
	if out, err := cmd.CombinedOutput(); err != nil {
		errSwarm = fmt.Errorf("scripts/swarm.sh up 3: %v\n%s", err, out)
		return
	}
	errSwarm = createSecrets()
}

// createSecrets makes the stacks' secrets once for every test: the
// passwords, the routes' (stack.cluster.yaml), and scripts/certs.sh's
// CA and server certificate, naming nats, nats-2 and nats-3, for the
// routes' TLS and stack.tls.yaml's.
func createSecrets() error {
	certs, err := os.MkdirTemp("", "osgm-swarm-certs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(certs)
	if out, err := exec.Command("../../scripts/certs.sh", certs).CombinedOutput(); err != nil {
		return fmt.Errorf("scripts/certs.sh: %v\n%s", err, out)
	}
	files := map[string]string{"osgm_nats_ca": "ca.pem", "osgm_nats_cert": "server.pem", "osgm_nats_key": "server-key.pem"}
	for name, value := range map[string]string{"osgm_coordinator_password": "c-secret", "osgm_worker_password": "w-secret",
		"osgm_route_password": "r-secret", "osgm_nats_ca": "", "osgm_nats_cert": "", "osgm_nats_key": ""} {
		cmd := exec.Command("docker", "secret", "create", name, "-")
		cmd.Stdin = strings.NewReader(value)
		if f, ok := files[name]; ok {
			cmd.Args[len(cmd.Args)-1], cmd.Stdin = filepath.Join(certs, f), nil
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("docker secret create %s: %v\n%s", name, err, out)
		}
	}
	return nil
}

func swarmSh(args ...string) (string, error) {
	out, err := exec.Command(swarmScript, args...).CombinedOutput()
	return string(out), err
}

// needSwarm skips, or fails where the container tests are required, when
// there is no swarm.
func needSwarm(t *testing.T) {
	t.Helper()
	if errSwarm == nil {
		return
	}
	if e2etest.Required() && !testing.Short() {
		t.Fatal(errSwarm)
	}
	t.Skip(errSwarm)
}

// stack is one deployment of deploy/stack.yaml (and files over it).
type stack struct {
	t     *testing.T
	name  string
	files []string
	env   []string
	out   string   // OUT_DIR
	train string   // TRAIN_FILE
	cuts  []string // nodes cut off the network
	start time.Time
}

// step logs how long the stack has been up, at each step of a test: what
// the swarm takes to notice a fault and act on it.
func (s *stack) step(what string) { s.t.Logf("%5.1fs %s", time.Since(s.start).Seconds(), what) }

var stacks int

// deploy deploys the stack over the shared data set a9a, with the files
// layered over stack.yaml and extra VAR=value settings, and removes it
// when the test ends.
func deploy(t *testing.T, files []string, extra ...string) *stack {
	t.Helper()
	s := newStack(t, files, extra...)
	s.mustDeploy()
	return s
}

// newStack prepares a stack, to be removed when the test ends.
func newStack(t *testing.T, files []string, extra ...string) *stack {
	t.Helper()
	needSwarm(t)
	data := e2etest.SharedData()
	if _, err := os.Stat(filepath.Join(data, "a9a.bz2")); err != nil {
		t.Skip("../shared/data/a9a.bz2 is not here")
	}
	osgm, nats := e2etest.Images(t)
	stacks++
	s := &stack{t: t, name: fmt.Sprintf("osgmsw%d%d", os.Getpid(), stacks), out: t.TempDir(), train: "a9a.bz2",
		files: append([]string{"../../deploy/stack.yaml"}, files...)}
	// The coordinator runs as the image's non-root user, as deployed.
	if err := os.Chown(s.out, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	s.env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"OSGM_IMAGE=" + osgm, "NATS_IMAGE=" + nats, "DATA_DIR=" + data, "OUT_DIR=" + s.out,
		"TRAIN_FILE=" + s.train}, extra...)
	t.Cleanup(s.remove)
	return s
}

// deploy runs `docker stack deploy`, returning its output.
func (s *stack) deploy() (string, error) {
	args := []string{"stack", "deploy"}
	for _, f := range s.files {
		args = append(args, "-c", f)
	}
	s.start = time.Now()
	return s.docker(append(args, s.name)...)
}

func (s *stack) mustDeploy() {
	s.t.Helper()
	if out, err := s.deploy(); err != nil {
		s.t.Fatalf("docker stack deploy: %v\n%s", err, out)
	}
}

// docker runs the docker client with the stack's environment.
func (s *stack) docker(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (s *stack) must(args ...string) string {
	s.t.Helper()
	out, err := s.docker(args...)
	if err != nil {
		s.t.Fatalf("docker %v: %v\n%s", args, err, e2etest.Tail(out, 4000))
	}
	return out
}

// remove takes the stack down and waits until its containers and network
// are gone, so that the next test starts on an empty swarm.
func (s *stack) remove() {
	if s.t.Failed() {
		for _, svc := range []string{"coordinator", "worker", "nats"} {
			out, _ := s.docker("service", "ps", "--no-trunc", s.name+"_"+svc)
			logs, _ := s.docker("service", "logs", "--raw", "--tail", "40", s.name+"_"+svc)
			s.t.Logf("%s:\n%s\n%s", svc, out, e2etest.Tail(logs, 6000))
		}
	}
	s.step("removing the stack")
	s.docker("stack", "rm", s.name)
	e2etest.CheckFor(s.t, 2*time.Minute, "the stack to be removed", func() bool {
		out, _ := s.docker("network", "ls", "-q", "-f", "label=com.docker.stack.namespace="+s.name)
		return out == ""
	})
	// A stack's volumes outlive it: NATS's, kept, would give the next
	// stack of this name the object store's shards and checkpoint.
	e2etest.CheckFor(s.t, time.Minute, "the stack's volume to be removed", func() bool {
		_, err := s.docker("volume", "rm", "-f", s.name+"_nats-data")
		return err == nil
	})
	s.heal()
}

// task is one line of `docker service ps`.
type task struct{ node, desired, current string }

// tasks lists a service's tasks, newest first.
func (s *stack) tasks(service string) []task {
	s.t.Helper()
	out := s.must("service", "ps", "--format", "{{.Node}}\t{{.DesiredState}}\t{{.CurrentState}}", s.name+"_"+service)
	var ts []task
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Split(line, "\t"); len(f) == 3 {
			ts = append(ts, task{f[0], f[1], f[2]})
		}
	}
	return ts
}

// running lists the nodes where a service has a task running.
func (s *stack) running(service string) []string {
	var nodes []string
	for _, tk := range s.tasks(service) {
		if tk.desired == "Running" && strings.HasPrefix(tk.current, "Running") {
			nodes = append(nodes, tk.node)
		}
	}
	return nodes
}

// logs is what the service's tasks have logged on every node. They are
// read from each node's own engine, not through `docker service logs`,
// whose stream leaves out a node the manager cannot reach: a cut node,
// or one still rejoining after a heal (a test once waited 3 minutes for
// a line a task on a healed node had logged).
func (s *stack) logs(service string) string {
	var b strings.Builder
	for _, node := range []string{managerNode(s.t), "h1", "h2", "h3"} {
		b.WriteString(s.logsOn(service, node))
	}
	return b.String()
}

// logsOn is what the service's tasks on node have logged, newest task
// first.
func (s *stack) logsOn(service, node string) string {
	s.t.Helper()
	on := s.on(node)
	ids, err := on.docker("ps", "-a", "-q", "-f", "label=com.docker.swarm.service.name="+s.name+"_"+service)
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, id := range strings.Fields(ids) {
		out, _ := on.docker("logs", id)
		b.WriteString(out + "\n")
	}
	return b.String()
}

// on is the stack as seen by node's engine (the manager's is this host's).
func (s *stack) on(node string) *stack {
	if node == managerNode(s.t) {
		return s
	}
	host, ok := nodeHosts[node]
	if !ok {
		out, err := swarmSh("env", node)
		if err != nil {
			s.t.Fatalf("swarm.sh env %s: %v", node, err)
		}
		host = strings.TrimPrefix(strings.TrimSpace(out), "export ")
		nodeHosts[node] = host
	}
	return &stack{t: s.t, name: s.name, env: append(slices.Clone(s.env), host)}
}

// nodeHosts holds each node's DOCKER_HOST setting, from swarm.sh env: the
// log reads ask for it at every poll. (The tests run one at a time.)
var nodeHosts = map[string]string{}

// waitModel waits for the coordinator's task to complete and returns the
// model's bytes.
func (s *stack) waitModel(timeout time.Duration) []byte {
	s.t.Helper()
	e2etest.CheckFor(s.t, timeout, "the coordinator to finish", func() bool {
		ts := s.tasks("coordinator")
		if len(ts) > 0 && strings.HasPrefix(ts[0].current, "Failed") {
			s.t.Fatalf("the coordinator failed: %+v\n%s", ts, e2etest.Tail(s.logs("coordinator"), 3000))
		}
		return len(ts) > 0 && strings.HasPrefix(ts[0].current, "Complete")
	})
	return e2etest.ReadFile(s.t, filepath.Join(s.out, s.train+".model"))
}

// wantLocalModel checks that the model is the bytes of `coordinator
// -local`, undisturbed, with the same training flags.
func (s *stack) wantLocalModel(flags []string, after string) {
	s.t.Helper()
	got := s.waitModel(5 * time.Minute)
	s.step("model written")
	if !bytes.Equal(got, localModel(s.t, flags)) {
		s.t.Fatalf("%s the model differs from the local coordinator's", after)
	}
}

func localModel(t *testing.T, flags []string) []byte {
	return e2etest.LocalModel(t, filepath.Join(e2etest.SharedData(), "a9a.bz2"), flags)
}

// slowRun is a file layered over stack.yaml that gives the coordinator
// (with NATS at urls, by default stack.yaml's server) a run long enough
// to be hit mid-way (HDM for a fixed number of iterations, a checkpoint
// every 20 passes, lost workers noticed after 2 s), keeping the rest of
// its command; flags are its training flags. Its 16 shards (a9a's
// default is 3) give each of the workers some to lose.
func slowRun(t *testing.T, iters int, urls ...string) (file string, flags []string) {
	return slowRunWith(t, iters, urls)
}

// slowRunWith is slowRun with more of the coordinator's service (YAML,
// as under it).
func slowRunWith(t *testing.T, iters int, urls []string, more ...string) (file string, flags []string) {
	if len(urls) == 0 {
		urls = []string{"nats://nats:4222"}
	}
	flags = []string{"-method", "hdm", "-e", "1e-12", "-max-iter", strconv.Itoa(iters), "-shards", "16"}
	cmd := append([]string{"coordinator", "-nats", urls[0], "-user", "coordinator", "-objstore",
		"-min-workers", "2", "-heartbeat-timeout", "2s", "-checkpoint-every", "20",
		"-checkpoint", "/ckpt/${TRAIN_FILE}.ckpt", "-resume=auto"}, flags...)
	cmd = append(cmd, "/data/${TRAIN_FILE}", "/out/${TRAIN_FILE}.model")
	return coordinatorCommand(t, cmd, more...), flags
}

// coordinatorCommand is a file layered over stack.yaml that gives the
// coordinator the command cmd, and has the services in more (YAML, as
// under services:).
func coordinatorCommand(t *testing.T, cmd []string, more ...string) (file string) {
	q := make([]string, len(cmd))
	for i, a := range cmd {
		q[i] = strconv.Quote(a)
	}
	file = filepath.Join(t.TempDir(), "coordinator.yaml")
	yaml := fmt.Sprintf("version: \"3.8\"\nservices:\n  coordinator:\n    command: [%s]\n%s", strings.Join(q, ", "), strings.Join(more, ""))
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// waitCheckpoint waits for the coordinator's first checkpoint, copied to
// the object store: the run is under way, with state to resume from.
func (s *stack) waitCheckpoint() {
	s.t.Helper()
	e2etest.CheckFor(s.t, 3*time.Minute, "a checkpoint in the object store", func() bool {
		return strings.Contains(s.logs("coordinator"), `"checkpoint written"`)
	})
	s.step("checkpoint written")
}

// count is how many of the coordinator's log lines have message msg.
func (s *stack) count(msg string) int {
	return strings.Count(s.logs("coordinator"), `"msg":"`+msg+`"`)
}
