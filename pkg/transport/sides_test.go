package transport

import (
	"go/build"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSidesImportNeitherOther: the coordinator's side (cluster) and the
// worker's (worker) share only this package and the wire, and this
// package holds neither side: what one side's change can break in the
// other is then what the wire carries, which the transcripts and the
// cluster tests check. The imports are followed through every package
// of the module, not only the direct ones.
func TestSidesImportNeitherOther(t *testing.T) {
	const module = "github.com/osgm-svm/osgm/"
	const cluster, worker = module + "pkg/transport/cluster", module + "pkg/transport/worker"
	for _, c := range []struct {
		from   string
		not    []string
		direct []string // what it must import directly
	}{
		{module + "pkg/transport", []string{cluster, worker}, nil},
		{cluster, []string{worker}, []string{module + "pkg/transport", module + "pkg/transport/wire"}},
		{worker, []string{cluster}, []string{module + "pkg/transport", module + "pkg/transport/wire"}},
	} {
		direct, all := imports(t, c.from, module)
		for _, p := range c.not {
			if all[p] {
				t.Errorf("%s imports %s", strings.TrimPrefix(c.from, module), strings.TrimPrefix(p, module))
			}
		}
		for _, p := range c.direct {
			if !slices.Contains(direct, p) {
				t.Errorf("%s does not import %s: the check above would pass on a package that moved", strings.TrimPrefix(c.from, module), p)
			}
		}
	}
}

// imports lists path's own imports, and every package of the module it
// reaches through them (tests left out).
func imports(t *testing.T, path, module string) (direct []string, all map[string]bool) {
	t.Helper()
	all = map[string]bool{}
	queue := []string{path}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		// By folder, from this one: the go command is not asked.
		pkg, err := build.ImportDir(filepath.Join("..", "..", strings.TrimPrefix(p, module)), 0)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if p == path {
			direct = pkg.Imports
		}
		for _, q := range pkg.Imports {
			if strings.HasPrefix(q, module) && !all[q] {
				all[q] = true
				queue = append(queue, q)
			}
		}
	}
	return direct, all
}
