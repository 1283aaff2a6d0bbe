package swarm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/osgm-svm/osgm/internal/e2etest"
)

// TestSwarmRandomFaults runs one job on the stack of three NATS servers
// (stack.cluster.yaml, a server on the manager, h1 and h2, workers on
// h1-h3) through a random sequence of faults across hosts, each once the
// run has written a checkpoint since the last, and expects coordinator
// -local's model bytes. OSGM_FAULT_SEED gives a sequence again (the seed
// is logged), OSGM_FAULTS their number: by default every kind once, as
// in CI (the run must outlast the faults, so each costs minutes);
// scripts/faults.sh runs several seeds of 8.
func TestSwarmRandomFaults(t *testing.T) {
	needSwarm(t)
	natsOnWorkerNodes(t)
	seed, n := uint64(time.Now().UnixNano()), len(faults)
	if v := os.Getenv("OSGM_FAULT_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	if v, err := strconv.Atoi(os.Getenv("OSGM_FAULTS")); err == nil && v > n {
		n = v
	}
	t.Logf("seed %d: OSGM_FAULT_SEED=%d gives this sequence again", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	// Its iterations logged (debug), to see it go on between faults.
	// Rounds take 5-7 ms here, and a fault 25-70 s (a rolling update the
	// most): 12,000 rounds a fault outlast the worst sequence.
	slow, flags := slowRunWith(t, 12000*n, []string{"nats://nats:4222,nats://nats-2:4222,nats://nats-3:4222"},
		"    environment:\n      OSGM_LOG_LEVEL: debug\n")
	s := deploy(t, []string{"../../deploy/stack.cluster.yaml", slow}, "WORKERS=3")
	s.waitCheckpoint()
	// Every kind once, the rest drawn, in a random order.
	seq := slices.Clone(faults)
	for len(seq) < n {
		seq = append(seq, faults[rng.IntN(len(faults))])
	}
	rng.Shuffle(len(seq), func(i, j int) { seq[i], seq[j] = seq[j], seq[i] })
	for i, f := range seq {
		if s.finished() {
			t.Fatalf("the run ended after %d of %d faults: give it more iterations", i, n)
		}
		s.step(fmt.Sprintf("fault %d of %d: %s", i+1, n, f.name))
		f.do(s, rng)
		s.waitProgress()
	}
	s.step(fmt.Sprintf("the faults done, %d iterations logged", s.count("iteration")))
	// The rounds' time grows with the faults: a restarted coordinator
	// goes back to its last checkpoint, moved shards load again.
	got := s.waitModel(15 * time.Minute)
	s.step("model written")
	if !bytes.Equal(got, localModel(t, flags)) {
		t.Fatalf("through %d random faults (seed %d), the model differs from the local coordinator's", n, seed)
	}
}

// A fault is done to the stack and recovered from before the next.
type fault struct {
	name string
	do   func(s *stack, rng *rand.Rand)
}

var faults = []fault{
	{"a worker's node cut off, then healed", func(s *stack, rng *rand.Rand) {
		node := pick(rng, s.running("worker"))
		lost := s.count("worker lost")
		s.cutFor(node, func() bool { return s.count("worker lost") > lost || s.finished() })
	}},
	{"a worker's task killed", func(s *stack, rng *rand.Rand) {
		node := pick(rng, s.running("worker"))
		joined := s.count("worker joined")
		s.kill("worker", node)
		e2etest.CheckFor(s.t, 2*time.Minute, "the killed worker's task to start again and join", func() bool {
			return s.count("worker joined") > joined || s.finished()
		})
	}},
	{"the coordinator's task killed", func(s *stack, _ *rand.Rand) {
		resumed := s.count("resuming")
		s.kill("coordinator", managerNode(s.t))
		e2etest.CheckFor(s.t, 2*time.Minute, "the coordinator to resume", func() bool {
			return s.count("resuming") > resumed || s.finished()
		})
	}},
	{"the node of one of three NATS servers cut off, then healed", func(s *stack, rng *rand.Rand) {
		node := pick(rng, []string{"h1", "h2"})
		lost := s.count("worker lost") // the worker on its node
		s.cutFor(node, func() bool { return s.count("worker lost") > lost || s.finished() })
	}},
	{"a rolling update of the workers", func(s *stack, _ *rand.Rand) {
		s.must("service", "update", "-d", "--force", s.name+"_worker")
		e2etest.CheckFor(s.t, 3*time.Minute, "the update to replace the workers", func() bool {
			state, _ := s.docker("service", "inspect", "-f", "{{.UpdateStatus.State}}", s.name+"_worker")
			return state == "completed"
		})
	}},
}

func pick(rng *rand.Rand, nodes []string) string {
	if len(nodes) == 0 {
		return "h3"
	}
	slices.Sort(nodes)
	return nodes[rng.IntN(len(nodes))]
}

// cutFor cuts node off the network until felt says the run noticed,
// then heals it and waits for the manager to see it ready.
func (s *stack) cutFor(node string, felt func() bool) {
	t := s.t
	if out, err := swarmSh("cut", node); err != nil {
		t.Fatalf("swarm.sh cut %s: %v\n%s", node, err, out)
	}
	e2etest.CheckFor(t, 2*time.Minute, "the run to notice "+node+" cut off", felt)
	if out, err := swarmSh("heal", node); err != nil {
		t.Fatalf("swarm.sh heal %s: %v\n%s", node, err, out)
	}
	e2etest.CheckFor(t, 2*time.Minute, node+" ready again", func() bool {
		return e2etest.Docker(t, "node", "inspect", "-f", "{{.Status.State}}", nodeID(t, node)) == "ready"
	})
	s.step(node + " healed")
}

// kill kills the service's running container on node (SIGKILL, as the
// OOM killer does).
func (s *stack) kill(service, node string) {
	on := s.on(node)
	ids, err := on.docker("ps", "-q", "-f", "label=com.docker.swarm.service.name="+s.name+"_"+service)
	if err != nil || ids == "" {
		s.t.Fatalf("no %s container on %s: %v", service, node, err)
	}
	on.docker("kill", strings.Fields(ids)[0])
}

// waitProgress waits for the coordinator to make 100 iterations after
// now, past a checkpoint (every 20 passes): the run went on since the
// last fault, and the next starts from a new state.
func (s *stack) waitProgress() {
	s.t.Helper()
	done := s.count("iteration")
	e2etest.CheckFor(s.t, 3*time.Minute, "the run to go on after the fault", func() bool {
		return s.count("iteration") >= done+100 || s.finished()
	})
}

// finished reports whether the coordinator's task has completed.
func (s *stack) finished() bool {
	ts := s.tasks("coordinator")
	return len(ts) > 0 && strings.HasPrefix(ts[0].current, "Complete")
}
