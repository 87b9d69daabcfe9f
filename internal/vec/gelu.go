package vec

import "math"

// GELU's tanh form: 0.5 x (1 + tanh(u)), u = x (c + c a x^2), with
// c = sqrt(2/pi) and a = 0.044715, and tanh to float32's precision by
// Eigen's rational approximation (odd degree 13 over even degree 6, on u
// clamped to ±7.9053, where tanh rounds to ±1 in float32).
const (
	geluC          = 0.7978845608028654
	geluCA         = geluC * 0.044715
	limit          = 7.90531110763549805
	a1, a3, a5, a7 = 4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05, 5.12229709037114e-08
	a9, a11, a13   = -8.60467152213735e-11, 2.00018790482477e-13, -2.76076847742355e-16
	b0, b2, b4, b6 = 4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04, 1.19825839466702e-06
)

// gradX2Max bounds x^2 in GELU's derivative: beyond |x| = 100, t is ±1
// exactly and 1 - t^2 is 0, and the bound keeps c + 3 c a x^2 finite so that
// the product is 0 rather than 0 * Inf = NaN for |x| above 1.8e19.
const gradX2Max = 1e4

// consts is what the assembly reads: each constant repeated across the
// eight lanes of an AVX2 register, in the order gelu_amd64.h names them.
var consts = func() (k [21][8]float32) {
	for i, v := range []float32{geluC, geluCA, limit, -limit, a13, a11, a9, a7, a5, a3, a1, b6, b4, b2, b0, 0.5, 1, 3 * geluCA, gradX2Max, math.Float32frombits(0x7fffffff), math.Float32frombits(0x80000000)} {
		for j := range k[i] {
			k[i][j] = v
		}
	}
	return k
}()

// Tanh is tanh to float32's precision: within 7 units in the last place of
// math.Tanh, 4e-7 relative; odd, exact at 0, ±1 beyond ±7.9053.
func Tanh(x float32) float32 {
	switch {
	case x >= limit:
		return 1
	case x <= -limit:
		return -1
	}
	x2 := x * x
	p := ((((((a13*x2+a11)*x2+a9)*x2+a7)*x2+a5)*x2+a3)*x2 + a1) * x
	q := ((b6*x2+b4)*x2+b2)*x2 + b0
	return p / q
}

// GELU sets y[i] = GELU(x[i]); y and x have the same length.
func GELU(y, x []float32) {
	y = y[:len(x)] // the assembly writes len(x) elements
	n := span32(len(x))
	if n > 0 {
		active.gelu(&y[0], &x[0], n, &consts)
	}
	for i := n; i < len(x); i++ {
		v := x[i]
		y[i] = 0.5*v + 0.5*v*Tanh(v*(geluC+geluCA*v*v))
	}
}

// GELUGrad sets dx[i] = dy[i] GELU'(x[i]), where
// GELU'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) (c + 3 c a x^2), t = tanh(u);
// dx, x and dy have the same length.
func GELUGrad(dx, x, dy []float32) {
	dx, dy = dx[:len(x)], dy[:len(x)] // the assembly takes len(x) of each
	n := span32(len(x))
	if n > 0 {
		active.geluGrad(&dx[0], &x[0], &dy[0], n, &consts)
	}
	for i := n; i < len(x); i++ {
		v := x[i]
		t := Tanh(v * (geluC + geluCA*v*v))
		dx[i] = dy[i] * (0.5 + 0.5*t + 0.5*v*(1-t*t)*(geluC+3*geluCA*min(v*v, gradX2Max)))
	}
}
