package shard

// col, number and rowValue read one nonzero, whatever the storage, for
// tests that check the storage against the parsed file; the passes
// decode whole rows (kernels.reader).
func (s *Shard) col(q int) int {
	cols, _ := s.kernels().reader(s)(q, q+1, nil, nil, nil)
	return int(cols[0])
}

// number is value q in the storage's terms: the mantissa for decimals.
func (s *Shard) number(q int) float64 {
	_, vals := s.kernels().reader(s)(q, q+1, nil, nil, nil)
	return vals[0]
}

func (s *Shard) rowValue(q int) float64 {
	if s.Values == Decimal {
		return s.number(q) / s.Scale
	}
	return s.number(q)
}
