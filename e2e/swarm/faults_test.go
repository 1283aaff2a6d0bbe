package swarm

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/osgm-svm/osgm/internal/e2etest"
)

// TestSwarmTraining is the README's stack on the swarm, with TLS on the
// bus (stack.tls.yaml, scripts/certs.sh's certificates as secrets,
// createSecrets): NATS
// and the coordinator on the manager, two workers on two other nodes,
// which see no file and get their shards through the object store, and
// passwords from swarm secrets. The model is the local coordinator's
// bytes, and a client on the stack's network without the CA is refused
// and told to give it. (The other tests run the stack without TLS.)
func TestSwarmTraining(t *testing.T) {
	needSwarm(t)
	s := deploy(t, []string{"../../deploy/stack.tls.yaml"}, "WORKERS=2")
	s.wantLocalModel([]string{"-e", "0.01"}, "across the swarm,")
	nodes := s.running("worker")
	slices.Sort(nodes)
	if len(nodes) != 2 || nodes[0] == nodes[1] || !strings.HasPrefix(nodes[0], "h") || !strings.HasPrefix(nodes[1], "h") {
		t.Errorf("workers run on %v, want two of the other nodes (h1-h3), one each", nodes)
	}
	if logs := s.logs("worker"); !strings.Contains(logs, `"bucket":"osgm-shards"`) {
		t.Errorf("the workers did not load from the object store:\n%s", e2etest.Tail(logs, 2000))
	}
	osgm, _ := e2etest.Images(t)
	out, err := s.docker("run", "--rm", "--network", s.name+"_osgm", "-e", "NATS_PASSWORD=w-secret",
		osgm, "worker", "-check", "-nats", "nats://nats:4222", "-user", "worker")
	if err == nil || !strings.Contains(out, "give the CA with -tlsca") {
		t.Errorf("a worker without the CA: %v\n%s\nwant refused, told to give the CA", err, out)
	}
}

// TestSwarmWorkerNodeCut: the node of one of two workers is cut off the
// network mid-run. The coordinator gives its shards to the other worker,
// the swarm starts its task on the third node, and the run ends in the
// undisturbed run's model.
func TestSwarmWorkerNodeCut(t *testing.T) {
	slow, flags := slowRun(t, 15000)
	s := deploy(t, []string{slow}, "WORKERS=2")
	s.waitCheckpoint()
	victim := s.running("worker")[0]
	s.cut(victim)
	e2etest.CheckFor(t, time.Minute, "the coordinator to lose the cut-off worker", func() bool {
		return s.count("worker lost") > 0
	})
	e2etest.CheckFor(t, time.Minute, "the swarm to start the worker on another node", func() bool {
		nodes := s.running("worker")
		return len(nodes) == 2 && !slices.Contains(nodes, victim)
	})
	s.wantLocalModel(flags, "with a worker's node cut off,")
}

// TestSwarmCoordinatorMoves: the node running the coordinator (and no
// NATS) is cut off mid-run; the swarm starts the coordinator on another
// labelled node, which has no file of the checkpoint and resumes from
// its copy in the object store.
func TestSwarmCoordinatorMoves(t *testing.T) {
	needSwarm(t)
	manager := managerNode(t)
	label(t, manager, "-rm", "osgm.coordinator")
	label(t, "h3", "-rm", "osgm.worker")
	label(t, "h3", "-add", "osgm.coordinator=true")
	t.Cleanup(func() {
		label(t, "h3", "-rm", "osgm.coordinator")
		label(t, "h3", "-add", "osgm.worker=true")
		label(t, manager, "-add", "osgm.coordinator=true")
	})
	slow, flags := slowRun(t, 15000)
	s := deploy(t, []string{slow}, "WORKERS=2")
	s.waitCheckpoint()
	if nodes := s.running("coordinator"); !slices.Equal(nodes, []string{"h3"}) {
		t.Fatalf("the coordinator runs on %v, not on h3, the one node labelled for it", nodes)
	}
	label(t, manager, "-add", "osgm.coordinator=true")
	s.cut("h3")
	e2etest.CheckFor(t, 2*time.Minute, "the coordinator to start on the manager", func() bool {
		return slices.Contains(s.running("coordinator"), manager)
	})
	s.step("the coordinator started on the manager")
	s.wantLocalModel(flags, "with the coordinator moved,")
	if logs := s.logsOn("coordinator", manager); !strings.Contains(logs, `"checkpoint read from the object store"`) {
		t.Errorf("the moved coordinator did not resume from the object store:\n%s", e2etest.Tail(logs, 3000))
	}
}

// TestSwarmScaled: `docker service scale` takes the workers from 2 to 4
// mid-run, then to 1.
func TestSwarmScaled(t *testing.T) {
	slow, flags := slowRun(t, 30000)
	s := deploy(t, []string{slow}, "WORKERS=2")
	s.waitCheckpoint()
	s.must("service", "scale", "-d", s.name+"_worker=4")
	e2etest.CheckFor(t, 2*time.Minute, "four workers to join", func() bool {
		return s.count("worker joined") >= 4
	})
	s.must("service", "scale", "-d", s.name+"_worker=1")
	e2etest.CheckFor(t, 2*time.Minute, "three workers to leave", func() bool {
		return s.count("worker left") >= 3
	})
	s.wantLocalModel(flags, "scaled up and down,")
}

// TestSwarmRollingUpdate: `docker service update --force` restarts the
// workers one at a time mid-run (update_config: start-first).
func TestSwarmRollingUpdate(t *testing.T) {
	slow, flags := slowRun(t, 30000)
	s := deploy(t, []string{slow}, "WORKERS=2")
	s.waitCheckpoint()
	s.must("service", "update", "-d", "--force", s.name+"_worker")
	e2etest.CheckFor(t, 3*time.Minute, "the update to replace both workers", func() bool {
		state, _ := s.docker("service", "inspect", "-f", "{{.UpdateStatus.State}}", s.name+"_worker")
		return state == "completed"
	})
	if n := s.count("worker joined"); n < 4 {
		t.Errorf("%d workers joined, want 4: the update ended after the run, or did not replace both", n)
	}
	s.wantLocalModel(flags, "through a rolling update,")
}

// managerNode is the manager's host name, as `docker service ps` shows it;
// asked once (the log reads ask for it at every poll).
func managerNode(t *testing.T) string {
	if manager == "" {
		manager = e2etest.Docker(t, "node", "inspect", "-f", "{{.Description.Hostname}}", "self")
	}
	return manager
}

var manager string

// label adds ("-add", "key=value") or removes ("-rm", "key") a node's
// label; node is a host name.
func label(t *testing.T, node, op, arg string) {
	t.Helper()
	e2etest.Docker(t, "node", "update", "--label"+op, arg, nodeID(t, node))
}

func nodeID(t *testing.T, hostname string) string {
	t.Helper()
	for _, line := range strings.Split(e2etest.Docker(t, "node", "ls", "--format", "{{.ID}} {{.Hostname}}"), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[1] == hostname {
			return f[0]
		}
	}
	t.Fatalf("no node %s in the swarm", hostname)
	return ""
}

// cut takes a node off the network; it is back once the stack is removed
// (heal).
func (s *stack) cut(node string) {
	s.t.Helper()
	if out, err := swarmSh("cut", node); err != nil {
		s.t.Fatalf("swarm.sh cut %s: %v\n%s", node, err, out)
	}
	s.cuts = append(s.cuts, node)
	s.step(node + " cut off")
}

// heal gives the cut nodes their links back, after the stack is gone so
// that their orphaned tasks never reach a run again, and waits for the
// manager to see them ready.
func (s *stack) heal() {
	t := s.t
	for _, node := range s.cuts {
		if out, err := swarmSh("heal", node); err != nil {
			t.Errorf("swarm.sh heal %s: %v\n%s", node, err, out)
		}
		e2etest.CheckFor(t, 2*time.Minute, node+" ready again", func() bool {
			return e2etest.Docker(t, "node", "inspect", "-f", "{{.Status.State}}", nodeID(t, node)) == "ready"
		})
		s.step(node + " ready again")
	}
}

// natsOnWorkerNodes labels h1 and h2 for stack.cluster.yaml's second and
// third NATS servers until the test ends.
func natsOnWorkerNodes(t *testing.T) {
	label(t, "h1", "-add", "osgm.nats-2=true")
	label(t, "h2", "-add", "osgm.nats-3=true")
	t.Cleanup(func() {
		label(t, "h1", "-rm", "osgm.nats-2")
		label(t, "h2", "-rm", "osgm.nats-3")
	})
}

// wantNear checks that the service's task on node connected first
// to the NATS server named server, the one on its own host, waiting for
// it to connect (it waits for that server, which may start after it).
func (s *stack) wantNear(service, node, server string) {
	s.t.Helper()
	var line string
	e2etest.CheckFor(s.t, time.Minute, service+" on "+node+" to connect to NATS", func() bool {
		for _, l := range strings.Split(s.logsOn(service, node), "\n") {
			if strings.Contains(l, `"msg":"connected to NATS"`) {
				line = l
				return true
			}
		}
		return false
	})
	if !strings.Contains(line, `"server":"`+server+`"`) {
		s.t.Errorf("%s on %s: %s; want the server on its host, %s", service, node, line, server)
	}
}

// TestSwarmBadInput: what a stack cannot start with is told where the
// README says to look: the deploy's own error, `scripts/swarm.sh why`
// for a task the swarm cannot place or start, and the coordinator's log
// for a fault of its own.
func TestSwarmBadInput(t *testing.T) {
	needSwarm(t)
	root := t.TempDir() // not writable by the coordinator's user
	missingSecret := filepath.Join(t.TempDir(), "secret.yaml")
	if err := os.WriteFile(missingSecret, []byte(`version: "3.8"
services:
  coordinator:
    secrets: [osgm_coordinator_password, osgm_no_such_secret]
secrets:
  osgm_no_such_secret:
    external: true
`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("missing secret", func(t *testing.T) {
		s := newStack(t, []string{missingSecret})
		if out, err := s.deploy(); err == nil || !strings.Contains(out, "secret not found: osgm_no_such_secret") {
			t.Fatalf("deploy: %v\n%s", err, out)
		}
	})
	for _, c := range []struct {
		name  string
		setup func(t *testing.T)
		env   []string
		want  string // in swarm.sh why, or the coordinator's log
	}{
		{name: "no coordinator node", setup: func(t *testing.T) {
			manager := managerNode(t)
			label(t, manager, "-rm", "osgm.coordinator")
			t.Cleanup(func() { label(t, manager, "-add", "osgm.coordinator=true") })
		}, want: "no suitable node"},
		{name: "image missing", env: []string{"OSGM_IMAGE=osgm:no-such-tag"}, want: "No such image"},
		{name: "DATA_DIR missing", env: []string{"DATA_DIR=/no/such/dir"}, want: "bind source path does not exist"},
		{name: "OUT_DIR unwritable", env: []string{"OUT_DIR=" + root}, want: "permission denied"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.setup != nil {
				c.setup(t)
			}
			s := newStack(t, nil, c.env...)
			s.mustDeploy()
			e2etest.CheckFor(t, 2*time.Minute, "the cause: "+c.want, func() bool {
				why, _ := swarmSh("why")
				return strings.Contains(why, c.want) || strings.Contains(s.logs("coordinator"), c.want)
			})
		})
	}
}

// TestSwarmNATSNodeCut: three NATS servers on three nodes
// (stack.cluster.yaml), each client on the server of its own host; the
// coordinator, told that h2 is its host, on h2's. h2, which also runs a
// worker, is cut off mid-run: the coordinator's link goes dead without
// closing, and what it sends until pings find that out is lost. It fails
// over to another server, JetStream keeps its quorum, and the model is
// the undisturbed run's (TestCoordinatorLinkCut in pkg/transport/cluster
// is the same fault in-process).
func TestSwarmNATSNodeCut(t *testing.T) {
	needSwarm(t)
	natsOnWorkerNodes(t)
	slow, flags := slowRun(t, 15000, "nats://nats:4222,nats://nats-2:4222,nats://nats-3:4222")
	away := filepath.Join(t.TempDir(), "away.yaml")
	yaml := "version: \"3.8\"\nservices:\n  coordinator:\n    environment:\n      NATS_NEAR: h2\n"
	if err := os.WriteFile(away, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	s := deploy(t, []string{"../../deploy/stack.cluster.yaml", slow, away}, "WORKERS=3")
	s.waitCheckpoint()
	s.wantNear("worker", "h1", "nats-2@h1")
	s.wantNear("worker", "h2", "nats-3@h2")
	s.wantNear("coordinator", managerNode(t), "nats-3@h2")
	s.cut("h2")
	e2etest.CheckFor(t, time.Minute, "the coordinator to fail over", func() bool {
		return strings.Contains(s.logs("coordinator"), `"msg":"reconnected to NATS"`)
	})
	s.step("the coordinator reconnected")
	s.wantLocalModel(flags, "with a NATS server's node cut off,")
}
