package shard

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/reduce"
)

// BenchmarkPassesAtModel times each kind of pass Newton makes, on
// OSGM_BENCH_FILES's first file at the binary model OSGM_BENCH_MODEL (a
// model written with -max-iter 3 is Newton's third iterate): the value
// and gradient (eval), the trial point's pass that also fills the
// activity cache (evaldiag), and a CG step's Hessian-vector product over
// the rows that cache has active (hessvec). Each shard keeps its cache,
// as a worker does. It reports ms a pass and the fraction of rows
// active, which bounds hessvec/eval: an active row is read twice by a
// Hessian-vector pass (its a·v, then its scatter), once plus a scatter
// by an evaluation.
func BenchmarkPassesAtModel(b *testing.B) {
	files, model := benchFiles(b), os.Getenv("OSGM_BENCH_MODEL")
	if files == nil || model == "" {
		b.Skip("set OSGM_BENCH_FILES and OSGM_BENCH_MODEL")
	}
	shards, _ := loadBench(b, files[0])
	p := modelPoint(b, shards, model)
	scs := make([]Scratch, len(shards))
	for i := range scs {
		scs[i].cache = &Activity{}
	}
	var part reduce.Partial
	v := *p
	v.W = [][]float64{randomVector(len(p.W[0]))}
	passes := []struct {
		name string
		pass func(s *Shard, sc *Scratch)
	}{
		{"eval", func(s *Shard, sc *Scratch) { s.Eval(p, sc, &part) }},
		{"evaldiag", func(s *Shard, sc *Scratch) { sc.cache.stamp = 0; s.EvalDiag(p, sc, &part) }},
		{"hessvec", func(s *Shard, sc *Scratch) { s.HessVec(p, &v, sc, &part) }},
	}
	for _, ps := range passes {
		b.Run(ps.name, func(b *testing.B) {
			best := time.Duration(1 << 62)
			for range b.N {
				t0 := time.Now()
				for i, s := range shards {
					ps.pass(s, &scs[i])
				}
				best = min(best, time.Since(t0))
			}
			b.ReportMetric(float64(best.Microseconds())/1e3, "best-ms/pass")
			b.ReportMetric(activeFraction(shards, scs), "active")
		})
	}
}

// modelPoint is the binary model file's weights as a point over the
// shards' classes, stamped so that passes at it share the activity cache.
func modelPoint(b *testing.B, shards []*Shard, path string) *Point {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	m, err := libsvm.ReadModel(f, path)
	if err != nil {
		b.Fatal(err)
	}
	var sum Summary
	for _, s := range shards {
		mt := MetaOf(s)
		sum.Merge(mt.Rows, mt.NNZ, mt.MaxIndex, mt.NormSq, mt.Labels, mt.LabelCount)
	}
	order := LabelOrder(sum.Labels)
	for _, s := range shards {
		s.SetClasses(order)
	}
	pos := slices.Index(order, float64(m.Labels[0]))
	if len(m.W) != 1 || m.Bias >= 0 || pos < 0 {
		b.Fatalf("%s: a binary model without a bias, of one of the file's labels, please", path)
	}
	w := make([]float64, max(int(sum.MaxIndex), m.NFeature))
	copy(w, m.W[0])
	return &Point{W: [][]float64{w}, Classes: []int32{int32(pos)}, Stamp: 1, Terms: Terms{Bias: -1}}
}

func randomVector(n int) []float64 {
	rng := rand.New(rand.NewPCG(3, 4))
	v := make([]float64, n)
	for j := range v {
		v[j] = rng.NormFloat64()
	}
	return v
}

// activeFraction is the fraction of the shards' rows their caches hold
// active.
func activeFraction(shards []*Shard, scs []Scratch) float64 {
	var rows, active int
	for i, s := range shards {
		rows += s.Rows()
		for _, w := range scs[i].cache.bits {
			active += bits.OnesCount64(w)
		}
	}
	return float64(active) / float64(rows)
}

// BenchmarkBandwidth is the machine's memory bandwidth, STREAM's way,
// for the passes' bytes to be read against: "read" sums a 512 MB array
// (what a pass does to the shards' storage), "copy" copies one (STREAM's
// Copy, both directions counted), each on one goroutine and on two.
func BenchmarkBandwidth(b *testing.B) {
	const n = 64 << 20
	src, dst := make([]float64, n), make([]float64, n)
	for i := range src {
		src[i] = float64(i)
	}
	for _, g := range []int{1, 2} {
		for _, kind := range []string{"read", "copy"} {
			b.Run(fmt.Sprintf("%s-%d", kind, g), func(b *testing.B) {
				var sink atomic.Uint64
				for range b.N {
					var wg sync.WaitGroup
					for q := range g {
						lo, hi := q*n/g, (q+1)*n/g
						wg.Add(1)
						go func() {
							defer wg.Done()
							if kind == "copy" {
								copy(dst[lo:hi], src[lo:hi])
								return
							}
							// Four sums, so the adds' latency does
							// not bound the reads.
							var s0, s1, s2, s3 float64
							for x := src[lo:hi]; len(x) >= 4; x = x[4:] {
								s0 += x[0]
								s1 += x[1]
								s2 += x[2]
								s3 += x[3]
							}
							sink.Add(uint64(s0 + s1 + s2 + s3))
						}()
					}
					wg.Wait()
				}
				bytes := 8.0 * n
				if kind == "copy" {
					bytes *= 2
				}
				b.ReportMetric(bytes*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}
