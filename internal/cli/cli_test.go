package cli

import (
	"errors"
	"flag"
	"io"
	"strconv"
	"strings"
	"testing"
)

// tri is a Choices flag, as -compact and -resume are.
type tri string

func (v *tri) String() string     { return string(*v) }
func (v *tri) Set(s string) error { *v = tri(s); return nil }
func (v *tri) IsBoolFlag() bool   { return true }
func (v *tri) Choices() []string  { return []string{"auto", "true", "false"} }

func TestPrintFlag(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Float64("e", 0.01, "tolerance (default 0.01; 0.001 for -s 11)")
	fs.Int("n", 3, "how many")
	v := tri("auto")
	fs.Var(&v, "compact", "store compactly")
	for _, c := range []struct{ name, want string }{
		{"e", "  -e float\n    \ttolerance (default 0.01; 0.001 for -s 11)\n"},
		{"n", "  -n int\n    \thow many (default 3)\n"},
		{"compact", "  -compact[=auto|true|false]\n    \tstore compactly (default auto)\n"},
	} {
		var b strings.Builder
		PrintFlag(&b, fs.Lookup(c.name))
		if b.String() != c.want {
			t.Errorf("-%s: %q, want %q", c.name, b.String(), c.want)
		}
	}
}

// TestParse: a mistake is returned for the caller to tell first, with
// nothing printed before it; -h alone prints the usage.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		args      []string
		err       string
		usageSeen bool
	}{
		{[]string{"-n", "2"}, "", false},
		{[]string{"-x"}, "flag provided but not defined: -x", false},
		{[]string{"-n", "two"}, `invalid value "two" for flag -n`, false},
		{[]string{"-h"}, flag.ErrHelp.Error(), true},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.Int("n", 1, "how many")
		seen := false
		err := Parse(fs, c.args, func(io.Writer) { seen = true })
		got := ""
		if err != nil {
			got = err.Error()
		}
		if !strings.HasPrefix(got, c.err) || (c.err == "") != (err == nil) || seen != c.usageSeen {
			t.Errorf("%v: error %q, usage printed %v; want %q, %v", c.args, got, seen, c.err, c.usageSeen)
		}
	}
	if m := Message("worker", errors.New("-parallel must be at least 1")); m != "worker: -parallel must be at least 1\nworker -h lists the options.\n" {
		t.Errorf("Message: %s", strconv.Quote(m))
	}
}
