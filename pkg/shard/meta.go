package shard

import "github.com/osgm-svm/osgm/pkg/cols"

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
	Cols       cols.List // shared with the shard's, where it is in this process
}

// MetaOf summarises a shard.
func MetaOf(s *Shard) Meta {
	return Meta{ID: s.ID, Rows: s.Rows(), NNZ: s.NNZ(), Pairs: s.pairs(), MaxIndex: s.MaxIndex, NormSq: s.NormSq, MaxNormSq: s.MaxNormSq,
		Labels: s.Labels, LabelCount: s.LabelCount, Cols: s.Cols}
}
