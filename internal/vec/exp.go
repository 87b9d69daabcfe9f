package vec

import "math"

// expConsts is what the exponential's assembly reads, each constant repeated
// across an AVX2 register's eight lanes: the clamps (exp overflows float32
// above hi and is below the smallest normal float32 under lo), log2(e), ln 2
// in two parts (Cody and Waite's range reduction), Cephes's degree-5
// polynomial for e^r on |r| <= ln(2)/2, 1, and the exponent bias 127 as an
// int32.
var expConsts = func() (k [13][8]float32) {
	for i, v := range []float32{
		88.3762626647949, -87.33654475, 1.44269504088896341, 0.693359375, -2.12194440e-4,
		1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1,
		1, math.Float32frombits(127),
	} {
		for j := range k[i] {
			k[i][j] = v
		}
	}
	return k
}()

// ExpShiftSum sets y[i] = exp(x[i] - shift) and returns the sum of the y[i]:
// a softmax row's exponentials and their total, with shift its maximum. y
// and x have the same length and may be the same slice. The assembly is
// within 2 float32 units in the last place of math.Exp (TestExpShiftSum),
// sums in float32 across a register's lanes, and gives exactly 0 where
// x - shift is below -87.34 (a hidden entry's -Inf included) and NaN for
// NaN.
func ExpShiftSum(y, x []float32, shift float32) float32 {
	y = y[:len(x)] // the assembly writes len(x) elements
	var sum float32
	n := span32(len(x))
	if n > 0 {
		sum = active.expShiftSum(&y[0], &x[0], n, shift, &expConsts)
	}
	for i := n; i < len(x); i++ {
		v := x[i] - shift
		y[i] = float32(math.Exp(float64(v)))
		if v < expConsts[1][0] { // as the assembly: 0 below the smallest normal
			y[i] = 0
		}
		sum += y[i]
	}
	return sum
}
