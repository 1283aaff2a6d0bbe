// Command svmeval prints the objective a model reaches on a data set, in
// LIBLINEAR's scale (F(w) = ||w||^2/2 + C sum_i φ(y_i w·x_i), φ the loss of
// the model's solver: -s 0, 1 or 2), so models from this trainer and from
// liblinear-train can be compared:
//
//	svmeval [-c C] data_file model_file
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"github.com/osgm-svm/osgm/internal/cli"
	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/train"
)

func main() {
	c := flag.Float64("c", 1, "cost C the model was trained with")
	p := flag.Float64("p", 0.1, "epsilon of -s 11's loss the model was trained with")
	args := cli.Simple("svmeval [-c C] [-p P] data_file model_file",
		"Prints LIBLINEAR's objective F of each problem of a model on a data set, and its training accuracy.",
		"svmeval -c 1 a9a a9a.model", 2)
	if err := run(args[0], args[1], *c, *p); err != nil {
		fmt.Fprintln(os.Stderr, "svmeval:", err)
		os.Exit(1)
	}
}

func run(dataPath, modelPath string, c, p float64) error {
	m, err := libsvm.ReadModelFile(modelPath)
	if err != nil {
		return err
	}
	loss, ok := train.LossOf(m)
	if !ok {
		return fmt.Errorf("%s: solver_type %s: not a problem this trainer has (LIBLINEAR -s 0, 1, 2 or 11)", modelPath, m.Solver)
	}
	obj, err := objective.ForModel(dataPath, m, loss, c, p, runtime.NumCPU())
	if err != nil {
		return fmt.Errorf("%s: %w", modelPath, err)
	}
	f := make([]float64, len(m.W))
	g := make([][]float64, len(m.W))
	for k := range g {
		g[k] = make([]float64, obj.Dim())
	}
	if err := obj.Eval(m.W, f, g); err != nil {
		return err
	}
	for k := range f {
		fmt.Printf("problem %d objective %s\n", k, strconv.FormatFloat(f[k]/obj.Lambda, 'g', 17, 64))
	}
	if m.Regression() {
		return nil
	}
	t, err := obj.Backend.Tally(obj.ModelPoint(m.W))
	if err != nil {
		return err
	}
	rows, correct := t.Total()
	fmt.Printf("training accuracy %d/%d\n", correct, rows)
	return nil
}
