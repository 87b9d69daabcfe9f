package vec

import "math"

// Row operations for layer norm and the softmax gradient: sums, dot
// products and elementwise combinations of short rows. float32 rows run on
// the active assembly (AVX-512 whole rows, AVX2 whole registers of 8 and
// the rest in Go); float64 rows and machines without AVX2 run the Go loops,
// whose sums are split four ways so that the additions overlap.

// Sum returns the sum of x.
func Sum[T float32 | float64](x []T) T {
	var s T
	n := 0
	if x32, ok := any(x).([]float32); ok {
		if n = span32(len(x)); n > 0 {
			s = T(active.sum32(&x32[0], n))
		}
	}
	if n < len(x) {
		s += sum4(x[n:])
	}
	return s
}

// Dot returns the dot product of x and y, which have the same length.
func Dot[T float32 | float64](x, y []T) T {
	y = y[:len(x)]
	var s T
	n := 0
	if x32, ok := any(x).([]float32); ok {
		if n = span32(len(x)); n > 0 {
			s = T(active.dot32(&x32[0], &any(y).([]float32)[0], n))
		}
	}
	if n < len(x) {
		s += dot4(x[n:], y[n:])
	}
	return s
}

// Lin sets y[i] = a x1[i] + b x2[i] + c; y, x1 and x2 have the same length
// and y may be x1 or x2.
func Lin[T float32 | float64](y, x1, x2 []T, a, b, c T) {
	x1, x2 = x1[:len(y)], x2[:len(y)]
	n := 0
	if y32, ok := any(y).([]float32); ok {
		if n = span32(len(y)); n > 0 {
			active.lin32(&y32[0], &any(x1).([]float32)[0], &any(x2).([]float32)[0], n, float32(a), float32(b), float32(c))
		}
	}
	for i := n; i < len(y); i++ {
		y[i] = a*x1[i] + b*x2[i] + c
	}
}

// MulAdd sets y[i] = p[i] q[i] + r[i], or p[i] q[i] with r nil; all have
// y's length and y may be any of them.
func MulAdd[T float32 | float64](y, p, q, r []T) {
	p, q = p[:len(y)], q[:len(y)]
	if r != nil {
		r = r[:len(y)]
	}
	n := 0
	if y32, ok := any(y).([]float32); ok {
		if n = span32(len(y)); n > 0 {
			var r0 *float32
			if r != nil {
				r0 = &any(r).([]float32)[0]
			}
			active.mulAdd32(&y32[0], &any(p).([]float32)[0], &any(q).([]float32)[0], r0, n)
		}
	}
	for i := n; i < len(y); i++ {
		if r != nil {
			y[i] = p[i]*q[i] + r[i]
		} else {
			y[i] = p[i] * q[i]
		}
	}
}

func sum4[T float32 | float64](x []T) T {
	var s0, s1, s2, s3 T
	n := len(x) &^ 3
	for i := 0; i < n; i += 4 {
		s0 += x[i]
		s1 += x[i+1]
		s2 += x[i+2]
		s3 += x[i+3]
	}
	for _, v := range x[n:] {
		s0 += v
	}
	return (s0 + s1) + (s2 + s3)
}

func dot4[T float32 | float64](x, y []T) T {
	var s0, s1, s2, s3 T
	n := len(x) &^ 3
	y = y[:len(x)]
	for i := 0; i < n; i += 4 {
		s0 += x[i] * y[i]
		s1 += x[i+1] * y[i+1]
		s2 += x[i+2] * y[i+2]
		s3 += x[i+3] * y[i+3]
	}
	for i := n; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// AddWiden adds x, widened to float64, to y element by element: the sums
// over rows of a parameter's gradient, kept in float64. Converting
// float32 to float64 one element at a time makes each conversion wait for
// the previous one (CVTSS2SD writes half a register); the kernels convert
// a register's lanes at once. The result is that of the Go loop, bit for
// bit.
func AddWiden[T float32 | float64](y []float64, x []T) {
	y = y[:len(x)]
	n := 0
	if x32, ok := any(x).([]float32); ok {
		if n = span32(len(x)); n > 0 {
			active.addWiden32(&y[0], &x32[0], n)
		}
	}
	for i := n; i < len(x); i++ {
		y[i] += float64(x[i])
	}
}

// ScaleWiden sets x[i] = float32(float64(x[i]) * scale): a float32 gradient
// scaled by a float64 factor (clipping's) with one rounding, to float32.
// Element by element in Go each widening waits for the one before it
// (CVTSS2SD keeps its destination's upper bits); the AVX-512 kernel widens
// eight at once, with the same bits.
func ScaleWiden(x []float32, scale float64) {
	n := 0
	if len(x) > 0 && active != nil && active.scaleWiden32 != nil {
		n = len(x)
		active.scaleWiden32(&x[0], n, scale)
	}
	for i := n; i < len(x); i++ {
		x[i] = float32(float64(x[i]) * scale)
	}
}

// SumSquares returns the sum of (x[i]·scale)² in float64 and the largest
// |x[i]| (a NaN element makes the sum NaN and does not count in the
// largest): a gradient's squared norm, scale rescaling elements whose
// squares would overflow or underflow. The squares go into eight
// float64 lanes, element i into lane i mod 8, each lane a chain of fused
// multiply-adds in element order, and the lanes are added as
// ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)): the order of the kernels
// (eight lanes of a zmm register, or two ymm registers), so that every
// path gives the same bits. One chain per element, the Go loop's, waits
// on the previous addition at every element.
func SumSquares[T float32 | float64](x []T, scale float64) (sum, maxAbs float64) {
	var lanes [8]float64
	n := 0
	switch xs := any(x).(type) {
	case []float32:
		if n = span32(len(xs)); n > 0 {
			lanes, maxAbs = active.sumSquares32(&xs[0], n, scale)
		}
	case []float64:
		if n = span64(len(xs)); n > 0 {
			lanes, maxAbs = active.sumSquares64(&xs[0], n, scale)
		}
	}
	for i := n; i < len(x); i++ {
		y := float64(x[i])
		if a := math.Abs(y); a > maxAbs {
			maxAbs = a
		}
		y *= scale
		lanes[i%8] = math.FMA(y, y, lanes[i%8])
	}
	l := &lanes
	return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])), maxAbs
}

// Max returns the largest element of x, -Inf for an empty x; an x that
// holds a NaN gives a NaN (as math.Max does), whatever the order. Of a +0
// and a -0 it may return either: a softmax's shift, exp(v - max), is the
// same with both.
func Max[T float32 | float64](x []T) T {
	m := T(math.Inf(-1))
	n := 0
	if x32, ok := any(x).([]float32); ok {
		if n = span32(len(x)); n > 0 {
			m = T(active.max32(&x32[0], n))
		}
	}
	for _, v := range x[n:] {
		if v > m || v != v {
			m = v
		}
	}
	return m
}

// MulDiff sets y[i] = p[i]·(q[i] − c)·scale, rounding after each
// operation (the Go expression's bits): the gradient of a softmax's
// scores from that of its weights, c being the row's Σ p·q. y, p and q
// have y's length; y may be p or q.
func MulDiff[T float32 | float64](y, p, q []T, c, scale T) {
	p, q = p[:len(y)], q[:len(y)]
	n := 0
	if y32, ok := any(y).([]float32); ok {
		if n = span32(len(y)); n > 0 {
			active.mulDiff32(&y32[0], &any(p).([]float32)[0], &any(q).([]float32)[0], n, float32(c), float32(scale))
		}
	}
	for i := n; i < len(y); i++ {
		y[i] = p[i] * (q[i] - c) * scale
	}
}

// Normalise sets xhat = (x - mean(x)) * rstd and returns
// rstd = 1/sqrt(var(x) + eps), with the biased variance, the sums in x's
// dtype and the root in float64: LayerNorm's row. The mean is subtracted
// before squaring, so no large mean cancels. The AVX-512 kernel computes
// it in one call with the composed calls' bits (Sum, Lin, Dot, Lin),
// which the other paths make.
func Normalise[T float32 | float64](x, xhat []T, eps float64) T {
	xhat = xhat[:len(x)]
	if x32, ok := any(x).([]float32); ok && len(x) > 0 && active != nil && active.normalise32 != nil {
		return T(active.normalise32(&x32[0], &any(xhat).([]float32)[0], len(x), eps))
	}
	d := T(len(x))
	Lin(xhat, x, x, 1, 0, -Sum(x)/d)
	rstd := T(1 / math.Sqrt(float64(Dot(xhat, xhat)/d)+eps))
	Lin(xhat, xhat, xhat, rstd, 0, 0)
	return rstd
}

// NormGrad is LayerNorm's backward pass over a row, from xhat and rstd
// (Normalise's) and the row's output gradient dy: with g = dy·gain,
//
//	dx = rstd g - rstd mean(g xhat) xhat - rstd mean(g)
//
// then dx += addend where addend is not nil (a residual branch's gradient,
// as an addition after it would add it), and where sumGain is not nil the
// gain's and bias's gradients of the row, dy·xhat and dy, widened and
// added into sumGain and, if not nil, sumBias. g is scratch of the row's
// length. The AVX-512 kernels make it two calls with the composed calls'
// bits (MulAdd, Sum, Dot, Lin, Lin, MulAdd, AddWiden), which the other
// paths make: a LayerNorm's gradient was nine calls a row, and their
// set-ups most of its time at the nanoGPT preset's 128 values.
func NormGrad[T float32 | float64](dx, xhat, dy, gain, g []T, rstd T, addend []T, sumGain, sumBias []float64) {
	d := len(xhat)
	dx, dy, gain, g = dx[:d], dy[:d], gain[:d], g[:d]
	if d > 0 && active != nil && active.normGradSums32 != nil {
		if x32, ok := any(xhat).([]float32); ok {
			dy32, gain32 := any(dy).([]float32), any(gain).([]float32)
			sum, dot := active.normGradSums32(&dy32[0], &gain32[0], &x32[0], d)
			gMean, gxMean := sum/float32(d), dot/float32(d)
			r := float32(rstd)
			var add *float32
			if addend != nil {
				add = &any(addend).([]float32)[:d][0]
			}
			var sg, sb *float64
			if sumGain != nil {
				sg = &sumGain[:d][0]
				if sumBias != nil {
					sb = &sumBias[:d][0]
				}
			}
			active.normGradApply32(&any(dx).([]float32)[0], &dy32[0], &gain32[0], &x32[0], add, sg, sb, d, r, -r*gxMean, -r*gMean)
			return
		}
	}
	normGradCalls(dx, xhat, dy, gain, g, rstd, addend, sumGain, sumBias)
}

// normGradCalls is NormGrad as the calls the AVX-512 kernels stand for.
func normGradCalls[T float32 | float64](dx, xhat, dy, gain, g []T, rstd T, addend []T, sumGain, sumBias []float64) {
	d := len(xhat)
	MulAdd(g, dy, gain, nil)
	gMean, gxMean := Sum(g)/T(d), Dot(g, xhat)/T(d)
	Lin(dx, g, xhat, rstd, -rstd*gxMean, -rstd*gMean)
	if addend != nil {
		Lin(dx, dx, addend, 1, 1, 0)
	}
	if sumGain != nil {
		MulAdd(g, dy, xhat, nil)
		AddWiden(sumGain, g)
		if sumBias != nil {
			AddWiden(sumBias, dy)
		}
	}
}
