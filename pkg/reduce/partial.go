// Package reduce adds the shards' partial sums into the data term along a
// tree fixed by the shard layout (groups of GroupSize shards, then a
// binary tree over the groups), so the bits of the sum do not depend on
// which process adds which part: workers add the nodes they hold whole,
// the coordinator the rest.
package reduce

// Partial is one shard's contribution to the data term, in the shard's
// local columns. The coordinator adds partials in shard order.
type Partial struct {
	Shard int  // the shard, or the node's index when Group is set
	Group bool // a node's sum (see Reducer), over the node's columns
	Level int  // with Group: the node's level (0: a group)
	// Dense, with Group, is a sum over every coordinate of the point
	// rather than the node's columns: the root as workers add it (Relay).
	Dense    bool
	Loss     []float64 // per problem: sum of c φ(a·w) (see shard.Loss)
	Grad     []float64 // local column l, problem k at l*K+k: sum of c φ'(a·w) a
	BiasGrad []float64 // per problem, the bias feature's gradient sum
	// Hess, for osgm.OpEvalHess only, is the data part of the Hessian over the
	// point's whole dimension, packed (see shard.HessLen); nil otherwise.
	Hess []float64
	// Seconds is how long the worker that sent it had been computing the
	// round when it did: the coordinator splits round time into compute
	// and communication with it. Zero in-process.
	Seconds float64
}

// Resize gives p's loss and bias sums K entries and its gradient width K,
// reusing its memory; the entries are left as they were.
func (p *Partial) Resize(K, width int) {
	p.Loss, p.BiasGrad, p.Grad = grow(p.Loss, K), grow(p.BiasGrad, K), grow(p.Grad, width*K)
}

// Zero is Resize with every sum at zero and no Hessian: a sum's start.
func (p *Partial) Zero(K, width int) {
	p.Resize(K, width)
	clear(p.Loss)
	clear(p.BiasGrad)
	clear(p.Grad)
	p.Hess = p.Hess[:0]
}

func grow(b []float64, n int) []float64 {
	if cap(b) < n {
		return make([]float64, n)
	}
	return b[:n]
}

// addHess adds src into dst, or copies it when dst is empty (a sum's
// first term), and returns dst.
func addHess(dst, src []float64) []float64 {
	if len(src) == 0 {
		return dst[:0]
	}
	if len(dst) == 0 {
		return append(dst[:0], src...)
	}
	for i, v := range src {
		dst[i] += v
	}
	return dst
}
