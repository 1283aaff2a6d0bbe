package k8s

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/osgm-svm/osgm/internal/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m, "../..", e2etest.BuildImages, makeCluster) }

const chart = "../../deploy/helm/osgm"

// helm is the path of Helm's command: $OSGM_HELM, scripts/helm.sh's
// cache, or the PATH's. Without one the chart's tests skip, unless
// OSGM_K8S_TESTS=require (CI) makes that a failure.
func helm(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("OSGM_HELM"), "/var/cache/osgm/helm-v4.3.2/helm"} {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	if os.Getenv("OSGM_K8S_TESTS") == "require" {
		t.Fatal("no helm: scripts/helm.sh builds it")
	}
	t.Skip("no helm (scripts/helm.sh builds it)")
	return ""
}

// valid is the least a user sets: where the file is and the model goes.
var valid = []string{"data.claim=train", "model.claim=out"}

// render runs helm template with the values set and returns the
// objects, or helm's output as the error.
func render(t *testing.T, set ...string) ([]object, string, error) {
	t.Helper()
	args := []string{"template", "run", chart}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := exec.Command(helm(t), args...).CombinedOutput()
	if err != nil {
		return nil, string(out), err
	}
	var objs []object
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var o object
		if err := dec.Decode(&o); err != nil {
			break
		}
		if o.Kind != "" {
			objs = append(objs, o)
		}
	}
	return objs, string(out), nil
}

// object is what these tests read of a rendered manifest.
type object struct {
	Kind     string
	Metadata struct{ Name string }
	Data     map[string]string
	Spec     struct {
		Replicas       *int
		BackoffLimit   *int `yaml:"backoffLimit"`
		MaxUnavailable *int `yaml:"maxUnavailable"`
		Template       struct {
			Spec podSpec
		}
	}
}

type podSpec struct {
	RestartPolicy string `yaml:"restartPolicy"`
	Tolerations   []struct {
		Key               string
		TolerationSeconds int `yaml:"tolerationSeconds"`
	}
	TopologySpreadConstraints []struct {
		TopologyKey string `yaml:"topologyKey"`
	} `yaml:"topologySpreadConstraints"`
	Containers []container
	Volumes    []struct {
		Name   string
		Secret *struct {
			SecretName string `yaml:"secretName"`
		}
	}
}

type container struct {
	Name    string
	Image   string
	Command []string
	Env     []struct {
		Name      string
		Value     string
		ValueFrom map[string]any `yaml:"valueFrom"`
	}
	SecurityContext struct {
		RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
	} `yaml:"securityContext"`
	Resources struct {
		Requests map[string]string
	}
	ReadinessProbe map[string]any `yaml:"readinessProbe"`
	LivenessProbe  map[string]any `yaml:"livenessProbe"`
}

func find(objs []object, kind, name string) *object {
	i := slices.IndexFunc(objs, func(o object) bool { return o.Kind == kind && o.Metadata.Name == name })
	if i < 0 {
		return nil
	}
	return &objs[i]
}

func TestChartLints(t *testing.T) {
	for _, set := range [][]string{
		valid,
		append(slices.Clone(valid), "nats.replicas=3", "nats.tls.secret=tls"),
	} {
		args := []string{"lint", "--strict", chart}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		if out, err := exec.Command(helm(t), args...).CombinedOutput(); err != nil {
			t.Errorf("helm lint %v: %v\n%s", set, err, out)
		}
	}
}

// TestChartPods checks what every pod of every layout promises: non-root,
// a read-only root, no privilege gained, requests, probes, secrets only
// as files, and a lost node's pods moved after nodeLostSeconds.
func TestChartPods(t *testing.T) {
	layouts := map[string][]string{
		"one server":    valid,
		"three servers": append(slices.Clone(valid), "nats.replicas=3", "nats.tls.secret=tls", "workers.replicas=5"),
		"s3":            {"data.url=s3://b/k", "s3.credentials=aws", "model.url=s3://b/m"},
	}
	for name, set := range layouts {
		objs, out, err := render(t, set...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		pods := 0
		for _, o := range objs {
			if o.Kind != "Deployment" && o.Kind != "StatefulSet" && o.Kind != "Job" {
				continue
			}
			pods++
			spec := o.Spec.Template.Spec
			if len(spec.Tolerations) != 2 || spec.Tolerations[0].TolerationSeconds != 10 {
				t.Errorf("%s: %s %s: tolerations %+v, want not-ready and unreachable for 10 s", name, o.Kind, o.Metadata.Name, spec.Tolerations)
			}
			for _, c := range spec.Containers {
				checkContainer(t, name+": "+o.Metadata.Name, c)
			}
		}
		if pods != 3 {
			t.Errorf("%s: %d workloads, want the coordinator's Job, the workers' Deployment and NATS's StatefulSet", name, pods)
		}
	}
}

func checkContainer(t *testing.T, where string, c container) {
	t.Helper()
	s := c.SecurityContext
	if s.RunAsNonRoot == nil || !*s.RunAsNonRoot || s.ReadOnlyRootFilesystem == nil || !*s.ReadOnlyRootFilesystem ||
		s.AllowPrivilegeEscalation == nil || *s.AllowPrivilegeEscalation {
		t.Errorf("%s: security context: non-root %v, read-only root %v, escalation %v", where,
			deref(s.RunAsNonRoot), deref(s.ReadOnlyRootFilesystem), deref(s.AllowPrivilegeEscalation))
	}
	if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" {
		t.Errorf("%s: requests %v", where, c.Resources.Requests)
	}
	if c.ReadinessProbe == nil || c.LivenessProbe == nil {
		t.Errorf("%s: a probe missing", where)
	}
	for _, e := range c.Env {
		if strings.Contains(strings.ToUpper(e.Name), "PASSWORD") && !strings.HasSuffix(e.Name, "_FILE") || e.ValueFrom["secretKeyRef"] != nil {
			t.Errorf("%s: a secret in the environment (%s)", where, e.Name)
		}
	}
}

// TestChartWorkload checks what each part is, and that the values reach
// it: the workers' count, the cluster's URLs, the data's way in.
func TestChartWorkload(t *testing.T) {
	objs, out, err := render(t, append(slices.Clone(valid), "nats.replicas=3", "nats.tls.secret=tls", "workers.replicas=4")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	job, workers, nats := find(objs, "Job", "run-coordinator"), find(objs, "Deployment", "run-worker"), find(objs, "StatefulSet", "run-nats")
	if job == nil || workers == nil || nats == nil || find(objs, "PodDisruptionBudget", "run-worker") == nil ||
		find(objs, "NetworkPolicy", "run-nats") == nil || find(objs, "Service", "run-status") == nil {
		t.Fatalf("a part is missing:\n%s", out)
	}
	if job.Spec.Template.Spec.RestartPolicy != "OnFailure" || job.Spec.BackoffLimit == nil || *job.Spec.BackoffLimit != 6 {
		t.Errorf("the coordinator's Job: restart %q, backoff %v", job.Spec.Template.Spec.RestartPolicy, job.Spec.BackoffLimit)
	}
	if *workers.Spec.Replicas != 4 || len(workers.Spec.Template.Spec.TopologySpreadConstraints) == 0 {
		t.Errorf("workers: %d replicas, spread %v", *workers.Spec.Replicas, workers.Spec.Template.Spec.TopologySpreadConstraints)
	}
	if *nats.Spec.Replicas != 3 {
		t.Errorf("NATS: %d replicas", *nats.Spec.Replicas)
	}
	urls := "tls://run-nats-0.run-nats-headless:4222,tls://run-nats-1.run-nats-headless:4222,tls://run-nats-2.run-nats-headless:4222"
	coordinator := strings.Join(job.Spec.Template.Spec.Containers[0].Command, " ")
	for _, want := range []string{"-nats " + urls, "-objstore", "-min-workers $(MIN_WORKERS)", "-resume=auto", "-e 0.01 /data/train.svm /out/train.svm.model"} {
		if !strings.Contains(coordinator, want) {
			t.Errorf("the coordinator's command lacks %q: %s", want, coordinator)
		}
	}
	// The count the coordinator waits for is not in the Job, whose pod
	// template cannot change on `helm upgrade`.
	if cm := find(objs, "ConfigMap", "run-coordinator"); cm == nil || cm.Data["min-workers"] != "4" {
		t.Errorf("the coordinator's ConfigMap: %v, want min-workers 4", cm)
	}
	if w := strings.Join(workers.Spec.Template.Spec.Containers[0].Command, " "); !strings.Contains(w, "-nats "+urls) {
		t.Errorf("the workers' command: %s", w)
	}
	// From s3://, the workers read by range: no -objstore, and both
	// sides get the credentials' file.
	objs, out, err = render(t, "data.url=s3://b/k", "s3.credentials=aws", "model.claim=out")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	job = find(objs, "Job", "run-coordinator")
	if c := strings.Join(job.Spec.Template.Spec.Containers[0].Command, " "); strings.Contains(c, "-objstore") || !strings.Contains(c, " s3://b/k ") {
		t.Errorf("from s3: %s", c)
	}
	for _, o := range []*object{job, find(objs, "Deployment", "run-worker")} {
		if !slices.ContainsFunc(o.Spec.Template.Spec.Volumes, func(v struct {
			Name   string
			Secret *struct {
				SecretName string `yaml:"secretName"`
			}
		}) bool {
			return v.Secret != nil && v.Secret.SecretName == "aws"
		}) {
			t.Errorf("%s: no credentials' volume", o.Metadata.Name)
		}
	}
}

// TestChartModelToS3: a model put to s3:// needs no claim, and the
// credentials go to the coordinator alone when the data is in a claim.
func TestChartModelToS3(t *testing.T) {
	objs, out, err := render(t, "data.claim=train", "model.url=s3://b/models/m", "s3.credentials=aws", "s3.endpoint=http://s3:8333")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	job, workers := find(objs, "Job", "run-coordinator"), find(objs, "Deployment", "run-worker")
	c := job.Spec.Template.Spec.Containers[0]
	if cmd := strings.Join(c.Command, " "); !strings.HasSuffix(cmd, "/data/train.svm s3://b/models/m") || !strings.Contains(cmd, "-objstore") {
		t.Errorf("the coordinator's command: %s", cmd)
	}
	env := func(c container) (names []string) {
		for _, e := range c.Env {
			names = append(names, e.Name)
		}
		return names
	}
	if e := env(c); !slices.Contains(e, "AWS_SHARED_CREDENTIALS_FILE") || !slices.Contains(e, "AWS_ENDPOINT_URL") {
		t.Errorf("the coordinator's environment: %v", e)
	}
	if e := env(workers.Spec.Template.Spec.Containers[0]); slices.Contains(e, "AWS_SHARED_CREDENTIALS_FILE") {
		t.Errorf("the workers got S3's credentials, which they do not use: %v", e)
	}
	if strings.Contains(out, "claimName: out") || strings.Contains(out, "mountPath: /out") {
		t.Errorf("a claim for the model put to S3:\n%s", out)
	}
}

// TestChartRefuses: values that contradict each other fail the install,
// saying what to change.
func TestChartRefuses(t *testing.T) {
	for _, c := range []struct {
		set  []string
		want string
	}{
		{append(slices.Clone(valid), "workers.replicas=0"), "workers.replicas is 0"},
		{append(slices.Clone(valid), "nats.replicas=3"), "nats.tls.secret is empty"},
		{append(slices.Clone(valid), "nats.replicas=2"), "nats.replicas is 2"},
		{[]string{"model.claim=out"}, "no training file"},
		{append(slices.Clone(valid), "data.url=s3://b/k"), "both set"},
		{[]string{"data.url=http://x/y", "model.claim=out"}, "only s3://"},
		{[]string{"data.claim=train"}, "no place for the model"},
		{append(slices.Clone(valid), "model.url=s3://b/m"), "model.claim and model.url both set"},
		{[]string{"data.claim=train", "model.url=/out/m"}, "only s3://"},
		{append(slices.Clone(valid), "coordinator.minWorkers=3"), "would wait for ever"},
		{append(slices.Clone(valid), "secrets.passwords="), "secrets.passwords is empty"},
	} {
		_, out, err := render(t, c.set...)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("%v: %v, want an error saying %q:\n%s", c.set, err, c.want, e2etest.Tail(out, 500))
		}
	}
}

// TestChartConfigIsDeploys: the chart's NATS configuration is
// deploy/'s, as compose and swarm run it, byte for byte.
func TestChartConfigIsDeploys(t *testing.T) {
	for _, f := range []string{"nats.conf", "nats-cluster.conf"} {
		a, b := e2etest.ReadFile(t, filepath.Join("../../deploy", f)), e2etest.ReadFile(t, filepath.Join(chart, "files", f))
		if !bytes.Equal(a, b) {
			t.Errorf("%s/files/%s differs from deploy/%s: copy it", chart, f, f)
		}
	}
}

// TestChartNATSStarts runs the NATS pod's start.sh, as rendered for
// three servers with TLS, on this host (its paths moved to a folder):
// nats-server reads the configuration, the passwords and the
// certificates it is given, and finds nothing wrong (-t).
func TestChartNATSStarts(t *testing.T) {
	objs, out, err := render(t, append(slices.Clone(valid), "nats.replicas=3", "nats.tls.secret=tls")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	cm := find(objs, "ConfigMap", "run-nats")
	if cm == nil {
		t.Fatal("no ConfigMap run-nats")
	}
	dir := t.TempDir()
	certs := filepath.Join(dir, "tls")
	if out, err := exec.Command("../../scripts/certs.sh", certs, "run-nats", "*.run-nats-headless").CombinedOutput(); err != nil {
		t.Fatalf("scripts/certs.sh: %v\n%s", err, out)
	}
	moved := strings.NewReplacer("/etc/nats/", dir+"/", "/etc/osgm/passwords", dir+"/passwords", "/etc/osgm/tls", certs)
	for name, text := range cm.Data {
		text = moved.Replace(text)
		if name == "start.sh" {
			text = strings.Replace(text, "exec nats-server -c", "exec nats-server -t -c", 1)
		}
		writeFile(t, filepath.Join(dir, name), text)
	}
	for _, p := range []string{"coordinator-password", "worker-password", "route-password"} {
		writeFile(t, filepath.Join(dir, "passwords", p), "pw-"+p)
	}
	cmd := exec.Command("/bin/sh", filepath.Join(dir, "start.sh"))
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(e2etest.Bin("nats-server"))+":"+os.Getenv("PATH"), "SERVER_NAME=run-nats-0")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "configuration file") {
		t.Fatalf("start.sh: %v\n%s", err, out)
	}
	// Without a password's file the server does not start, naming it.
	os.Remove(filepath.Join(dir, "passwords", "route-password"))
	if out, err := exec.Command("/bin/sh", filepath.Join(dir, "start.sh")).CombinedOutput(); err == nil || !strings.Contains(string(out), "route-password") {
		t.Fatalf("start.sh without the route password: %v\n%s", err, out)
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// deref is what b points to, "unset" for nil.
func deref(b *bool) any {
	if b == nil {
		return "unset"
	}
	return *b
}
