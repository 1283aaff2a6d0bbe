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

// Summarize merges the shards' descriptions in shard order. A
// regression's targets are left out: they are no classes, and a file
// holds about as many as it has rows, which would cost the merge a map
// as large.
func Summarize(metas []Meta, loss Loss) Summary {
	var s Summary
	for _, m := range metas {
		labels, counts := m.Labels, m.LabelCount
		if loss.Regression() {
			labels, counts = nil, nil
		}
		s.Merge(m.Rows, m.NNZ, m.MaxIndex, m.NormSq, labels, counts)
	}
	return s
}

// Rows is the number of rows the shards hold.
func Rows(metas []Meta) int {
	n := 0
	for _, m := range metas {
		n += m.Rows
	}
	return n
}
