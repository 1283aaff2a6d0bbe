package k8s

// The chart on a live two-node cluster that scripts/k8s.sh makes before
// the tests (TestMain) and removes after them: each test installs a
// release of its own, hits it with one fault mid-run, and wants the
// model of `coordinator -local`, bit for bit.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/osgm-svm/osgm/internal/e2etest"
)

const k8sScript = "../../scripts/k8s.sh"

// errCluster is why there is no cluster to test on; nil once makeCluster
// has made it.
var errCluster = errors.New("not made")

// makeCluster makes the two-node cluster, gives its nodes the images and
// makes the Secret the chart mounts, and has Main take it down after the
// tests. Kubernetes' binaries must be built already (scripts/k8s.sh bin,
// about 22 CPU-minutes), unless the tests are required to run.
func makeCluster() {
	if err := e2etest.NodesHere("Kubernetes cluster"); err != nil {
		errCluster = err
		return
	}
	if _, err := os.Stat("/run/netns/osgmk-cp"); err == nil {
		errCluster = errors.New("a cluster is up already, another run's or one killed before its cleanup: `scripts/k8s.sh down` removes it")
		return
	}
	if out, err := k8sSh("built"); err != nil && !required() {
		errCluster = fmt.Errorf("Kubernetes is not built here (scripts/k8s.sh bin builds it, once): %s", out)
		return
	}
	osgm, nats, err := e2etest.ImageNames()
	if err != nil {
		errCluster = err
		return
	}
	e2etest.AfterTests(func() { k8sSh("down") })
	steps := [][]string{{"up", "2"}, {"load", osgm, nats},
		{"kubectl", "create", "secret", "generic", "osgm-passwords",
			"--from-literal=coordinator-password=c-secret", "--from-literal=worker-password=w-secret"}}
	for _, step := range steps {
		if out, err := k8sSh(step...); err != nil {
			errCluster = fmt.Errorf("scripts/k8s.sh %s: %v\n%s", strings.Join(step, " "), err, out)
			return
		}
	}
	errCluster = nil
}

func required() bool { return os.Getenv("OSGM_K8S_TESTS") == "require" }

func k8sSh(args ...string) (string, error) {
	out, err := exec.Command(k8sScript, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func needCluster(t *testing.T) {
	t.Helper()
	if errCluster != nil {
		if required() {
			t.Fatal(errCluster)
		}
		t.Skip(errCluster)
	}
}

// release is one helm release of the chart: its PersistentVolumes are
// directories of this machine, which every node sees, so the test reads
// the model where the coordinator wrote it.
type release struct {
	t     *testing.T
	name  string
	dir   string
	flags []string // the training flags, for the -local run to compare with
	start time.Time
}

var releases int

// install installs a release training a9a with flags on workers
// workers, set are more values, and removes it when the test ends.
func install(t *testing.T, flags []string, workers int, set ...string) *release {
	t.Helper()
	needCluster(t)
	src := filepath.Join(e2etest.SharedData(), "a9a.bz2")
	if _, err := os.Stat(src); err != nil {
		t.Skip("../shared/data/a9a.bz2 is not here")
	}
	releases++
	r := &release{t: t, name: fmt.Sprintf("r%d-%d", os.Getpid()%10000, releases), dir: t.TempDir(), flags: flags}
	for _, d := range []string{"data", "out", "nats"} {
		// The pods run as the image's non-root user.
		if err := os.Mkdir(filepath.Join(r.dir, d), 0o777); err != nil || os.Chown(filepath.Join(r.dir, d), 65532, 65532) != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(r.dir, "data/a9a.bz2"), e2etest.ReadFile(t, src), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.remove)
	for claim, d := range map[string]string{r.name + "-data": "data", r.name + "-out": "out", "data-" + r.name + "-nats-0": "nats"} {
		r.sh("pv", claim, filepath.Join(r.dir, d))
	}
	osgm, nats, _ := e2etest.ImageNames()
	args := []string{"install", r.name, chart, "--set", "images.osgm=" + osgm, "--set", "images.nats=" + nats,
		"--set", "data.claim=" + r.name + "-data", "--set", "data.file=a9a.bz2",
		"--set", "model.claim=" + r.name + "-out", "--set", "model.file=a9a.model",
		"--set", "workers.replicas=" + strconv.Itoa(workers), "--set", "workers.resources.requests.cpu=100m",
		"--set-json", "training.args=" + jsonList(append(flags, "-heartbeat-timeout", "2s", "-checkpoint-every", "20"))}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	r.start = time.Now()
	r.sh(append([]string{"helm"}, args...)...)
	return r
}

func jsonList(s []string) string {
	q := make([]string, len(s))
	for i, a := range s {
		q[i] = strconv.Quote(a)
	}
	return "[" + strings.Join(q, ",") + "]"
}

// slow is a run long enough to be hit mid-way: HDM for a fixed number of
// iterations, 16 shards to give every worker some to lose.
func slow(iters int) []string {
	return []string{"-method", "hdm", "-e", "1e-12", "-max-iter", strconv.Itoa(iters), "-shards", "16"}
}

func (r *release) step(what string) { r.t.Logf("%5.1fs %s", time.Since(r.start).Seconds(), what) }

// sh runs scripts/k8s.sh and fails the test if it fails.
func (r *release) sh(args ...string) string {
	r.t.Helper()
	out, err := k8sSh(args...)
	if err != nil {
		r.t.Fatalf("scripts/k8s.sh %s: %v\n%s", strings.Join(args, " "), err, e2etest.Tail(out, 4000))
	}
	return out
}

// remove uninstalls the release and its volumes, heals every node, and
// on failure logs why pods did not run and what the coordinator said.
func (r *release) remove() {
	if r.t.Failed() {
		why, _ := k8sSh("why")
		r.t.Logf("scripts/k8s.sh why:\n%s\ncoordinator:\n%s", why, e2etest.Tail(r.logs("coordinator"), 6000))
	}
	for _, n := range []string{"n1", "n2"} {
		k8sSh("heal", n)
	}
	r.step("removing the release")
	k8sSh("helm", "uninstall", r.name, "--wait", "--timeout", "2m")
	claims := []string{r.name + "-data", r.name + "-out", "data-" + r.name + "-nats-0"}
	k8sSh(append([]string{"kubectl", "delete", "pvc", "--wait=false"}, claims...)...)
	k8sSh(append([]string{"kubectl", "delete", "pv", "--wait=false"}, claims...)...)
}

func (r *release) selector(component string) string {
	return "app.kubernetes.io/instance=" + r.name + ",app.kubernetes.io/component=" + component
}

// pod is one line of `kubectl get pods`.
type pod struct{ name, node, phase string }

// pods lists the component's pods that are not being deleted.
func (r *release) pods(component string) []pod {
	out, err := k8sSh("kubectl", "get", "pods", "-l", r.selector(component), "-o",
		`jsonpath={range .items[*]}{.metadata.name}{"\t"}{.spec.nodeName}{"\t"}{.status.phase}{"\tx"}{.metadata.deletionTimestamp}{"\n"}{end}`)
	if err != nil {
		return nil
	}
	var ps []pod
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Split(line, "\t"); len(f) == 4 && f[3] == "x" {
			ps = append(ps, pod{f[0], f[1], f[2]})
		}
	}
	return ps
}

// onePod is one of the component's running pods.
func (r *release) onePod(component string) pod {
	r.t.Helper()
	for _, p := range r.pods(component) {
		if p.phase == "Running" {
			return p
		}
	}
	r.t.Fatalf("no %s pod runs: %v", component, r.pods(component))
	return pod{}
}

// running lists the nodes where the component has a pod running.
func (r *release) running(component string) []string {
	var nodes []string
	for _, p := range r.pods(component) {
		if p.phase == "Running" {
			nodes = append(nodes, p.node)
		}
	}
	return nodes
}

// logs is what the component's pods that still exist have logged.
func (r *release) logs(component string) string {
	out, _ := k8sSh("kubectl", "logs", "-l", r.selector(component), "--tail=-1", "--max-log-requests", "10")
	return out
}

// count is how many of the coordinator's log lines have message msg.
func (r *release) count(msg string) int {
	return strings.Count(r.logs("coordinator"), `"msg":"`+msg+`"`)
}

// waitCheckpoint waits for the coordinator's first checkpoint, copied to
// the object store: the run is under way, with state to resume from.
func (r *release) waitCheckpoint() {
	r.t.Helper()
	e2etest.CheckFor(r.t, 3*time.Minute, "a checkpoint in the object store", func() bool {
		return r.count("checkpoint written") > 0
	})
	r.step("checkpoint written")
}

// wantLocalModel waits for the Job to succeed and compares its model
// with the local coordinator's.
func (r *release) wantLocalModel(after string) {
	r.t.Helper()
	e2etest.CheckFor(r.t, 6*time.Minute, "the coordinator's Job to succeed", func() bool {
		out, _ := k8sSh("kubectl", "get", "job", r.name+"-coordinator", "-o", "jsonpath={.status.succeeded}")
		return out == "1"
	})
	r.step("model written")
	got := e2etest.ReadFile(r.t, filepath.Join(r.dir, "out/a9a.model"))
	if !bytes.Equal(got, localModel(r.t, r.flags)) {
		r.t.Fatalf("%s the model differs from the local coordinator's", after)
	}
}

func localModel(t *testing.T, flags []string) []byte {
	return e2etest.LocalModel(t, filepath.Join(e2etest.SharedData(), "a9a.bz2"), flags)
}
