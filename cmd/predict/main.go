// Command predict classifies a LIBSVM file with a LIBLINEAR model, like
// liblinear-predict:
//
//	predict [-b 0|1] [-q] test_file model_file output_file
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/osgm-svm/osgm/internal/cli"
	"github.com/osgm-svm/osgm/pkg/libsvm"
)

func main() {
	quiet := flag.Bool("q", false, "quiet: do not print the accuracy")
	prob := flag.Int("b", 0, "probability estimates, as liblinear-predict: 1 for logistic regression models (-s 0), else 0")
	args := cli.Simple("predict [options] test_file model_file output_file", "", "predict a9a.t a9a.model a9a.out", 3)
	if *prob != 0 && *prob != 1 {
		fmt.Fprintf(os.Stderr, "predict: -b %d: want 0 or 1\n", *prob)
		os.Exit(2)
	}
	if err := run(args[0], args[1], args[2], *quiet, *prob == 1); err != nil {
		fmt.Fprintln(os.Stderr, "predict:", err)
		os.Exit(1)
	}
}

func run(testPath, modelPath, outPath string, quiet, prob bool) error {
	model, err := libsvm.ReadModelFile(modelPath)
	if err != nil {
		return err
	}
	predictAll := libsvm.PredictAll
	if prob {
		if !model.Probabilistic() {
			return fmt.Errorf("%s: %w", modelPath, libsvm.ErrNotProbabilistic)
		}
		predictAll = libsvm.PredictProbabilities
	}
	in, err := libsvm.Open(testPath)
	if err != nil {
		return err
	}
	defer in.Close()
	// Creating the output truncates it: it must not be an input.
	if o, err := os.Stat(outPath); err == nil {
		for _, p := range []string{testPath, modelPath} {
			if i, err := os.Stat(p); err == nil && os.SameFile(o, i) {
				return fmt.Errorf("output file %s is %s: it would be overwritten", outPath, p)
			}
		}
	}
	out, err := os.Create(outPath)
	if err != nil {
		return err
	}
	acc, err := predictAll(in, testPath, model, out)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if !quiet {
		fmt.Println(acc)
		if acc.Unknown > 0 {
			fmt.Fprintf(os.Stderr, "predict: warning: %d rows have labels the model does not know (counted as wrong)\n", acc.Unknown)
		}
	}
	return nil
}
