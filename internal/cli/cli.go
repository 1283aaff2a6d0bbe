// Package cli is what the commands share in front of a user: how a flag
// is listed in -h, and how a command line that cannot be parsed is told.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// Parse parses args into fs without the flag package's own printing: a
// mistake should come first and alone, not after a hundred lines of
// options. -h writes usage to stdout, where a pager can read it, and
// returns flag.ErrHelp; any other error is the caller's to tell (Fail).
func Parse(fs *flag.FlagSet, args []string, usage func(io.Writer)) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		usage(os.Stdout)
	}
	return err
}

// Exit ends a command whose command line failed to parse: 0 for -h,
// else the error and a one-line hint to -h, and 2.
func Exit(cmd string, err error) {
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	fmt.Fprint(os.Stderr, Message(cmd, err))
	os.Exit(2)
}

// Message is what Exit prints for err.
func Message(cmd string, err error) string {
	return fmt.Sprintf("%s: %v\n%s -h lists the options.\n", cmd, err, cmd)
}

// Choices is a flag.Value that takes one of some words (Choice); where it
// reads like a bool flag (-compact alone is true), -h lists the words
// rather than show a bool.
type Choices interface {
	flag.Value
	IsBoolFlag() bool
	Choices() []string
}

// PrintFlags writes the flags named, in that order, as
// flag.PrintDefaults does.
func PrintFlags(w io.Writer, fs *flag.FlagSet, names ...string) {
	for _, name := range names {
		if f := fs.Lookup(name); f != nil {
			PrintFlag(w, f)
		}
	}
}

// PrintFlag is one entry of flag.PrintDefaults, but a default the text
// already gives is not given twice, and a Choices flag shows its words.
func PrintFlag(w io.Writer, f *flag.Flag) {
	name, text := flag.UnquoteUsage(f)
	line := "  -" + f.Name
	if c, ok := f.Value.(Choices); ok && c.IsBoolFlag() {
		line += "[=" + strings.Join(c.Choices(), "|") + "]"
	} else if name != "" {
		line += " " + name
	}
	def := f.DefValue
	if def != "" && def != "0" && def != "false" && def != "0s" && !strings.Contains(text, "(default ") {
		text += fmt.Sprintf(" (default %s)", def)
	}
	fmt.Fprintf(w, "%s\n    \t%s\n", line, strings.ReplaceAll(text, "\n", "\n    \t"))
}

// Simple parses a small command's flags (flag.CommandLine) with this
// usage: its synopsis, what it does (about, may be empty), its options
// and an example. A command line with other than nargs arguments (nargs
// < 0: any number) prints the usage and exits 2. It returns the
// arguments.
func Simple(synopsis, about, example string, nargs int) []string {
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: %s\n\n", synopsis)
		if about != "" {
			fmt.Fprintf(os.Stderr, "%s\n\n", about)
		}
		fmt.Fprintf(os.Stderr, "Options:\n")
		flag.PrintDefaults()
		fmt.Fprintf(os.Stderr, "\nExample: %s\n", example)
	}
	flag.Parse()
	if nargs >= 0 && flag.NArg() != nargs {
		flag.Usage()
		os.Exit(2)
	}
	return flag.Args()
}
