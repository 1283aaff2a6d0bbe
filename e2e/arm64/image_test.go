package arm64

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/osgm-svm/osgm/internal/e2etest"
)

// TestArm64Image: scripts/images.sh -arm64 builds an arm64 osgm image on
// this host, and the coordinator in it (run under qemu, the host not
// running arm64 containers) writes the amd64 model's bytes.
func TestArm64Image(t *testing.T) {
	e2etest.NeedDocker(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("builds arm64 on an amd64 host")
	}
	const image = "osgm:e2e-arm64"
	build := exec.Command("bash", "../../scripts/images.sh", "-arm64")
	build.Env = append(os.Environ(), "OSGM_IMAGE="+image)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("images.sh -arm64: %v\n%s", err, out)
	}
	if arch := e2etest.Docker(t, "image", "inspect", "-f", "{{.Architecture}}", image); arch != "arm64" {
		t.Fatalf("the image is for %s", arch)
	}
	qemu, err := exec.LookPath("qemu-aarch64-static")
	if err != nil {
		t.Skip("no qemu-aarch64-static: the image's coordinator is not run")
	}
	id := e2etest.Docker(t, "create", "--platform", "linux/arm64", image, "coordinator")
	t.Cleanup(func() { exec.Command("docker", "rm", id).Run() })
	coord := filepath.Join(t.TempDir(), "coordinator")
	e2etest.Docker(t, "cp", id+":/usr/local/bin/coordinator", coord)
	data := e2etest.Dataset(t, "dna.scale")
	want := e2etest.Train(t, data, "-local")
	model := filepath.Join(t.TempDir(), "model")
	p := e2etest.Launch(t, exec.Command(qemu, coord, "-local", data, model), "the arm64 image's coordinator")
	p.Wait(t, 10*time.Minute)
	if !bytes.Equal(e2etest.ReadFile(t, model), want) {
		t.Fatal("the arm64 image's coordinator writes another model")
	}
}
