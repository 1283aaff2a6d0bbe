package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// composeCommands reads the command of every service in compose.yaml, with
// ${VAR:-default} and ${VAR:?message} expanded from env.
func composeCommands(t *testing.T, env map[string]string) map[string][]string {
	f, err := os.Open("../deploy/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	vars := regexp.MustCompile(`\$\{(\w+)(:[-?])?([^}]*)\}`)
	expand := func(s string) string {
		return vars.ReplaceAllStringFunc(s, func(m string) string {
			p := vars.FindStringSubmatch(m)
			if v, ok := env[p[1]]; ok {
				return v
			}
			if p[2] == ":?" {
				t.Fatalf("compose.yaml needs %s: %s", p[1], p[3])
			}
			return p[3]
		})
	}
	out := map[string][]string{}
	service := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ") && strings.HasSuffix(line, ":") {
			service = strings.TrimSuffix(strings.TrimSpace(line), ":")
		}
		trimmed := strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(trimmed, "command:"); ok {
			var argv []string
			if err := json.Unmarshal([]byte(expand(strings.TrimSpace(rest))), &argv); err != nil {
				t.Fatalf("service %s: command is not a JSON-style list: %v", service, err)
			}
			out[service] = argv
		}
	}
	for _, s := range []string{"nats", "worker", "coordinator"} {
		if out[s] == nil {
			t.Fatalf("compose.yaml has no command for %s", s)
		}
	}
	return out
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
	cmds := composeCommands(t, env)

	port, monitor := freePort(t), freePort(t)
	conf := string(readFile(t, "../deploy/nats.conf"))
	conf = strings.Replace(conf, "port: 4222", fmt.Sprintf("port: %d", port), 1)
	conf = strings.Replace(conf, "127.0.0.1:8222", fmt.Sprintf("127.0.0.1:%d", monitor), 1)
	conf = strings.Replace(conf, "store_dir: /data", "store_dir: "+t.TempDir(), 1)
	confPath := filepath.Join(t.TempDir(), "nats.conf")
	os.WriteFile(confPath, []byte(conf), 0o600)
	mapArgs := func(argv []string) []string {
		out := make([]string, len(argv))
		for i, a := range argv {
			a = strings.ReplaceAll(a, "nats://nats:4222", fmt.Sprintf("nats://127.0.0.1:%d", port))
			a = strings.Replace(a, "/etc/nats/nats.conf", confPath, 1)
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
	run := func(service string, password string) *proc {
		argv := mapArgs(cmds[service])
		name := argv[0]
		if service == "nats" {
			name = "nats-server" // the image's entrypoint
		} else {
			argv = argv[1:]
		}
		cmd := exec.Command(filepath.Join(bin, name), argv...)
		cmd.Env = []string{"COORDINATOR_PASSWORD=c-secret", "WORKER_PASSWORD=w-secret", "NATS_PASSWORD=" + password}
		return launch(t, cmd, service)
	}
	run("nats", "")
	checkFor(t, 10*time.Second, "nats-server", func() bool { return dial(port) })
	good := []*proc{run("worker", "w-secret"), run("worker", "w-secret")}
	intruder := run("worker", "wrong")
	c := run("coordinator", "c-secret")
	c.wait(t, 2*time.Minute)
	model := filepath.Join(outDir, filepath.Base(data)+".model")
	want := train(t, data, "-local", "-e", "0.01")
	if got := readFile(t, model); !bytes.Equal(got, want) {
		t.Fatal("the compose cluster's model differs from the in-process one")
	}
	// A worker with the wrong password never joins.
	checkFor(t, 10*time.Second, "the intruder to be refused", func() bool {
		return strings.Contains(intruder.output(), "uthorization")
	})
	if n := strings.Count(c.output(), `"msg":"worker joined"`); n != 2 {
		t.Fatalf("%d workers joined; the one with the wrong password must not", n)
	}
	for _, w := range good {
		if out := w.output(); strings.Contains(out, "ermissions") {
			t.Fatalf("a worker was refused a subject it needs:\n%s", tail(out, 2000))
		}
	}
	// A worker may publish what workers publish, and nothing else.
	violations := make(chan error, 4)
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port), nats.UserInfo("worker", "w-secret"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish("osgm.hb", []byte("x")); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	select {
	case err := <-violations:
		t.Fatalf("publishing a heartbeat was refused: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	for _, subject := range []string{"osgm.j.0000000000000001.down", "osgm.hello"} {
		nc.Publish(subject, []byte("forged"))
		nc.Flush()
		select {
		case err := <-violations:
			if !strings.Contains(err.Error(), "ermissions") {
				t.Fatalf("unexpected error: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("a worker could publish on %s: the permissions are too wide", subject)
		}
	}
}
