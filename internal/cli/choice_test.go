package cli

import (
	"flag"
	"io"
	"strings"
	"testing"
)

type (
	switchWords struct{} // as -compact's
	modeWords   struct{} // as -reduce's
)

func (switchWords) Words() []string { return []string{"auto", "true", "false"} }
func (modeWords) Words() []string   { return []string{"auto", "tree", "star"} }

func TestChoice(t *testing.T) {
	tests := []struct {
		args []string
		want string // the value, or the error's text
	}{
		{nil, "auto"},
		{[]string{"-switch"}, "true"},
		{[]string{"-switch=false"}, "false"},
		{[]string{"-switch=0"}, "false"},
		{[]string{"-switch=T"}, "true"},
		{[]string{"-switch=auto"}, "auto"},
		{[]string{"-switch=sometimes"}, "want auto, true or false"},
		{[]string{"-mode", "star"}, "star"},
		{[]string{"-mode=tree"}, "tree"},
		{[]string{"-mode=true"}, "want auto, tree or star"},
		{[]string{"-mode"}, "flag needs an argument"},
	}
	for _, tt := range tests {
		var sw Choice[switchWords]
		var mode Choice[modeWords]
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Var(&sw, "switch", "")
		fs.Var(&mode, "mode", "")
		var got string
		if err := fs.Parse(tt.args); err != nil {
			got = err.Error()
		} else if strings.HasPrefix(strings.Join(tt.args, ""), "-mode") {
			got = mode.String()
		} else {
			got = sw.String()
		}
		if !strings.Contains(got, tt.want) {
			t.Errorf("%v: %q, want %q", tt.args, got, tt.want)
		}
	}
	if got := Choice[modeWords](7).String(); got != "Choice(7)" {
		t.Errorf("a value past the words: %q", got)
	}
}

// TestChoiceHelp: -h shows a bool-like choice's words, a mode's name.
func TestChoiceHelp(t *testing.T) {
	var sw Choice[switchWords]
	var mode Choice[modeWords]
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Var(&sw, "switch", "on, off or auto")
	fs.Var(&mode, "mode", "who adds (`mode`)")
	for name, want := range map[string]string{
		"switch": "  -switch[=auto|true|false]\n    \ton, off or auto (default auto)\n",
		"mode":   "  -mode mode\n    \twho adds (mode) (default auto)\n",
	} {
		var b strings.Builder
		PrintFlag(&b, fs.Lookup(name))
		if b.String() != want {
			t.Errorf("-%s: %q, want %q", name, b.String(), want)
		}
	}
}
