package k8s

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/osgm-svm/osgm/internal/e2etest"
)

// TestK8sTraining is the README's install on two nodes: NATS, the
// coordinator and two workers, which see no file and get their shards
// through the object store, one on each node.
func TestK8sTraining(t *testing.T) {
	r := install(t, []string{"-e", "0.01"}, 2)
	r.wantLocalModel("on two nodes,")
	var nodes []string
	for _, p := range r.pods("worker") {
		nodes = append(nodes, p.node)
	}
	slices.Sort(nodes)
	if !slices.Equal(nodes, []string{"n1", "n2"}) {
		t.Errorf("workers ran on %v, want one on each node", nodes)
	}
	if logs := r.logs("worker"); !strings.Contains(logs, `"bucket":"osgm-shards"`) {
		t.Errorf("the workers did not load from the object store:\n%s", e2etest.Tail(logs, 2000))
	}
}

// TestK8sWorkerDeleted: a worker's pod is deleted mid-run; the others
// take its shards and the Deployment starts another.
func TestK8sWorkerDeleted(t *testing.T) {
	r := install(t, slow(15000), 2)
	r.waitCheckpoint()
	r.sh("kubectl", "delete", "pod", "--wait=false", r.onePod("worker").name)
	e2etest.CheckFor(t, time.Minute, "the coordinator to lose the worker", func() bool {
		return r.count("worker left")+r.count("worker lost") > 0
	})
	r.wantLocalModel("with a worker's pod deleted,")
}

// TestK8sNodeCut: the node of a worker (not NATS's) is cut off the
// network mid-run. Once the node is marked lost, its pods are started on
// the other node: the worker, and the coordinator if it was there, which
// resumes from the object store.
func TestK8sNodeCut(t *testing.T) {
	r := install(t, slow(20000), 2)
	r.waitCheckpoint()
	victim := "n1"
	if slices.Contains(r.running("nats"), victim) {
		victim = "n2"
	}
	r.sh("cut", victim)
	r.step("cut " + victim)
	e2etest.CheckFor(t, 2*time.Minute, "the workers to run on the other node alone", func() bool {
		nodes := r.running("worker")
		return len(nodes) == 2 && !slices.Contains(nodes, victim)
	})
	r.step("both workers run off " + victim)
	r.wantLocalModel("with a node cut off,")
}

// TestK8sCoordinatorDeleted: the coordinator's pod is deleted mid-run;
// the Job starts another, which has no checkpoint file (an emptyDir) and
// resumes from its copy in the object store.
func TestK8sCoordinatorDeleted(t *testing.T) {
	r := install(t, slow(15000), 2)
	r.waitCheckpoint()
	first := r.onePod("coordinator").name
	r.sh("kubectl", "delete", "pod", "--wait=false", first)
	e2etest.CheckFor(t, 2*time.Minute, "the Job's next coordinator to resume", func() bool {
		ps := r.pods("coordinator")
		return len(ps) == 1 && ps[0].name != first && strings.Contains(r.logs("coordinator"), `"checkpoint read from the object store"`)
	})
	r.step("resumed")
	r.wantLocalModel("with the coordinator's pod deleted,")
}

// TestK8sScaled: `kubectl scale` takes the workers from 2 to 4 mid-run,
// then to 1.
func TestK8sScaled(t *testing.T) {
	r := install(t, slow(20000), 2)
	r.waitCheckpoint()
	r.sh("kubectl", "scale", "deployment/"+r.name+"-worker", "--replicas=4")
	e2etest.CheckFor(t, 2*time.Minute, "four workers to join", func() bool {
		return r.count("worker joined") >= 4
	})
	r.sh("kubectl", "scale", "deployment/"+r.name+"-worker", "--replicas=1")
	e2etest.CheckFor(t, 2*time.Minute, "three workers to leave", func() bool {
		return r.count("worker left")+r.count("worker lost") >= 3
	})
	r.wantLocalModel("scaled up and down,")
}

// TestK8sRollingUpdate: `kubectl rollout restart` replaces the workers
// one at a time mid-run (maxSurge 1, maxUnavailable 0).
func TestK8sRollingUpdate(t *testing.T) {
	r := install(t, slow(15000), 2)
	r.waitCheckpoint()
	r.sh("kubectl", "rollout", "restart", "deployment/"+r.name+"-worker")
	r.sh("kubectl", "rollout", "status", "deployment/"+r.name+"-worker", "--timeout=3m")
	r.step("rolled out")
	if n := r.count("worker joined"); n < 4 {
		t.Errorf("%d workers joined, want 4: the update ended after the run, or did not replace both", n)
	}
	r.wantLocalModel("through a rolling update,")
}

// TestK8sHelmUpgrade: `helm upgrade` of the worker count mid-run. The
// Job's pod template cannot change, so the count reaches the coordinator
// through a ConfigMap, and the upgrade must not touch the Job.
func TestK8sHelmUpgrade(t *testing.T) {
	r := install(t, slow(15000), 2)
	r.waitCheckpoint()
	r.sh("helm", "upgrade", r.name, chart, "--reuse-values", "--set", "workers.replicas=3")
	e2etest.CheckFor(t, 2*time.Minute, "a third worker to join", func() bool {
		return r.count("worker joined") >= 3
	})
	r.wantLocalModel("with the workers upgraded to 3,")
}

// TestK8sBadInput: what a user gets wrong in a release that installs
// shows in `scripts/k8s.sh why` (the pods' events, and the log of a pod
// that runs but is not ready), naming the cause. Values that contradict
// each other fail the install itself (TestChartRefuses).
func TestK8sBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"a missing Secret", []string{"secrets.passwords=osgm-absent"}, `secret "osgm-absent" not found`},
		{"an image on no node", []string{"images.osgm=osgm:absent"}, `Failed to pull image "osgm:absent"`},
		{"a claim that cannot bind", []string{"model.claim=osgm-absent"}, "claim osgm-absent: not found"},
		{"no node with room for the coordinator", []string{"coordinator.resources.requests.cpu=64"}, "Insufficient cpu"},
		// NATS's image is missing: its pod waits, and the workers,
		// running but not ready, say what they cannot reach.
		{"workers that cannot reach NATS", []string{"images.nats=nats:absent"}, "cannot reach NATS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := install(t, []string{"-e", "0.01"}, 1, tc.set...)
			e2etest.CheckFor(t, 90*time.Second, "scripts/k8s.sh why to say "+tc.want, func() bool {
				out, _ := k8sSh("why")
				return strings.Contains(out, tc.want)
			})
			r.step("why says " + tc.want)
		})
	}
}
