package shard

import "fmt"

// Sum is the data term of all shards: loss and gradient sums per problem
// over the global features, before the 1/m scaling and the regulariser.
type Sum struct {
	Loss     []float64
	Grad     [][]float64 // Grad[k][j]
	BiasGrad []float64
}

// Reducer adds partials into a Sum strictly in shard order, whatever order
// they arrive in, so the floating-point result does not depend on which
// worker computed what or when. Partials that arrive early wait.
type Reducer struct {
	// Release, when set, gets every partial back once it has been added.
	Release func(*Partial)

	cols    func(shard int) []uint32
	sum     *Sum
	next    int
	n       int
	pending map[int]*Partial
}

// NewReducer starts a reduction of n shards into sum, which it zeroes.
// cols gives each shard's local-to-global column map.
func NewReducer(sum *Sum, n int, cols func(shard int) []uint32) *Reducer {
	clear(sum.Loss)
	clear(sum.BiasGrad)
	for _, g := range sum.Grad {
		clear(g)
	}
	return &Reducer{cols: cols, sum: sum, n: n, pending: map[int]*Partial{}}
}

// Add hands over a shard's partial; the reducer keeps it until its turn.
// It reports whether the partial was taken (false for a duplicate).
func (r *Reducer) Add(p *Partial) (bool, error) {
	if p.Shard < r.next || r.pending[p.Shard] != nil {
		return false, nil
	}
	if p.Shard >= r.n {
		return false, fmt.Errorf("shard %d out of range (%d shards)", p.Shard, r.n)
	}
	K := len(r.sum.Loss)
	if len(p.Loss) != K || len(p.BiasGrad) != K || len(p.Grad) != len(r.cols(p.Shard))*K {
		return false, fmt.Errorf("shard %d: partial has the wrong size", p.Shard)
	}
	r.pending[p.Shard] = p
	for q := r.pending[r.next]; q != nil; q = r.pending[r.next] {
		delete(r.pending, r.next)
		r.apply(q)
		r.next++
		if r.Release != nil {
			r.Release(q)
		}
	}
	return true, nil
}

// Done reports whether every shard has been added.
func (r *Reducer) Done() bool { return r.next == r.n }

// Missing lists the shards not yet added.
func (r *Reducer) Missing() []int {
	var out []int
	for s := r.next; s < r.n; s++ {
		if r.pending[s] == nil {
			out = append(out, s)
		}
	}
	return out
}

func (r *Reducer) apply(p *Partial) {
	K := len(r.sum.Loss)
	for k := range K {
		r.sum.Loss[k] += p.Loss[k]
		r.sum.BiasGrad[k] += p.BiasGrad[k]
	}
	cols := r.cols(p.Shard)
	if K == 1 {
		g := r.sum.Grad[0]
		for l, j := range cols {
			g[j] += p.Grad[l]
		}
		return
	}
	// Problem by problem: each pass writes one vector, reading the
	// interleaved partial with a fixed stride.
	for k := range K {
		g := r.sum.Grad[k]
		src := p.Grad[k:]
		for l, j := range cols {
			g[j] += src[l*K]
		}
	}
}
