package e2e

import (
	"context"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// readmeCommands are the shell blocks under README.md's "The two
// commands": the main job's, then the tests'.
func readmeCommands(t *testing.T) (job, tests string) {
	t.Helper()
	readme := string(readFile(t, "../README.md"))
	_, section, ok := strings.Cut(readme, "\n## The two commands\n")
	if !ok {
		t.Fatal(`README.md has no "## The two commands" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)\n```").FindAllStringSubmatch(section, -1)
	if len(blocks) != 2 {
		t.Fatalf(`README.md's "The two commands" has %d sh blocks, want 2`, len(blocks))
	}
	return blocks[0][1], blocks[1][1]
}

// TestNewcomer runs the README's first command as a new user would, in a
// fresh clone of this repository, and wants the accuracy line LIBLINEAR's
// users look for, and a clone that git still calls clean.
func TestNewcomer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and trains in a fresh clone: run without -short")
	}
	job, _ := readmeCommands(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git here to clone with")
	}
	dir := t.TempDir()
	if out, err := exec.Command("git", "clone", "--quiet", "..", dir).CombinedOutput(); err != nil {
		t.Skipf("this checkout cannot be cloned (%v): %s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", job)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README's first command: %v\n%s", err, tail(string(out), 4000))
	}
	if !regexp.MustCompile(`(?m)^Accuracy = \d+(\.\d+)?% \(\d+/10000\)$`).Match(out) {
		t.Fatalf("README's first command printed no accuracy line:\n%s", tail(string(out), 4000))
	}
	status, err := exec.Command("git", "-C", dir, "status", "--porcelain").Output()
	if err != nil || len(status) > 0 {
		t.Errorf("the clone is not clean after the first command (%v): git status says\n%s", err, status)
	}
}

// TestCIRunsTheREADMEsTests: .ci/run runs the README's test command as
// written, so what passes in CI is what a user runs.
func TestCIRunsTheREADMEsTests(t *testing.T) {
	_, tests := readmeCommands(t)
	ci := string(readFile(t, "../.ci/run"))
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(tests) + `$`).MatchString(ci) {
		t.Errorf(".ci/run does not run the README's test command %q as a line of its own", tests)
	}
}
