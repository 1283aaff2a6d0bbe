// Package containers runs the compose stack on a real Docker engine:
// deploy/compose.yaml (and the files layered over it) started with images
// built offline by scripts/images.sh, faults made with docker itself, and
// every training ending in the bytes of an undisturbed run. It is a
// package of its own, apart from e2e's processes, so that each has Go's
// test timeout to itself and the two run side by side.
//
// Docker's engine is shared by the whole machine, so these tests do not
// run in parallel with each other; each stack has its own project name,
// network and volumes, and is taken down (volumes too) when its test ends.
package containers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/osgm-svm/osgm/internal/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m, "../..", e2etest.BuildImages) }

// stack is one compose project.
type stack struct {
	t       *testing.T
	project string
	files   []string
	env     []string
	out     string // OUT_DIR
	port    int    // NATS's client port, published on the host's loopback
	train   string // TRAIN_FILE
}

var stacks int

// newStack prepares a compose project over the shared data set name,
// layering files (relative to deploy/, or absolute) in order; extra are
// VAR=value settings that replace the defaults.
func newStack(t *testing.T, name string, files []string, extra ...string) *stack {
	t.Helper()
	e2etest.NeedDocker(t)
	dataDir := e2etest.SharedData()
	if _, err := os.Stat(filepath.Join(dataDir, name+".bz2")); err != nil {
		t.Skipf("../shared/data/%s.bz2 is not here", name)
	}
	osgmImage, natsImage := e2etest.Images(t)
	stacks++
	s := &stack{t: t, project: fmt.Sprintf("osgme2e%d%d", os.Getpid(), stacks), out: t.TempDir(),
		port: e2etest.FreePort(t), train: name + ".bz2"}
	for _, f := range files {
		if !filepath.IsAbs(f) {
			f = filepath.Join("../../deploy", f)
		}
		s.files = append(s.files, f)
	}
	// The coordinator runs as the image's non-root user, as deployed; the
	// output directory is made theirs as an operator would.
	if os.Getuid() == 0 {
		if err := os.Chown(s.out, 65532, 65532); err != nil {
			t.Fatal(err)
		}
	} else {
		extra = append([]string{fmt.Sprintf("OSGM_USER=%d:%d", os.Getuid(), os.Getgid())}, extra...)
	}
	if slices.ContainsFunc(files, func(f string) bool { return strings.HasSuffix(f, "compose.cluster.yaml") }) &&
		!slices.ContainsFunc(extra, func(e string) bool { return strings.HasPrefix(e, "CERTS_DIR=") }) {
		extra = append(extra, "CERTS_DIR="+certsDir(t)) // the routes' TLS
	}
	s.env = append([]string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"COORDINATOR_PASSWORD=c-secret", "WORKER_PASSWORD=w-secret", "ROUTE_PASSWORD=r-secret",
		"OSGM_IMAGE=" + osgmImage, "NATS_IMAGE=" + natsImage,
		"DATA_DIR=" + dataDir, "OUT_DIR=" + s.out, "TRAIN_FILE=" + s.train,
		fmt.Sprintf("NATS_PUBLISH=127.0.0.1:%d", s.port),
		fmt.Sprintf("OSGM_HTTP=%d", e2etest.FreePort(t)),
	}, extra...)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := s.compose("logs", "--no-color", "--tail", "60")
			t.Logf("compose logs:\n%s", e2etest.Tail(logs, 12000))
		}
		s.compose("down", "-v", "--remove-orphans", "-t", "2")
	})
	return s
}

// certsDir is a folder of scripts/certs.sh's certificates, for the
// servers' names in the compose files.
func certsDir(t *testing.T) string {
	certs := t.TempDir()
	if out, err := exec.Command("../../scripts/certs.sh", certs).CombinedOutput(); err != nil {
		t.Fatalf("certs.sh: %v\n%s", err, out)
	}
	return certs
}

// compose runs docker compose on the stack and returns its output.
func (s *stack) compose(args ...string) (string, error) {
	argv := e2etest.ComposeCommand()
	all := append(argv[1:len(argv):len(argv)], "-p", s.project)
	for _, f := range s.files {
		all = append(all, "-f", f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], append(all, args...)...)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (s *stack) mustCompose(args ...string) string {
	s.t.Helper()
	out, err := s.compose(args...)
	if err != nil {
		s.t.Fatalf("compose %v: %v\n%s", args, err, e2etest.Tail(out, 4000))
	}
	return out
}

// containers lists the ids of a service's containers, stopped ones too.
func (s *stack) containers(service string) []string {
	s.t.Helper()
	return strings.Fields(s.mustCompose("ps", "-a", "-q", service))
}

func (s *stack) container(service string) string {
	s.t.Helper()
	ids := s.containers(service)
	if len(ids) != 1 {
		s.t.Fatalf("%d containers of %s, want 1", len(ids), service)
	}
	return ids[0]
}

// state is a container's status, exit code and restart count.
func state(t *testing.T, id string) (status string, code, restarts int) {
	t.Helper()
	f := strings.Fields(e2etest.Docker(t, "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}} {{.RestartCount}}", id))
	code, _ = strconv.Atoi(f[1])
	restarts, _ = strconv.Atoi(f[2])
	return f[0], code, restarts
}

func logsOf(t *testing.T, id string) string {
	out, _ := exec.Command("docker", "logs", id).CombinedOutput()
	return string(out)
}

// crash kills a container's process from outside with SIGKILL, as the
// OOM killer or a crash would: unlike `docker kill`, which Docker counts
// as stopped by hand, this is what a restart policy restarts.
func crash(t *testing.T, id string) {
	t.Helper()
	// A container that is not running has pid 0, and kill(0) would be
	// this test's own process group: go test and every package's tests.
	f := strings.Fields(e2etest.Docker(t, "inspect", "-f", "{{.State.Status}} {{.State.Pid}}", id))
	pid, err := strconv.Atoi(f[1])
	if f[0] != "running" || err != nil || pid <= 1 {
		t.Fatalf("container %.12s is %s (pid %s): nothing to crash; did the run end first?", id, f[0], f[1])
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %d: %v", pid, err)
	}
}

// modelPath is the model file the coordinator writes on the host.
func (s *stack) modelPath() string { return filepath.Join(s.out, s.train+".model") }

// waitTrained waits for the coordinator to exit with status 0 and not be
// restarted, and returns the model's bytes.
func (s *stack) waitTrained(timeout time.Duration) []byte {
	s.t.Helper()
	id := s.container("coordinator")
	e2etest.CheckFor(s.t, timeout, "the coordinator to finish", func() bool {
		status, code, _ := state(s.t, id)
		if status == "exited" && code != 0 {
			s.t.Fatalf("the coordinator exited with %d:\n%s", code, e2etest.Tail(logsOf(s.t, id), 4000))
		}
		return status == "exited"
	})
	return e2etest.ReadFile(s.t, s.modelPath())
}

// slowRun replaces the coordinator's training flags with a run long
// enough to be hit mid-way (HDM for a fixed number of iterations,
// checkpoints every 20 passes), keeping everything else of its command;
// want is what the same flags give in one undisturbed local run. Its 16
// shards (a9a's default is 3) give each of the workers some to lose.
func slowRun(t *testing.T, urls string, iters int, extra ...string) (override string, flags []string) {
	flags = append([]string{"-method", "hdm", "-e", "1e-12", "-max-iter", strconv.Itoa(iters), "-shards", "16"}, extra...)
	cmd := append([]string{"-nats", urls, "-user", "coordinator", "-min-workers", "2", "-heartbeat-timeout", "2s",
		"-checkpoint-every", "20", "-checkpoint", "/out/${TRAIN_FILE}.ckpt", "-resume=auto"}, flags...)
	cmd = append(cmd, "/data/${TRAIN_FILE}", "/out/${TRAIN_FILE}.model")
	quote := func(args []string) string {
		q := make([]string, len(args))
		for i, a := range args {
			q[i] = strconv.Quote(a)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	yaml := fmt.Sprintf("services:\n  check:\n    command: %s\n  coordinator:\n    command: %s\n",
		quote(append([]string{"coordinator", "-check"}, cmd...)), quote(append([]string{"coordinator"}, cmd...)))
	override = filepath.Join(t.TempDir(), "slow.yaml")
	if err := os.WriteFile(override, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return override, flags
}

// localModel trains the shared set in this process's coordinator binary,
// the undisturbed reference.
func localModel(t *testing.T, name string, flags ...string) []byte {
	src := filepath.Join(e2etest.SharedData(), name+".bz2")
	return e2etest.Train(t, src, append([]string{"-q"}, flags...)...)
}

const oneServer = "nats://nats:4222"
const threeServers = "nats://nats:4222,nats://nats-2:4222,nats://nats-3:4222"

// waitCheckpoint waits until the coordinator has written a checkpoint:
// the run is under way, with state that a restart resumes from.
func (s *stack) waitCheckpoint() {
	s.t.Helper()
	e2etest.CheckFor(s.t, 2*time.Minute, "a checkpoint", func() bool {
		_, err := os.Stat(filepath.Join(s.out, s.train+".ckpt"))
		return err == nil
	})
}

// faultRun starts a slow run (slowRun) on the compose files (compose.yaml
// first) with workers worker containers, and returns once it has written
// a checkpoint: under way, with state a restart resumes from.
func faultRun(t *testing.T, urls string, iters, workers int, files []string, extra ...string) (*stack, []string) {
	slow, flags := slowRun(t, urls, iters, extra...)
	s := newStack(t, "a9a", append(files, slow))
	s.mustCompose("up", "-d", "--scale", fmt.Sprintf("worker=%d", workers))
	s.waitCheckpoint()
	return s, flags
}

// wantLocalModel waits for the coordinator to finish and checks that its
// model is the bytes of the local coordinator's, undisturbed, with the
// same training flags: where the work ran and what failed changed no bit.
func (s *stack) wantLocalModel(flags []string, after string) []byte {
	s.t.Helper()
	got := s.waitTrained(5 * time.Minute)
	if want := localModel(s.t, "a9a", flags...); !bytes.Equal(got, want) {
		s.t.Fatalf("%s the model differs from the local coordinator's", after)
	}
	return got
}

// TestContainerTraining is the README's cluster command with three worker
// containers: the model, written as the non-root user, is the bytes of
// the coordinator run locally with the same flags, and only NATS's client
// port reaches the host.
func TestContainerTraining(t *testing.T) {
	s := newStack(t, "a9a", []string{"compose.yaml"})
	s.mustCompose("up", "-d", "--scale", "worker=3")
	s.wantLocalModel([]string{"-e", "0.01"}, "with three worker containers")
	if os.Getuid() == 0 {
		info, _ := os.Stat(s.modelPath())
		if uid := fileOwner(info); uid != 65532 {
			t.Errorf("the model belongs to uid %d, not the image's non-root user", uid)
		}
	}
	if n := len(s.containers("worker")); n != 3 {
		t.Errorf("%d worker containers, want 3", n)
	}
	for _, service := range []string{"nats", "worker", "coordinator", "check", "worker-check"} {
		for _, id := range s.containers(service) {
			ports := e2etest.Docker(t, "inspect", "-f", "{{range $p, $b := .NetworkSettings.Ports}}{{if $b}}{{$p}} {{end}}{{end}}", id)
			want := ""
			if service == "nats" {
				want = "4222/tcp"
			}
			if strings.TrimSpace(ports) != want {
				t.Errorf("%s publishes %q on the host, want %q", service, ports, want)
			}
		}
	}
	// The status page, on the host's loopback only (an exited container
	// keeps its bindings in its host config).
	bound := e2etest.Docker(t, "inspect", "-f", `{{range $p, $b := .HostConfig.PortBindings}}{{$p}}{{range $b}} {{.HostIp}}{{end}}{{end}}`, s.container("coordinator"))
	if strings.TrimSpace(bound) != "8080/tcp 127.0.0.1" {
		t.Errorf("the coordinator binds %q on the host, want 8080/tcp on 127.0.0.1 only", bound)
	}
}

// TestContainerClusterTraining: three NATS servers, six workers, in the
// README's attached form: `up` naming the coordinator and the workers
// ends by itself once the model is written, with the coordinator's exit
// code, though the one-shot checks have exited before.
func TestContainerClusterTraining(t *testing.T) {
	s := newStack(t, "a9a", []string{"compose.yaml", "compose.cluster.yaml"})
	s.mustCompose("up", "--scale", "worker=6", "--exit-code-from", "coordinator", "coordinator", "worker")
	if status, code, _ := state(t, s.container("coordinator")); status != "exited" || code != 0 {
		t.Fatalf("up returned with the coordinator %s (exit code %d)", status, code)
	}
	s.wantLocalModel([]string{"-e", "0.01"}, "on three NATS servers")
}

// TestContainerWorkerFaults: a worker is cut off the network (its TCP
// connection hangs, not closes): its shards move after
// -heartbeat-timeout, and once the network is back it rejoins. Another
// crashes (its process killed from outside, as the OOM killer does) and
// comes back under its restart policy. A third is `docker kill`ed, which
// Docker treats as stopped by hand: its shards move and it stays down
// until `up` starts it again. The model is the undisturbed run's.
func TestContainerWorkerFaults(t *testing.T) {
	s, flags := faultRun(t, oneServer, 12000, 4, []string{"compose.yaml"})
	ws := s.containers("worker")
	coord := s.container("coordinator")
	lost := func(id string) func() bool {
		return func() bool { return logged(logsOf(t, coord), id, "worker lost") > 0 }
	}
	back := func(id string) func() bool {
		return func() bool { return joins(logsOf(t, coord), id) >= 2 }
	}

	network := s.project + "_default"
	e2etest.Docker(t, "network", "disconnect", network, ws[0])
	e2etest.CheckFor(t, time.Minute, "the partitioned worker's shards to move", lost(ws[0]))
	e2etest.Docker(t, "network", "connect", network, ws[0])
	e2etest.CheckFor(t, time.Minute, "the partitioned worker to rejoin", back(ws[0]))

	crash(t, ws[1])
	e2etest.CheckFor(t, time.Minute, "the crashed worker to rejoin", back(ws[1]))
	if status, _, restarts := state(t, ws[1]); status != "running" || restarts < 1 {
		t.Fatalf("the crashed worker is %s after %d restarts", status, restarts)
	}

	e2etest.Docker(t, "kill", ws[2])
	e2etest.CheckFor(t, time.Minute, "the killed worker's shards to move", lost(ws[2]))
	if status, _, _ := state(t, ws[2]); status != "exited" {
		t.Fatalf("a worker killed with docker kill is %s: Docker restarted what was stopped by hand", status)
	}
	s.mustCompose("up", "-d", "--no-recreate", "--scale", "worker=4")
	e2etest.CheckFor(t, time.Minute, "the killed worker to rejoin once started", back(ws[2]))

	s.wantLocalModel(flags, "after the worker faults")
}

// joins counts the coordinator's lines for a container's worker joining,
// or coming back after it was lost (a partition healed): a worker's id
// starts with its host name, the container's short id.
func joins(logs, id string) int {
	return logged(logs, id, "worker joined") + logged(logs, id, "worker back")
}

// logged counts the coordinator's lines with message msg about a
// container's worker.
func logged(logs, id, msg string) int {
	n := 0
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, `"msg":"`+msg+`"`) && strings.Contains(line, `"worker":"`+id[:12]) {
			n++
		}
	}
	return n
}

// fileOwner is the uid owning a file.
func fileOwner(info os.FileInfo) int {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// TestContainerNATSRestarted: the nats container restarts mid-run
// (JetStream on its volume); clients reconnect and the round goes out
// again.
func TestContainerNATSRestarted(t *testing.T) {
	// docker restart takes a second or more on a busy machine: the run
	// must outlast it by far (2,500 passes, about 4 s, once did not).
	s, flags := faultRun(t, oneServer, 8000, 2, []string{"compose.yaml"})
	e2etest.Docker(t, "restart", "-t", "1", s.container("nats"))
	s.wantLocalModel(flags, "after the NATS restart")
	if out := logsOf(t, s.container("coordinator")); !strings.Contains(out, "reconnected to NATS") {
		t.Errorf("the coordinator never lost NATS: the restart did not happen mid-run\n%s", e2etest.Tail(out, 2000))
	}
}

// TestContainerCoordinatorCrashed: the coordinator's process is killed
// mid-run; its restart policy brings it back, it resumes from the
// checkpoint in $OUT_DIR and writes the undisturbed run's model.
func TestContainerCoordinatorCrashed(t *testing.T) {
	// Long enough to be still running once compose has named the
	// container on a busy machine: 2,500 passes once were not.
	s, flags := faultRun(t, oneServer, 8000, 2, []string{"compose.yaml"})
	coord := s.container("coordinator")
	crash(t, coord)
	s.wantLocalModel(flags, "resumed,")
	if _, _, restarts := state(t, coord); restarts < 1 {
		t.Fatal("the coordinator was not restarted")
	}
	if out := logsOf(t, coord); !strings.Contains(out, `"resuming"`) {
		t.Fatalf("the restarted coordinator did not resume:\n%s", e2etest.Tail(out, 3000))
	}
}

// TestContainerClusterServerLost: three NATS servers, shards and the
// checkpoint copy in the replicated object stores (-objstore); one
// server's container is killed for good mid-run.
func TestContainerClusterServerLost(t *testing.T) {
	s, flags := faultRun(t, threeServers, 2000, 3, []string{"compose.yaml", "compose.cluster.yaml"}, "-objstore")
	e2etest.Docker(t, "kill", s.container("nats-2"))
	s.wantLocalModel(flags, "with a server lost")
}

// TestContainerScaled: the workers go from 2 to 6 during a training,
// then to 2 again.
func TestContainerScaled(t *testing.T) {
	// Six workers join and four leave within the run: 8,000 passes (about
	// 20 s on six) once ended before the scale-down reached a worker.
	s, flags := faultRun(t, oneServer, 20000, 2, []string{"compose.yaml"})
	coord := s.container("coordinator")
	s.mustCompose("up", "-d", "--no-recreate", "--scale", "worker=6")
	e2etest.CheckFor(t, time.Minute, "six workers to join", func() bool {
		return strings.Count(logsOf(t, coord), `"worker joined"`) >= 6
	})
	s.mustCompose("up", "-d", "--no-recreate", "--scale", "worker=2")
	s.wantLocalModel(flags, "scaled up and down,")
	if out := logsOf(t, coord); !strings.Contains(out, `"worker left"`) {
		t.Errorf("no worker left on the scale-down:\n%s", e2etest.Tail(out, 2000))
	}
}

// TestContainerSecurity: as deployed, a worker's credentials cannot read
// the checkpoint bucket or publish as the coordinator, and a worker with
// the wrong password ends with the server's reason and a non-zero exit.
func TestContainerSecurity(t *testing.T) {
	s := newStack(t, "heart_scale", []string{"compose.yaml"})
	s.mustCompose("up", "-d", "--scale", "worker=2")
	s.waitTrained(3 * time.Minute)
	url := fmt.Sprintf("nats://127.0.0.1:%d", s.port)

	nc, violations := e2etest.WorkerConn(t, url)
	e2etest.WantRefused(t, nc, violations, "osgm.w.x", "osgm.hello", "osgm.j.0000000000000001.down")
	// The coordinator's credentials put an object in the checkpoint
	// bucket, which the worker's then cannot read.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc, err := nats.Connect(url, nats.UserInfo("coordinator", "c-secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cjs, _ := jetstream.New(cc)
	store, err := cjs.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "osgm-checkpoints"})
	if err != nil {
		t.Fatalf("the coordinator cannot open its checkpoint bucket: %v", err)
	}
	if _, err := store.PutBytes(ctx, "secret.ckpt", []byte("state")); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if ws, err := js.ObjectStore(ctx, "osgm-checkpoints"); err == nil {
		if _, err := ws.GetBytes(ctx, "secret.ckpt"); err == nil {
			t.Fatal("a worker read the checkpoint bucket")
		}
	}

	out, err := s.compose("run", "--rm", "-e", "NATS_PASSWORD=wrong", "worker")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("a worker with the wrong password exited with %v:\n%s", err, out)
	}
	if !strings.Contains(out, "Authorization Violation") {
		t.Fatalf("the worker's exit does not give the server's reason:\n%s", e2etest.Tail(out, 2000))
	}
}

// TestContainerBadConfiguration: what no restart can fix ends `up` with
// one message from the checks, and the coordinator and workers never
// start, so nothing loops.
func TestContainerBadConfiguration(t *testing.T) {
	cases := []struct {
		name  string
		extra []string
		setup func(s *stack)
		want  string
	}{
		{name: "missing training file", extra: []string{"TRAIN_FILE=no-such-file"}, want: "/data/no-such-file"},
		{name: "output directory not writable", setup: func(s *stack) {
			// Root's, as a directory Docker made because it was missing.
			if os.Getuid() != 0 {
				s.t.Skip("needs root to give OUT_DIR to another user")
			}
			os.Chown(s.out, 0, 0)
			os.Chmod(s.out, 0o755)
		}, want: "cannot create a file in /out"},
		{name: "wrong worker password", setup: func(s *stack) {
			// The server knows the right password; the workers are
			// given another.
			s.files = append(s.files, workerPassword(s.t, "w-secret-typo"))
		}, want: "Authorization Violation"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStack(t, "heart_scale", []string{"compose.yaml"}, c.extra...)
			if c.setup != nil {
				c.setup(s)
			}
			out, err := s.compose("up", "-d", "--scale", "worker=2")
			if err == nil {
				t.Fatalf("up succeeded:\n%s", out)
			}
			logs := s.mustCompose("logs", "--no-color")
			if !strings.Contains(logs, c.want) {
				t.Fatalf("the logs do not say %q:\n%s\n%s", c.want, e2etest.Tail(out, 2000), e2etest.Tail(logs, 3000))
			}
			if ids := s.containers("coordinator"); len(ids) > 0 {
				if status, _, _ := state(t, ids[0]); status != "created" {
					t.Fatalf("the coordinator container is %s: it ran despite the failed check", status)
				}
			}
		})
	}
	t.Run("passwords unset", func(t *testing.T) {
		s := newStack(t, "heart_scale", []string{"compose.yaml"})
		var env []string
		for _, e := range s.env {
			if !strings.HasPrefix(e, "WORKER_PASSWORD=") {
				env = append(env, e)
			}
		}
		s.env = env
		out, err := s.compose("up", "-d")
		if err == nil || !strings.Contains(out, "set WORKER_PASSWORD") {
			t.Fatalf("up without WORKER_PASSWORD: %v\n%s", err, out)
		}
	})
}

// workerPassword is an override giving the workers (and their check) a
// password of their own.
func workerPassword(t *testing.T, pw string) string {
	yaml := fmt.Sprintf("services:\n  worker-check:\n    environment:\n      NATS_PASSWORD: %q\n  worker:\n    environment:\n      NATS_PASSWORD: %q\n", pw, pw)
	path := filepath.Join(t.TempDir(), "password.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
