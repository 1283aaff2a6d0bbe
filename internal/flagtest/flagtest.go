// Package flagtest runs a package's command-line options in tests: the
// registration, the parse and the package's own check, as a command would.
package flagtest

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// Parse registers options into a new flag set, parses args and checks
// them; it returns the first error.
func Parse(register func(*flag.FlagSet), check func(*flag.FlagSet) error, args []string) error {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	return check(fs)
}

// Accepted fails t when err is not what want says (an error containing
// want, or none for ""), and reports whether the options were accepted.
func Accepted(t testing.TB, err error, want string) bool {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatal(err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("error %v, want one saying %q", err, want)
	}
	return err == nil
}
