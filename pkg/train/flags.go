package train

import (
	"errors"
	"flag"
	"math"
	"strings"

	"github.com/osgm-svm/osgm/pkg/osgm"
)

// ProblemFlags and MethodFlags are the names Flags registers: LIBLINEAR's
// options that define the problem, and those that choose and tune the
// method. A command lists them in its help by group.
var (
	ProblemFlags = []string{"c", "e", "p", "B", "lambda"}
	MethodFlags  = []string{"method", "max-iter", "gap", "eta", "eta-scale", "eta-beta", "no-diag"}
)

// Flags registers into fs the options that set cfg's problem and method,
// with LIBLINEAR's defaults where it has the option; CheckFlags checks
// them once fs is parsed.
func (cfg *Config) Flags(fs *flag.FlagSet) {
	fs.Float64Var(&cfg.C, "c", 1, "cost C, as in LIBLINEAR (lambda = 1/(C m))")
	fs.Float64Var(&cfg.Lambda, "lambda", 0, "regularisation lambda, instead of -c")
	fs.Float64Var(&cfg.Eps, "e", 0.01, "stopping tolerance: LIBLINEAR's relative gradient test (default 0.01; 0.001 for -s 11)")
	fs.Float64Var(&cfg.Epsilon, "p", 0.1, "epsilon of -s 11's loss, as LIBLINEAR's -p")
	fs.Float64Var(&cfg.Bias, "B", -1, "bias: if >= 0, every row gets a feature of this value (-1: none)")
	fs.StringVar(&cfg.Method, "method", osgm.DefaultMethod, "optimiser: "+strings.Join(osgm.Methods(), ", ")+" (auto: newton-full for two classes and at most 1,024 features, else newton)")
	fs.IntVar(&cfg.MaxIter, "max-iter", 10000, "maximum iterations")
	fs.Float64Var(&cfg.MaxGap, "gap", 0, "also stop each problem only once it is certified within a relative gap `g` of its optimum (0: LIBLINEAR's test alone; 1e-6 gives every class at least LIBLINEAR's objective at the same -e, at several times its passes)")
	fs.Float64Var(&cfg.Params.Eta, "eta", 0, "OSGM's online step size (0: eta-scale/L, L re-estimated from curvature)")
	fs.Float64Var(&cfg.Params.EtaScale, "eta-scale", 1, "with -eta 0: OSGM's step size is eta-scale/L")
	fs.Float64Var(&cfg.Params.EtaBeta, "eta-beta", 1, "HDM's step size for the momentum weight")
	fs.BoolVar(&cfg.Params.NoDiag, "no-diag", false, "start OSGM's scaling at zero instead of from the Hessian diagonal")
}

// CheckFlags checks the options Flags registered, fs parsed: the values,
// and the rules between them.
func (cfg *Config) CheckFlags(fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case set["c"] && set["lambda"]:
		return errors.New("give either -c or -lambda, not both")
	case set["lambda"] && !(cfg.Lambda > 0):
		return errors.New("-lambda must be positive")
	case !(cfg.C > 0):
		return errors.New("-c must be positive")
	case !(cfg.Eps > 0):
		return errors.New("-e must be positive")
	case !(cfg.Epsilon >= 0) || math.IsInf(cfg.Epsilon, 0):
		return errors.New("-p must be a number >= 0")
	case cfg.MaxIter < 1:
		return errors.New("-max-iter must be at least 1")
	case !(cfg.MaxGap >= 0) || math.IsInf(cfg.MaxGap, 0):
		return errors.New("-gap must be a relative gap >= 0")
	}
	_, err := osgm.New(osgm.Choose(cfg.Method, 1, osgm.Shape{}), osgm.Problem{}, osgm.Params{})
	return err
}
