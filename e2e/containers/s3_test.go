package containers

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/osgm-svm/osgm/internal/e2etest"
)

// weedImage is compose.s3.yaml's S3 server image: WEED_IMAGE, or the one
// scripts/images.sh builds where scripts/weed.sh built SeaweedFS. Absent,
// the test skips, unless OSGM_S3_TESTS=require (as in CI).
func weedImage(t *testing.T) string {
	t.Helper()
	img := os.Getenv("WEED_IMAGE")
	if img == "" {
		img = "osgm-weed:scratch"
	}
	if exec.Command("docker", "image", "inspect", img).Run() != nil {
		if os.Getenv("OSGM_S3_TESTS") == "require" {
			t.Fatalf("no image %s: scripts/images.sh builds it once scripts/weed.sh has built SeaweedFS", img)
		}
		t.Skipf("no image %s (scripts/weed.sh, then scripts/images.sh)", img)
	}
	return img
}

// TestContainerS3 is compose.s3.yaml with its profile: a SeaweedFS
// container takes the plain training file into its bucket, and two
// worker containers and the coordinator read it from s3://data/a9a by
// range, with no file shared. The model is the bytes of the local run on
// the shared file.
func TestContainerS3(t *testing.T) {
	e2etest.NeedDocker(t)
	img := weedImage(t)
	data := e2etest.Dataset(t, "a9a")
	s := newStack(t, "a9a", []string{"compose.yaml", "compose.s3.yaml"},
		"COMPOSE_PROFILES=s3", "WEED_IMAGE="+img, "DATA_DIR="+filepath.Dir(data), "TRAIN_FILE=a9a")
	s.train = "a9a"
	s.mustCompose("up", "-d", "--scale", "worker=2")
	s.wantLocalModel([]string{"-e", "0.01"}, "from s3://data/a9a")
	logs := logsOf(t, s.container("coordinator"))
	if !strings.Contains(logs, "s3://data/a9a") {
		t.Fatalf("the coordinator did not train from s3://data/a9a:\n%s", e2etest.Tail(logs, 3000))
	}
}
