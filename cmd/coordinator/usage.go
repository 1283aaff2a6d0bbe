package main

import (
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/osgm-svm/osgm/internal/cli"
	"github.com/osgm-svm/osgm/pkg/train"
	"github.com/osgm-svm/osgm/pkg/transport/cluster"
)

// flagGroups orders -h by what a user is deciding: LIBLINEAR's own
// options first, so its users find their command line, then the rest.
// The problem's and the method's options are train's (Config.Flags), the
// cluster's transport's (cluster.Config.Flags, transport.Auth.Flags).
var flagGroups = []struct {
	title string
	names []string
}{
	{"LIBLINEAR's options", slices.Concat([]string{"s"}, train.ProblemFlags, []string{"v", "C", "i", "t", "q"})},
	{"Method", slices.Concat(train.MethodFlags, []string{"compare", "plot", "trace"})},
	{"Cluster", slices.Concat([]string{"nats", "near"}, cluster.ClusterFlags, []string{"workers", "shards", "objstore", "objstore-replicas", "compact", "local"})},
	{"Operations", slices.Concat([]string{"checkpoint", "checkpoint-every", "resume"}, cluster.OperationFlags, []string{"check", "http", "http-linger", "metrics-addr", "cpuprofile", "memprofile"})},
	{"Security (also the worker's; secrets only from NATS_PASSWORD and NATS_TOKEN, or the files NATS_PASSWORD_FILE and NATS_TOKEN_FILE name)", []string{"user", "nkey", "creds", "tlsca", "tlscert", "tlskey"}},
}

// usage prints the options by group, each as flag.PrintDefaults would.
func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: coordinator [options] training_file [model_file]\n")
	for _, g := range flagGroups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		cli.PrintFlags(w, fs, g.names...)
		if g.title == flagGroups[0].title {
			fmt.Fprintf(w, "  -wi weight\n    \tmultiply C by weight for the rows of label i (e.g. -w1 2 -w-1 0.5), as LIBLINEAR\n")
		}
	}
	fmt.Fprintf(w, "\nExamples:\n  coordinator -c 1 -e 0.001 -t a9a.t a9a a9a.model\n  coordinator -v 5 a9a\n  coordinator -C a9a\n")
}
