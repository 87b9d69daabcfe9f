package vec

import "math"

// geluA is the cubic's coefficient in GELU's tanh form; geluC, sqrt(2/pi),
// is gelu.go's.
const geluA = 0.044715

// The float64 assembly's tanh(u) is math.Tanh's algorithm (math/tanh.go)
// with math.Exp's on amd64 (math/exp_amd64.s, its FMA path): Cephes'
// rational u + u s P(s)/Q(s), s = u^2, for |u| < 0.625; 1 - 2/(exp(2|u|)+1)
// with u's sign up to |u| = tanhSat, ±1 beyond. exp(v) is 2^m e^r with
// m = round(v log2 e), r = v - m ln 2 (ln 2 in two parts, Cody and Waite),
// and e^r = (e^(r/16))^16: a degree-8 Taylor polynomial in r/16, then
// four squarings, each as e (e + 2) on e = e^(...) - 1.
const (
	tanhSmall        = 0.625
	tanhSat          = 0.5 * 8.8029691931113054295988e+01 // half of math.Tanh's MAXLOG, log(2^127)
	tanhP0, tanhP1   = -9.64399179425052238628e-1, -9.92877231001918586564e1
	tanhP2           = -1.61468768441708447952e3
	tanhQ0, tanhQ1   = 1.12811678491632931402e2, 2.23548839060100448583e3
	tanhQ2           = 4.84406305325125486048e3
	expLog2E         = 1.4426950408889634073599246810018920
	expLn2U, expLn2L = 0.69314718055966295651160180568695068359375, 0.28235290563031577122588448175013436025525412068e-12
	expE8, expE7     = 2.4801587301587301587e-5, 1.9841269841269841270e-4
	expE6, expE5     = 1.3888888888888888889e-3, 8.3333333333333333333e-3
	expE4, expE3     = 4.1666666666666666667e-2, 1.6666666666666666667e-1
	// expBias is 1.5 * 2^52 + 1023: adding it to an integer m below 2^51
	// leaves m + 1023 in the low bits, which shifted left by 52 are the
	// bits of 2^m.
	expBias = 1<<52 + 1<<51 + 1023
)

// gelu64Table is what the float64 assembly reads: each constant repeated
// across the four lanes of an AVX2 register, in the order gelu64_amd64.h
// names them.
type gelu64Table [27][4]float64

// gelu64Consts is the one gelu64Table, for every call.
var gelu64Consts = func() (k gelu64Table) {
	for i, v := range []float64{
		geluC, geluA, 0.5, 1, 2, 3 * geluA,
		math.Float64frombits(1<<63 - 1), math.Float64frombits(1 << 63), tanhSmall, tanhSat,
		tanhP0, tanhP1, tanhP2, tanhQ0, tanhQ1, tanhQ2,
		expLog2E, expLn2U, expLn2L, 1.0 / 16, expE8, expE7, expE6, expE5, expE4, expE3, expBias,
	} {
		for j := range k[i] {
			k[i][j] = v
		}
	}
	return k
}()

// GELU64 sets y[i] = 0.5 x (1 + tanh(c (x + a x^3))), x = x[i], the float64
// GELU of graph's activations: c = sqrt(2/pi), a = 0.044715. One element at
// a time with math.Tanh it took two fifths of a float64 training step. The
// assembly rounds each operation as Go rounds the formula (each product
// before it is added) and as math.Tanh and math.Exp do on amd64, so every
// path gives the bits of the formula with math.Tanh, which float64 models
// are checked with against PyTorch and finite differences. Like the
// formula, it gives x for large positive x, -0 for large negative x, and
// NaN for -Inf and NaN. y and x have the same length.
func GELU64(y, x []float64) { gelu64(y, x, nil) }

// GELUGrad64 sets dx[i] = dy[i] (0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2)),
// t = tanh(c (x + a x^3)), x = x[i]: GELU64's derivative times dy, rounded
// as GELU64 is, so that gradient checks see the same function as the
// forward pass. As in the formula, |x| above 3.66e154 (3 a x^2 overflows,
// times 1 - t^2 = 0) and ±Inf give NaN. dx, x and dy have the same length.
func GELUGrad64(dx, x, dy []float64) { gelu64(dx, x, dy[:len(x)]) }

// gelu64 is GELU64 with dy nil, GELUGrad64 otherwise: the active assembly
// on the longest prefix it takes, the formula with math.Tanh on the rest.
func gelu64(y, x, dy []float64) {
	y = y[:len(x)] // the assembly writes len(x) elements
	n := span64(len(x))
	if n > 0 {
		var dy0 *float64
		if dy != nil {
			dy0 = &dy[0]
		}
		active.gelu64(&y[0], &x[0], dy0, n, &gelu64Consts)
	}
	// float64(p) rounds the product p before it is added or subtracted, as
	// the assembly does: Go fuses the two with GOAMD64=v3 and on arm64.
	for i := n; i < len(x); i++ {
		v := x[i]
		t := math.Tanh(geluC * (v + float64(geluA*v*v*v)))
		if dy == nil {
			y[i] = 0.5 * v * (1 + t)
		} else {
			y[i] = dy[i] * (float64(0.5*(1+t)) + float64(0.5*v*(1-float64(t*t))*geluC*(1+float64(3*geluA*v*v))))
		}
	}
}
