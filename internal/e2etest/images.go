package e2etest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var images struct {
	once       sync.Once
	osgm, nats string
	err        error
}

// BuildImages is a Main setup: it builds the container images before the
// tests, where they will run, as Main builds the binaries. The first test
// to need them would otherwise spend minutes of the package's test
// timeout on it.
func BuildImages() {
	if !testing.Short() && exec.Command("docker", "info").Run() == nil {
		buildImagesOnce()
	}
}

// buildImagesOnce settles the images the stacks run: OSGM_IMAGE and
// NATS_IMAGE when set (built once for the whole CI run), otherwise built
// once per test binary by scripts/images.sh.
func buildImagesOnce() {
	images.once.Do(func() {
		images.osgm, images.nats = os.Getenv("OSGM_IMAGE"), os.Getenv("NATS_IMAGE")
		if images.osgm != "" && images.nats != "" {
			return
		}
		images.osgm, images.nats = "osgm:scratch", "osgm-nats:scratch"
		out, err := exec.Command(filepath.Join(root, "scripts/images.sh")).CombinedOutput()
		if err != nil {
			// The script's last words say what it lacked or where it failed.
			images.err = fmt.Errorf("scripts/images.sh (%v): %s", err, strings.TrimSpace(string(out)))
		}
	})
}

// ImageNames returns the images the stacks run, built if need be, or why
// they could not be.
func ImageNames() (osgmImage, natsImage string, err error) {
	buildImagesOnce()
	return images.osgm, images.nats, images.err
}

// Images returns the images the stacks run, or skips (fails where the
// container tests are required) when they could not be built.
func Images(t *testing.T) (osgmImage, natsImage string) {
	t.Helper()
	buildImagesOnce()
	if images.err != nil {
		if Required() {
			t.Fatal(images.err)
		}
		t.Skipf("the container images cannot be built here: %v", images.err)
	}
	return images.osgm, images.nats
}

// Required says the container tests must run, not skip: .ci/run sets
// OSGM_CONTAINER_TESTS=require where `docker info` succeeds, so that a
// skip cannot hide a broken engine.
func Required() bool { return os.Getenv("OSGM_CONTAINER_TESTS") == "require" }
