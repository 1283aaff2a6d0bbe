package shard

import "fmt"

// Meta describes one loaded shard to the coordinator.
type Meta struct {
	ID         int
	Rows, NNZ  int
	Pairs      int // the rows' r(r+1)/2 for r nonzeros: a Hessian pass's products
	MaxIndex   uint32
	NormSq     float64
	MaxNormSq  float64
	Labels     []float64
	LabelCount []int
	Cols       []uint32
}

// MetaOf summarises a shard.
func MetaOf(s *Shard) Meta {
	return Meta{ID: s.ID, Rows: s.Rows(), NNZ: s.NNZ(), Pairs: s.pairs(), MaxIndex: s.MaxIndex, NormSq: s.NormSq, MaxNormSq: s.MaxNormSq,
		Labels: s.Labels, LabelCount: s.LabelCount, Cols: s.Cols.Slice()}
}

// NewPoint views vectors laid out as features then (when bias >= 0) the
// bias weight at index features, as the kernels take them.
func NewPoint(x [][]float64, bias float64, features int) *Point {
	p := &Point{W: x, Bias: bias}
	if bias >= 0 {
		p.WBias = make([]float64, len(x))
		for k := range x {
			p.WBias[k] = x[k][features]
		}
	}
	return p
}

// CheckFolds refuses a point that holds out a fold when some shard has no
// folds: evaluating it would silently count every row.
func CheckFolds(shards []*Shard, p *Point) error {
	if p.Holdout <= 0 {
		return nil
	}
	for _, s := range shards {
		if s.Fold == nil {
			return fmt.Errorf("shard %d: fold %d held out but the shard has no folds", s.ID, p.Holdout)
		}
	}
	return nil
}
