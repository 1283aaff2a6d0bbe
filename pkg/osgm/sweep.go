package osgm

// L-BFGS's two-loop recursion alternates a dot product with a vector
// update over the same direction; on one-vs-rest data (20 problems of 39k
// coordinates on news20.t) it is most of the coordinator's own time. The
// sweeps below do an update and the next dot product in one pass over the
// direction. Their dot products add up in the order of gonum's amd64
// DotUnitary (four running sums: elements 4i, 4i+1, 4i+2, 4i+3, the tail
// into the first, then (s0+s2)+(s1+s3)), and their updates round as its
// AxpyUnitary does, so the results are floats.Dot's and floats.AddScaled's
// to the bit on amd64 (TestSweepsMatchGonum), and the same on every
// platform. The float64 conversions forbid fused
// multiply-adds, which would round differently.

// dotSum finishes a sum kept as dotUnitary keeps it.
func dotSum(s0, s1, s2, s3 float64) float64 { return (s0 + s2) + (s1 + s3) }

// copyDot copies src into dst and returns s·src.
func copyDot(dst, src, s []float64) float64 {
	n := len(dst)
	src, s = src[:n], s[:n]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= n; i += 4 {
		dst[i], dst[i+1], dst[i+2], dst[i+3] = src[i], src[i+1], src[i+2], src[i+3]
		s0 += float64(s[i] * src[i])
		s1 += float64(s[i+1] * src[i+1])
		s2 += float64(s[i+2] * src[i+2])
		s3 += float64(s[i+3] * src[i+3])
	}
	for ; i < n; i++ {
		dst[i] = src[i]
		s0 += float64(s[i] * src[i])
	}
	return dotSum(s0, s1, s2, s3)
}

// axpyDot sets d += a*x and returns s·d (the new d): axpyScaleDot with
// c = 1, which rounds nothing.
func axpyDot(d []float64, a float64, x, s []float64) float64 { return axpyScaleDot(d, a, x, 1, s) }

// axpyScaleDot sets d = c*(d + a*x) and returns s·d (the new d).
func axpyScaleDot(d []float64, a float64, x []float64, c float64, s []float64) float64 {
	n := len(d)
	x, s = x[:n], s[:n]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= n; i += 4 {
		d0 := float64(c * float64(d[i]+float64(a*x[i])))
		d1 := float64(c * float64(d[i+1]+float64(a*x[i+1])))
		d2 := float64(c * float64(d[i+2]+float64(a*x[i+2])))
		d3 := float64(c * float64(d[i+3]+float64(a*x[i+3])))
		d[i], d[i+1], d[i+2], d[i+3] = d0, d1, d2, d3
		s0 += float64(s[i] * d0)
		s1 += float64(s[i+1] * d1)
		s2 += float64(s[i+2] * d2)
		s3 += float64(s[i+3] * d3)
	}
	for ; i < n; i++ {
		di := float64(c * float64(d[i]+float64(a*x[i])))
		d[i] = di
		s0 += float64(s[i] * di)
	}
	return dotSum(s0, s1, s2, s3)
}

// pairDots sets s = xt - x, y = gt - g and g = gt, and returns s·y and
// y·y: the curvature pair L-BFGS keeps, and what it is judged by.
func pairDots(s, y, xt, x, gt, g []float64) (sy, yy float64) {
	n := len(s)
	y, xt, x, gt, g = y[:n], xt[:n], x[:n], gt[:n], g[:n]
	var a0, a1, a2, a3, b0, b1, b2, b3 float64
	i := 0
	for ; i+4 <= n; i += 4 {
		s0, s1, s2, s3 := xt[i]-x[i], xt[i+1]-x[i+1], xt[i+2]-x[i+2], xt[i+3]-x[i+3]
		y0, y1, y2, y3 := gt[i]-g[i], gt[i+1]-g[i+1], gt[i+2]-g[i+2], gt[i+3]-g[i+3]
		s[i], s[i+1], s[i+2], s[i+3] = s0, s1, s2, s3
		y[i], y[i+1], y[i+2], y[i+3] = y0, y1, y2, y3
		g[i], g[i+1], g[i+2], g[i+3] = gt[i], gt[i+1], gt[i+2], gt[i+3]
		a0 += float64(s0 * y0)
		a1 += float64(s1 * y1)
		a2 += float64(s2 * y2)
		a3 += float64(s3 * y3)
		b0 += float64(y0 * y0)
		b1 += float64(y1 * y1)
		b2 += float64(y2 * y2)
		b3 += float64(y3 * y3)
	}
	for ; i < n; i++ {
		si, yi := xt[i]-x[i], gt[i]-g[i]
		s[i], y[i], g[i] = si, yi, gt[i]
		a0 += float64(si * yi)
		b0 += float64(yi * yi)
	}
	return dotSum(a0, a1, a2, a3), dotSum(b0, b1, b2, b3)
}
