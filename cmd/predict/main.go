// Command predict classifies a LIBSVM file with a LIBLINEAR model, like
// liblinear-predict:
//
//	predict [-b 0] [-q] test_file model_file output_file
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/osgm-svm/osgm/pkg/libsvm"
)

func main() {
	quiet := flag.Bool("q", false, "quiet: do not print the accuracy")
	prob := flag.Int("b", 0, "probability estimates, as liblinear-predict: 0 only (1, for logistic regression models, is not implemented)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: predict [options] test_file model_file output_file\n\nOptions:\n")
		flag.PrintDefaults()
		fmt.Fprintf(os.Stderr, "\nExample: predict a9a.t a9a.model a9a.out\n")
	}
	flag.Parse()
	if flag.NArg() != 3 {
		flag.Usage()
		os.Exit(2)
	}
	if err := checkProbability(*prob); err != nil {
		fmt.Fprintln(os.Stderr, "predict:", err)
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Arg(1), flag.Arg(2), *quiet); err != nil {
		fmt.Fprintln(os.Stderr, "predict:", err)
		os.Exit(1)
	}
}

// checkProbability accepts liblinear-predict's -b 0, so its command
// lines run unchanged. -b 1 means something only for logistic regression
// models, which this project does not train: not implemented.
func checkProbability(b int) error {
	switch b {
	case 0:
		return nil
	case 1:
		return errors.New("-b 1: probability estimates are not produced here; liblinear-predict gives them for logistic regression models only")
	}
	return fmt.Errorf("-b %d: want 0 or 1", b)
}

func run(testPath, modelPath, outPath string, quiet bool) error {
	mf, err := os.Open(modelPath)
	if err != nil {
		return err
	}
	model, err := libsvm.ReadModel(mf, modelPath)
	mf.Close()
	if err != nil {
		return err
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
	acc, err := libsvm.PredictAll(in, testPath, model, out)
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
