package train

import (
	"strings"
	"testing"

	"github.com/osgm-svm/osgm/internal/flagtest"
)

// TestFlags: the problem's and method's options parse into a Config with
// LIBLINEAR's defaults, and CheckFlags refuses what LIBLINEAR would, and
// what no method can run.
func TestFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want func(Config) bool
		err  string // "" when accepted
	}{
		{nil, func(c Config) bool {
			return c.C == 1 && c.Eps == 0.01 && c.Bias == -1 && c.MaxGap == 0 && c.MaxIter == 10000 && c.Lambda == 0
		}, ""},
		{[]string{"-c", "4", "-e", "0.001", "-B", "1", "-gap", "0"}, func(c Config) bool {
			return c.C == 4 && c.Eps == 0.001 && c.Bias == 1 && c.MaxGap == 0
		}, ""},
		{[]string{"-gap", "1e-8", "-method", "hdm", "-eta-scale", "2", "-no-diag"}, func(c Config) bool {
			return c.MaxGap == 1e-8 && c.Method == "hdm" && c.Params.EtaScale == 2 && c.Params.NoDiag
		}, ""},
		{[]string{"-lambda", "0.5"}, func(c Config) bool { return c.Lambda == 0.5 }, ""},
		{[]string{"-c", "1", "-lambda", "1"}, nil, "either -c or -lambda"},
		{[]string{"-lambda", "0"}, nil, "-lambda must be positive"},
		{[]string{"-c", "0"}, nil, "-c must be positive"},
		{[]string{"-e", "-1"}, nil, "-e must be positive"},
		{[]string{"-max-iter", "0"}, nil, "-max-iter"},
		{[]string{"-method", "sgd"}, nil, "unknown method"},
		{[]string{"-gap", "-1"}, nil, "-gap must be a relative gap"},
		{[]string{"-gap", "auto"}, nil, "invalid value"},
		{[]string{"-gap", "Inf"}, nil, "-gap must be a relative gap"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var cfg Config
			err := flagtest.Parse(cfg.Flags, cfg.CheckFlags, c.args)
			if flagtest.Accepted(t, err, c.err) && !c.want(cfg) {
				t.Fatalf("config %+v", cfg)
			}
		})
	}
}
