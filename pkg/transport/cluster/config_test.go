package cluster

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/osgm-svm/osgm/internal/flagtest"
	"github.com/osgm-svm/osgm/pkg/transport"
)

// TestClusterFlags: the cluster's options parse into a Config with
// their defaults, and CheckFlags refuses values that would take every
// worker for lost, or wait for none.
func TestClusterFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want func(Config) bool
		err  string // "" when accepted
	}{
		{nil, func(c Config) bool {
			return c.MinWorkers == 1 && c.HeartbeatTimeout == transport.DefaultHeartbeatTimeout && c.LoadStall == transport.DefaultLoadStall && c.NoWorkerTimeout == 0 && c.Points == PointsAuto && c.Reduce == ReduceAuto
		}, ""},
		{[]string{"-min-workers", "3", "-heartbeat-timeout", "5s", "-no-worker-timeout", "1m", "-points", "own", "-reduce", "star"}, func(c Config) bool {
			return c.MinWorkers == 3 && c.HeartbeatTimeout == 5*time.Second && c.NoWorkerTimeout == time.Minute && c.Points == PointsOwn && c.Reduce == ReduceStar
		}, ""},
		{[]string{"-heartbeat-timeout", "0s"}, nil, "-heartbeat-timeout must be positive"},
		{[]string{"-load-stall", "-1s"}, nil, "-load-stall must be positive"},
		{[]string{"-no-worker-timeout", "-1s"}, nil, "-no-worker-timeout must not be negative"},
		{[]string{"-min-workers", "0"}, nil, "-min-workers must be at least 1"},
		{[]string{"-points", "some"}, nil, "points"},
		{[]string{"-reduce", "ring"}, nil, "reduce"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var cfg Config
			err := flagtest.Parse(cfg.Flags, func(*flag.FlagSet) error { return cfg.CheckFlags() }, c.args)
			if flagtest.Accepted(t, err, c.err) && !c.want(cfg) {
				t.Fatalf("config %+v", cfg)
			}
		})
	}
}
