// Command svmgen writes a synthetic LIBSVM data set that looks like text
// data: feature frequencies follow a power law, rows are sparse and
// (optionally) unit-normalised, labels come from hidden linear models with
// some noise. It streams, so files of any size cost no memory:
//
//	svmgen -rows 200000 -features 100000 -nnz 60 -o big.svm
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"

	"github.com/osgm-svm/osgm/internal/cli"
)

type params struct {
	rows, features, nnz, classes int
	binary                       bool
	images                       bool // dense rows of pixels 0-255 (see imageRow)
	real                         bool // values to float64's full precision (see rowValues)
	regression                   bool // real targets: the hidden model's score plus noise
	noise, zipf                  float64
	seed                         uint64
	bytes                        int64 // stop after this many bytes (0: rows decides)
	testRows                     int   // rows after the training rows, for a test file
}

// check says what is wrong with the parameters, naming the flag.
func (p params) check() error {
	switch {
	case p.rows < 1:
		return errors.New("-rows must be at least 1")
	case p.features < 1:
		return errors.New("-features must be at least 1")
	case p.regression && (p.images || p.classes != 2):
		return errors.New("-regression writes text-like rows with real targets: no -images or -classes")
	case p.images && p.binary:
		return errors.New("-images and -binary exclude each other: pixels take values 0-255")
	case p.real && (p.images || p.binary):
		return errors.New("-real writes text-like rows of real values: no -images or -binary")
	case !p.images && (p.nnz < 1 || p.nnz > p.features):
		return fmt.Errorf("-nnz must be between 1 and -features (%d): a row holds each feature at most once", p.features)
	case p.classes < 2:
		return errors.New("-classes must be at least 2")
	case !(p.zipf > 1):
		return errors.New("-zipf must be above 1")
	case !(p.noise >= 0 && p.noise <= 1):
		return errors.New("-noise must be between 0 and 1")
	}
	return nil
}

func main() {
	var p params
	var out string
	var size string
	flag.IntVar(&p.rows, "rows", 10000, "rows")
	flag.IntVar(&p.features, "features", 10000, "number of features")
	flag.IntVar(&p.nnz, "nnz", 30, "average nonzeros per row")
	flag.IntVar(&p.classes, "classes", 2, "classes (labels +1/-1 for 2, 1..K otherwise)")
	flag.BoolVar(&p.binary, "binary", false, "binary features (all values 1)")
	flag.BoolVar(&p.real, "real", false, "real values: each nonzero drawn from a continuous distribution and written to float64's full precision, as measurements are (no value repeats; no compact storage holds them exactly)")
	flag.BoolVar(&p.images, "images", false, "image-like rows instead of text-like: every feature a pixel with an integer value 0-255 (zeros left out), classes drawn around correlated prototypes; -nnz and -zipf are not used")
	flag.Float64Var(&p.noise, "noise", 0.05, "fraction of labels flipped at random (with -regression: the standard deviation of the targets' Gaussian noise)")
	flag.BoolVar(&p.regression, "regression", false, "real-valued targets, for -s 11: a hidden linear model's score of the row plus noise")
	flag.Float64Var(&p.zipf, "zipf", 1.1, "power-law exponent of feature frequencies (> 1)")
	flag.Uint64Var(&p.seed, "seed", 1, "random seed")
	flag.StringVar(&size, "size", "", "write rows until the file has this size (e.g. 1G, 500M), instead of -rows")
	flag.StringVar(&out, "o", "-", "output file (- for standard output)")
	var testOut string
	flag.StringVar(&testOut, "test", "", "also write -test-rows further rows of the same data (held out from -o) to this file")
	flag.IntVar(&p.testRows, "test-rows", 0, "rows of the -test file (default: a fifth of -rows)")
	cli.Simple("svmgen [options]", "Writes a synthetic LIBSVM file with text-like (power-law) features.",
		"svmgen -rows 100000 -features 100000 -nnz 60 -o gen100k.svm\n"+
			"         svmgen -size 1G -features 1000000 -o gen1g.svm\n"+
			"         svmgen -images -rows 60000 -features 784 -classes 10 -o images.svm -test images.t", -1)
	if size != "" {
		n, err := parseSize(size)
		if err != nil {
			fmt.Fprintln(os.Stderr, "svmgen:", err)
			os.Exit(2)
		}
		p.bytes, p.rows = n, math.MaxInt
	}
	if testOut == "" {
		p.testRows = 0
	} else if p.testRows == 0 {
		p.testRows = max(p.rows/5, 1)
	}
	if err := p.check(); err != nil {
		fmt.Fprintln(os.Stderr, "svmgen:", err)
		os.Exit(2)
	}
	w, test := io.Writer(os.Stdout), io.Discard
	for _, o := range []struct {
		path string
		w    *io.Writer
	}{{out, &w}, {testOut, &test}} {
		if o.path == "" || o.path == "-" {
			continue
		}
		f, err := os.Create(o.path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "svmgen:", err)
			os.Exit(1)
		}
		defer f.Close()
		*o.w = f
	}
	if err := generate(w, test, p); err != nil {
		fmt.Fprintln(os.Stderr, "svmgen:", err)
		os.Exit(1)
	}
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch s[len(s)-1] {
	case 'K', 'k':
		mult = 1 << 10
	case 'M', 'm':
		mult = 1 << 20
	case 'G', 'g':
		mult = 1 << 30
	}
	if mult > 1 {
		s = s[:len(s)-1]
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return int64(v * float64(mult)), nil
}

// blockRows is how many rows one random stream makes. Blocks are made in
// parallel and written in order; each has its own stream seeded by (seed,
// block), so the file depends on the flags only, not on the cores.
const blockRows = 2048

// block is one block's text and where each of its rows ends.
type block struct {
	text []byte
	ends []int
}

// generate writes p.rows rows (or p.bytes) to out, then p.testRows more
// of the same data to test.
func generate(out, test io.Writer, p params) error {
	workers := runtime.GOMAXPROCS(0)
	type job struct {
		id  int
		out chan block
	}
	jobs := make(chan job, 2*workers)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		defer close(jobs)
		for b := 0; ; b++ {
			j := job{id: b, out: make(chan block, 1)}
			select {
			case jobs <- j:
			case <-stop:
				return
			}
		}
	}()
	order := make(chan job, 2*workers)
	// The feeder hands jobs to the makers and, in the same order, to the
	// writer below, which waits on each block in turn.
	makers := make(chan job, 2*workers)
	go func() {
		defer close(order)
		defer close(makers)
		for j := range jobs {
			select {
			case order <- j:
			case <-stop:
				return
			}
			select {
			case makers <- j:
			case <-stop:
				return
			}
		}
	}()
	for w := 0; w < workers; w++ {
		go func() {
			for j := range makers {
				j.out <- makeBlock(p, j.id)
			}
		}()
	}
	bw := bufio.NewWriterSize(out, 1<<20)
	var written int64
	rows, testRows := 0, 0
	for j := range order {
		b := <-j.out
		start := 0
		for _, end := range b.ends {
			if rows >= p.rows || (p.bytes > 0 && written >= p.bytes) {
				if testRows == p.testRows {
					return bw.Flush()
				}
				if testRows == 0 {
					if err := bw.Flush(); err != nil {
						return err
					}
					bw = bufio.NewWriterSize(test, 1<<20)
				}
				testRows++
			} else {
				written += int64(end - start)
				rows++
			}
			if _, err := bw.Write(b.text[start:end]); err != nil {
				return err
			}
			start = end
		}
	}
	return bw.Flush()
}

// makeBlock writes rows [id*blockRows, (id+1)*blockRows) from the block's
// own random stream.
func makeBlock(p params, id int) block {
	seed := p.seed*0x9e3779b97f4a7c15 + uint64(id)
	rng := rand.New(rand.NewPCG(seed, seed^0xbf58476d1ce4e5b9))
	zipf := rand.NewZipf(rng, p.zipf, 1, uint64(p.features-1))
	idx := make([]int, 0, 4*p.nnz)
	val := make([]float64, 0, 4*p.nnz)
	line := make([]byte, 0, blockRows*p.nnz*12)
	ends := make([]int, 0, blockRows)
	scores := make([]float64, p.classes)
	for i := 0; i < blockRows; i++ {
		if p.images {
			var label int
			label, idx, val = p.imageRow(rng, idx, val)
			line = p.appendRow(line, label, idx, val)
			ends = append(ends, len(line))
			continue
		}
		idx = rowFeatures(p, rng, zipf, idx)
		val = rowValues(p, rng, len(idx), val)
		if p.regression {
			p.hiddenLabel(idx, val, scores)
			target := scores[0] + p.noise*rng.NormFloat64()
			line = appendFeatures(strconv.AppendFloat(line, target, 'g', 8, 64), p, idx, val)
			ends = append(ends, len(line))
			continue
		}
		label := p.hiddenLabel(idx, val, scores)
		if rng.Float64() < p.noise {
			label = rng.IntN(p.classes)
		}
		line = p.appendRow(line, label, idx, val)
		ends = append(ends, len(line))
	}
	return block{text: line, ends: ends}
}

// rowFeatures draws a row's feature indices, sorted and distinct, into idx.
func rowFeatures(p params, rng *rand.Rand, zipf *rand.Zipf, idx []int) []int {
	n := p.nnz/2 + rng.IntN(p.nnz+1)
	idx = idx[:0]
	for len(idx) < n {
		// Shuffle ranks so frequent features are spread over the index range.
		idx = append(idx, int(zipf.Uint64()*2654435761%uint64(p.features)))
		if len(idx) > 4*p.nnz {
			break
		}
	}
	slices.Sort(idx)
	return slices.Compact(idx)
}

// rowValues draws n values into val: ones, term counts scaled to a unit
// row, or with -real continuous values scaled to a unit row.
func rowValues(p params, rng *rand.Rand, n int, val []float64) []float64 {
	val = val[:0]
	norm := 0.0
	for range n {
		v := 1.0
		switch {
		case p.real:
			v = rng.ExpFloat64()
		case !p.binary:
			v = 1 + math.Floor(rng.ExpFloat64()*3) // term counts
		}
		val = append(val, v)
		norm += v * v
	}
	if !p.binary && norm > 0 {
		s := 1 / math.Sqrt(norm)
		for q := range val {
			val[q] *= s
			if !p.real {
				val[q] = float64(float32(val[q])) // six digits suffice; float32 keeps files small
			}
		}
	}
	return val
}

// imageRow draws a row like a raw-pixel image set's (MNIST's): its
// class first, then each pixel around the class's prototype, an integer
// 0-255, dark pixels written as absent. Prototypes share most of their
// pattern (weight 0's), so classes are correlated and overlap; the
// unscaled values make the problem as ill-conditioned as raw pixels.
// The label is flipped with probability -noise.
func (p params) imageRow(rng *rand.Rand, idx []int, val []float64) (int, []int, []float64) {
	class := rng.IntN(p.classes)
	label := class
	if rng.Float64() < p.noise {
		label = rng.IntN(p.classes)
	}
	ink := 0.7 + 0.5*rng.Float64() // a row's contrast, shared by its pixels
	idx, val = idx[:0], val[:0]
	for j := range p.features {
		proto := 0.65*p.weight(0, j) + 0.35*p.weight(class+1, j)
		v := math.Round(ink*(40+200*proto) + 35*rng.NormFloat64())
		if v < 30 {
			continue
		}
		idx = append(idx, j)
		val = append(val, min(v, 255))
	}
	return label, idx, val
}

// hiddenLabel is the class (0-based) whose hidden model scores the row
// highest, or for two classes the sign of the first's score.
func (p params) hiddenLabel(idx []int, val, scores []float64) int {
	for k := range scores {
		scores[k] = 0
		for q, j := range idx {
			scores[k] += p.weight(k, j) * val[q]
		}
	}
	if p.classes == 2 {
		if scores[0] > 0 {
			return 1
		}
		return 0
	}
	label := 0
	for k := range scores {
		if scores[k] > scores[label] {
			label = k
		}
	}
	return label
}

// weight is feature j's weight in class k's hidden model: deterministic
// in (seed, class, j), so no n x K table is held.
func (p params) weight(k, j int) float64 {
	h := uint64(j)*0x9e3779b97f4a7c15 ^ uint64(k+1)*0xbf58476d1ce4e5b9 ^ p.seed
	h ^= h >> 31
	h *= 0x94d049bb133111eb
	h ^= h >> 29
	return float64(int64(h>>11))/float64(1<<52) - 1 // in [-1, 1)
}

// appendRow appends the row's LIBSVM line: +1/-1 for two classes, else
// labels from 1.
func (p params) appendRow(line []byte, label int, idx []int, val []float64) []byte {
	switch {
	case p.classes > 2:
		line = strconv.AppendInt(line, int64(label+1), 10)
	case label == 1:
		line = append(line, "+1"...)
	default:
		line = append(line, "-1"...)
	}
	return appendFeatures(line, p, idx, val)
}

// appendFeatures appends a row's features after its label, and its end.
func appendFeatures(line []byte, p params, idx []int, val []float64) []byte {
	for q, j := range idx {
		line = append(line, ' ')
		line = strconv.AppendInt(line, int64(j+1), 10)
		line = append(line, ':')
		if p.binary {
			line = append(line, '1')
		} else if p.images {
			line = strconv.AppendInt(line, int64(val[q]), 10)
		} else if p.real {
			line = strconv.AppendFloat(line, val[q], 'g', -1, 64)
		} else {
			line = strconv.AppendFloat(line, val[q], 'g', 6, 32)
		}
	}
	return append(line, '\n')
}
