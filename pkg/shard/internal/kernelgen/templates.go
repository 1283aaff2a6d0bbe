package main

// kernel is a template and whether it is stamped out for ones too.
type kernel struct {
	name string
	ones bool
	text string
}

// kernels are the passes over one problem (binary: four-way sums scaled
// by the scale's inverse; seq: in-order sums divided by the scale, the
// multi-class loops' arithmetic for one problem) and over several
// (multi). Every product that is added to a sum is converted with
// float64(...), so that no machine fuses it into a multiply-add: the bits
// are the same on every CPU.
var kernels = []kernel{
	{"evalBinary", true, evalBinary},
	{"evalSeq", true, evalSeq},
	{"evalMulti", true, evalMulti},
	{"evalDiagBinary", true, evalDiagBinary},
	{"evalDiagSeq", false, evalDiagSeq},
	{"hessVecBinary", true, hessVecBinary},
	{"hessVecSeq", true, hessVecSeq},
	{"marginsBinary", true, marginsBinary},
}

const evalBinary = `
// {{.Name "evalBinary"}} is Eval's loop for a binary problem. The values
// are val/scale: the scale (a power of ten for decimal storage, else 1)
// is applied once to the row's sum and once to its gradient coefficient,
// as a product with its inverse: on short rows a division per row costs
// as much as the row's arithmetic.
func {{.Name "evalBinary"}}{{.TypeParams}}(rowPtr []uint32, idx []I,{{.Values}} class []int32, r *rows, x vecs) (loss, gb float64) {
	wl, gl, bias, wb := x.w, x.g, x.bias, x.wb
	hasBias := bias >= 0
	{{- if not .Ones}}
	inv := 1 / vs.scale
	{{- end}}
	class = class[:len(rowPtr)-1]
	m := {{.View "rowPtr" "idx"}}
	wp, gp := unsafe.Pointer(unsafe.SliceData(wl)), unsafe.Pointer(unsafe.SliceData(gl))
	a := uintptr(rowPtr[0])
	for i := range class {
		b := uintptr(rowPtr[i+1])
		if r.skip(i) {
			a = b
			continue
		}
		// {{.Dot}}'s sums in its order, so every kernel finds the same
		// margins to the bit.
		var s0, s1, s2, s3 float64
		q := a
		for ; q+4 <= b; q += 4 {
			s0 += {{.Term "wp" "q"}}
			s1 += {{.Term "wp" "q+1"}}
			s2 += {{.Term "wp" "q+2"}}
			s3 += {{.Term "wp" "q+3"}}
		}
		for ; q < b; q++ {
			s0 += {{.Term "wp" "q"}}
		}
		z := {{.Inv "((s0 + s1) + (s2 + s3))"}}
		if hasBias {
			z += float64(bias * wb)
		}
		sd := r.side(class[i]) & 1
		l, c, ok := hingeGrad(signs[sd], z, r.w[sd])
		if r.loss != SquaredHinge {
			l, c, ok = r.loss.grad(r.y(sd, class[i]), z, r.w[sd], r.eps)
		}
		if ok {
			loss += l
			ci := {{.Inv "c"}}
			q := a
			for ; q+4 <= b; q += 4 {
				*at(gp, m.col(q)) += {{.Mul "ci" "m.val(q)"}}
				*at(gp, m.col(q+1)) += {{.Mul "ci" "m.val(q+1)"}}
				*at(gp, m.col(q+2)) += {{.Mul "ci" "m.val(q+2)"}}
				*at(gp, m.col(q+3)) += {{.Mul "ci" "m.val(q+3)"}}
			}
			for ; q < b; q++ {
				*at(gp, m.col(q)) += {{.Mul "ci" "m.val(q)"}}
			}
			if hasBias {
				gb += float64(c * bias)
			}
		}
		a = b
	}
	return loss, gb
}
`

const evalSeq = `
// {{.Name "evalSeq"}} is {{.Name "evalMulti"}} for a lone problem: a
// row's margin summed in order and then scaled, where
// {{.Name "evalBinary"}}'s is four-way and multiplied by the scale's
// inverse.
func {{.Name "evalSeq"}}{{.TypeParams}}(rowPtr []uint32, idx []I,{{.Values}} class []int32, r *rows, x vecs) (loss, gb float64) {
	wl, gl, bias, wb := x.w, x.g, x.bias, x.wb
	{{- if not .Ones}}
	scale := vs.scale
	{{- end}}
	class = class[:len(rowPtr)-1]
	m := {{.View "rowPtr" "idx"}}
	wp, gp := unsafe.Pointer(unsafe.SliceData(wl)), unsafe.Pointer(unsafe.SliceData(gl))
	for i := range class {
		if r.skip(i) {
			continue
		}
		a, b := uintptr(rowPtr[i]), uintptr(rowPtr[i+1])
		var z float64
		for q := a; q < b; q++ {
			z += {{.Term "wp" "q"}}
		}
		{{- if not .Ones}}
		z /= scale
		{{- end}}
		if bias >= 0 {
			z += float64(bias * wb)
		}
		sd := r.side(class[i]) & 1
		l, c, ok := hingeGrad(signs[sd], z, r.w[sd])
		if r.loss != SquaredHinge {
			l, c, ok = r.loss.grad(r.y(sd, class[i]), z, r.w[sd], r.eps)
		}
		if ok {
			loss += l
			if bias >= 0 {
				gb += float64(c * bias)
			}
			{{- if not .Ones}}
			c /= scale
			{{- end}}
			for q := a; q < b; q++ {
				*at(gp, m.col(q)) += {{.Mul "c" "m.val(q)"}}
			}
		}
	}
	return loss, gb
}
`

const evalMulti = `
// {{.Name "evalMulti"}} is Eval's loop for several problems, over the
// weights gathered interleaved (wl[j*K+k]).
func {{.Name "evalMulti"}}{{.TypeParams}}(s *Shard, idx []I,{{.Values}} p *Point, wl []float64, sc *Scratch, out *reduce.Partial) {
	K := p.K()
	{{- if not .Ones}}
	scale := vs.scale
	{{- end}}
	z, coef, gl := sc.z, sc.coef, out.Grad
	r := s.rowsFor(p, 0)
	m := {{.View "s.RowPtr" "idx"}}
	for i := 0; i < s.Rows(); i++ {
		if r.skip(i) {
			continue
		}
		a, b := uintptr(s.RowPtr[i]), uintptr(s.RowPtr[i+1])
		clear(z)
		// Two nonzeros a sweep of z, added in the order one at a time
		// would (the same bits), halve z's loads and stores.
		q := a
		for ; q+2 <= b; q += 2 {
			{{.ColVal "x0" "j0" "q"}}
			{{.ColVal "x1" "j1" "q+1"}}
			w0, w1 := wl[j0*K:j0*K+K], wl[j1*K:j1*K+K]
			w0, w1 = w0[:len(z)], w1[:len(z)]
			for k := range z {
				z[k] = z[k] + {{.Mul "w0[k]" "x0"}} + {{.Mul "w1[k]" "x1"}}
			}
		}
		for ; q < b; q++ {
			{{.ColVal "x" "j" "q"}}
			w := wl[j*K : j*K+K]
			for k := range z {
				z[k] += {{.Mul "w[k]" "x"}}
			}
		}
		{{- if not .Ones}}
		for k := range z {
			z[k] /= scale
		}
		{{- end}}
		addBias(p, z)
		n := margins(p, s.Class[i], z, coef, out.Loss, sc.act)
		if n == 0 {
			continue
		}
		addBiasGrad(p, coef, out.BiasGrad)
		if sc.sparseRow(n, K) {
			act := sc.act[:n]
			{{- if not .Ones}}
			for _, k := range act {
				coef[k] /= scale
			}
			{{- end}}
			for q := a; q < b; q++ {
				{{.ColVal "x" "j" "q"}}
				g := gl[j*K : j*K+K]
				for _, k := range act {
					g[k] += {{.Mul "coef[k]" "x"}}
				}
			}
			continue
		}
		{{- if not .Ones}}
		for k := range coef {
			coef[k] /= scale
		}
		{{- end}}
		q = a
		for ; q+2 <= b; q += 2 { // coef's loads shared by two nonzeros
			{{.ColVal "x0" "j0" "q"}}
			{{.ColVal "x1" "j1" "q+1"}}
			g0, g1 := gl[j0*K:j0*K+K], gl[j1*K:j1*K+K]
			g0, g1 = g0[:len(coef)], g1[:len(coef)]
			for k, c := range coef {
				g0[k] += {{.Mul "c" "x0"}}
				g1[k] += {{.Mul "c" "x1"}}
			}
		}
		for ; q < b; q++ {
			{{.ColVal "x" "j" "q"}}
			g := gl[j*K : j*K+K]
			for k := range coef {
				g[k] += {{.Mul "coef[k]" "x"}}
			}
		}
	}
}
`

const evalDiagBinary = `
// {{.Name "evalDiagBinary"}} is {{.Name "evalBinary"}} with the diagonal:
// the same margins and gradient arithmetic, the gradient and diagonal
// interleaved.
func {{.Name "evalDiagBinary"}}{{.TypeParams}}(rowPtr []uint32, idx []I,{{.Values}} class []int32, r *rows, x vecs) (sums [3]float64) {
	wl, gl, bias, wb := x.w, x.g, x.bias, x.wb
	{{- if not .Ones}}
	inv := 1 / vs.scale
	{{- end}}
	class = class[:len(rowPtr)-1]
	m := {{.View "rowPtr" "idx"}}
	wp := unsafe.Pointer(unsafe.SliceData(wl))
	for i := range class {
		if r.skip(i) {
			continue
		}
		a, b := uintptr(rowPtr[i]), uintptr(rowPtr[i+1])
		z := {{.Inv (print .Dot "(wp, a, b)")}}
		if bias >= 0 {
			z += float64(bias * wb)
		}
		sd := r.side(class[i]) & 1
		l, c, ok := hingeGrad(signs[sd], z, r.w[sd]) // see hingeGrad
		h := r.w[sd]
		if r.loss != SquaredHinge {
			l, c, h, ok = r.otherGradCurv(i, r.y(sd, class[i]), z, r.w[sd])
		} else if ok {
			r.markActive(i, h)
		}
		if ok {
			sums[0] += l
			ci, wi := {{.Inv "c"}}, {{.Inv (.Inv "h")}}
			for q := a; q < b; q++ {
				{{.ColVal "x" "j" "q"}}
				g := gl[2*j : 2*j+2 : 2*j+2]
				g[0] += {{.Mul "ci" "x"}}
				g[1] += {{.Mul "wi" "x" "x"}}
			}
			if bias >= 0 {
				sums[1] += float64(c * bias)
				sums[2] += float64(h * bias * bias)
			}
		}
	}
	return sums
}
`

const evalDiagSeq = `
// evalDiagSeq is EvalDiag's multi-class loop for K = 1, to the bit: the
// margin summed a nonzero at a time (as rowSums does), divided by the
// scale, and the gradient and diagonal coefficients as that loop makes
// them. Through rowInto and rowSums a lone one-vs-rest problem's pass
// decoded every row first. A matrix of ones takes the multi-class loop.
func evalDiagSeq[V value, I colID](rowPtr []uint32, idx []I, vs values[V], class []int32, r *rows, x vecs) (sums [3]float64) {
	wl, gl, bias, wb := x.w, x.g, x.bias, x.wb
	scale := vs.scale
	class = class[:len(rowPtr)-1]
	m := newRowView(rowPtr, idx, vs)
	wp := unsafe.Pointer(unsafe.SliceData(wl))
	for i := range class {
		if r.skip(i) {
			continue
		}
		a, b := uintptr(rowPtr[i]), uintptr(rowPtr[i+1])
		var z float64
		for q := a; q < b; q++ {
			z += float64(m.val(q) * *at(wp, m.col(q)))
		}
		z /= scale
		if bias >= 0 {
			z += float64(bias * wb)
		}
		sd := r.side(class[i]) & 1
		l, c, ok := hingeGrad(signs[sd], z, r.w[sd]) // see hingeGrad
		h := r.w[sd]
		if r.loss != SquaredHinge {
			l, c, h, ok = r.otherGradCurv(i, r.y(sd, class[i]), z, r.w[sd])
		} else if ok {
			r.markActive(i, h)
		}
		if !ok {
			continue
		}
		sums[0] += l
		if bias >= 0 {
			sums[1] += float64(c * bias)
			sums[2] += float64(h * bias * bias)
		}
		coef, dg := c/scale, h/(scale*scale)
		for q := a; q < b; q++ {
			x, j := m.val(q), int(m.col(q))
			g := gl[2*j : 2*j+2 : 2*j+2]
			g[0] += float64(coef * x)
			g[1] += float64(dg * (x * x))
		}
	}
	return sums
}
`

const hessVecBinary = `
// {{.Name "hessVecBinary"}} is HessVec's loop for a binary problem, in
// {{.Name "evalBinary"}}'s arithmetic.
func {{.Name "hessVecBinary"}}{{.TypeParams}}(rowPtr []uint32, idx []I,{{.Values}} class []int32, r *rows, x vecs) (hb float64) {
	wl, vl, hl, bias := x.w, x.v, x.g, x.bias
	zb, tb := x.biasTerms()
	{{- if not .Ones}}
	inv := 1 / vs.scale
	{{- end}}
	class = class[:len(rowPtr)-1]
	m := {{.View "rowPtr" "idx"}}
	wp, vp, hp := unsafe.Pointer(unsafe.SliceData(wl)), unsafe.Pointer(unsafe.SliceData(vl)), unsafe.Pointer(unsafe.SliceData(hl))
	a := uintptr(rowPtr[0])
	for i := range class {
		b := uintptr(rowPtr[i+1])
		if r.skip(i) {
			a = b
			continue
		}
		sd := r.side(class[i]) & 1
		h := r.w[sd]
		if r.known {
			if r.knownInactive(i) {
				a = b
				continue
			}
			h = r.knownWeight(i, h)
		} else {
			z := {{.Inv (print .Dot "(wp, a, b)")}} + zb
			hz, ok := hingeCurv(signs[sd], z, h) // see hingeGrad
			if r.loss != SquaredHinge {
				hz, ok = r.loss.curv(r.y(sd, class[i]), z, h, r.eps)
			}
			if !ok {
				a = b
				continue
			}
			r.markActive(i, hz)
			h = hz
		}
		// a·v inline, in {{.Dot}}'s order.
		var s0, s1, s2, s3 float64
		q := a
		for ; q+4 <= b; q += 4 {
			s0 += {{.Term "vp" "q"}}
			s1 += {{.Term "vp" "q+1"}}
			s2 += {{.Term "vp" "q+2"}}
			s3 += {{.Term "vp" "q+3"}}
		}
		for ; q < b; q++ {
			s0 += {{.Term "vp" "q"}}
		}
		t := float64(({{.Inv "((s0 + s1) + (s2 + s3))"}} + tb) * h)
		ti := {{.Inv "t"}}
		for q = a; q+4 <= b; q += 4 {
			*at(hp, m.col(q)) += {{.Mul "ti" "m.val(q)"}}
			*at(hp, m.col(q+1)) += {{.Mul "ti" "m.val(q+1)"}}
			*at(hp, m.col(q+2)) += {{.Mul "ti" "m.val(q+2)"}}
			*at(hp, m.col(q+3)) += {{.Mul "ti" "m.val(q+3)"}}
		}
		for ; q < b; q++ {
			*at(hp, m.col(q)) += {{.Mul "ti" "m.val(q)"}}
		}
		if bias >= 0 {
			hb += float64(t * bias)
		}
		a = b
	}
	return hb
}
`

const hessVecSeq = `
// {{.Name "hessVecSeq"}} is HessVec's loop for a lone one-vs-rest
// problem: a row's sums in order (the multi-class loop's for one
// problem), where {{.Name "hessVecBinary"}}'s are four-way.
func {{.Name "hessVecSeq"}}{{.TypeParams}}(rowPtr []uint32, idx []I,{{.Values}} class []int32, r *rows, x vecs) (hb float64) {
	wl, vl, hl, bias := x.w, x.v, x.g, x.bias
	zb, tb := x.biasTerms()
	{{- if not .Ones}}
	scale := vs.scale
	{{- end}}
	class = class[:len(rowPtr)-1]
	m := {{.View "rowPtr" "idx"}}
	wp, vp, hp := unsafe.Pointer(unsafe.SliceData(wl)), unsafe.Pointer(unsafe.SliceData(vl)), unsafe.Pointer(unsafe.SliceData(hl))
	for i := range class {
		if r.skip(i) || r.known && r.knownInactive(i) {
			continue
		}
		a, b := uintptr(rowPtr[i]), uintptr(rowPtr[i+1])
		var z, t float64
		if r.known {
			for q := a; q < b; q++ {
				t += {{.Term "vp" "q"}}
			}
		} else {
			for q := a; q < b; q++ {
				{{.ColVal "x" "j" "q"}}
				t += {{.Mul "*at(vp, uintptr(j))" "x"}}
				z += {{.Mul "*at(wp, uintptr(j))" "x"}}
			}
		}
		sd := r.side(class[i]) & 1
		h := r.w[sd]
		if r.known {
			h = r.knownWeight(i, h)
		} else {
			z := {{.Div "z"}} + zb
			hz, ok := hingeCurv(signs[sd], z, h) // see hingeGrad
			if r.loss != SquaredHinge {
				hz, ok = r.loss.curv(r.y(sd, class[i]), z, h, r.eps)
			}
			if !ok {
				continue
			}
			r.markActive(i, hz)
			h = hz
		}
		c := float64(({{.Div "t"}} + tb) * h)
		if bias >= 0 {
			hb += float64(c * bias)
		}
		coef := {{.Div "c"}}
		for q := a; q < b; q++ {
			*at(hp, m.col(q)) += {{.Mul "coef" "m.val(q)"}}
		}
	}
	return hb
}
`

const marginsBinary = `
// {{.Name "marginsBinary"}} writes each row's a·w into z (wl gathered,
// one problem, no bias) in {{.Name "evalBinary"}}'s arithmetic.
func {{.Name "marginsBinary"}}{{.TypeParams}}(rowPtr []uint32, idx []I,{{.Values}} wl, z []float64) {
	m, wp := {{.View "rowPtr" "idx"}}, unsafe.Pointer(unsafe.SliceData(wl))
	{{- if not .Ones}}
	inv := 1 / vs.scale
	{{- end}}
	for i := range z {
		z[i] = {{.Inv (print .Dot "(wp, uintptr(rowPtr[i]), uintptr(rowPtr[i+1]))")}}
	}
}
`
