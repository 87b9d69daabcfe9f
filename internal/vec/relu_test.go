package vec

import (
	"math"
	"testing"
)

// TestReLU checks both kernels in both dtypes against the definition over
// lengths around a register and the edge values; NaN must stay NaN, and
// -0 may come out as -0 (VMAXPS returns x when both are zeros).
func TestReLU(t *testing.T) {
	t.Run("float32", func(t *testing.T) { testReLU[float32](t) })
	t.Run("float64", func(t *testing.T) { testReLU[float64](t) })
}

func testReLU[T float32 | float64](t *testing.T) {
	defer func(v bool) { useAVX2 = v }(useAVX2)
	edges := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), 1e-40, -1e-40, 2.5, -2.5}
	for _, avx := range []bool{true, false} {
		if avx && !useAVX2 {
			continue
		}
		useAVX2 = avx
		for _, n := range []int{0, 1, 3, 4, 5, 8, 9, 17, 100} {
			x, dy := make([]T, n), make([]T, n)
			for i := range x {
				x[i], dy[i] = T(edges[i%len(edges)]), T(i+1)
			}
			y, dx := make([]T, n), make([]T, n)
			ReLU(y, x)
			ReLUGrad(dx, x, dy)
			for i, v := range x {
				want, wantGrad := T(0), T(0)
				if v > 0 {
					want, wantGrad = v, dy[i]
				}
				if v != v {
					want = v
				}
				if (y[i] != want && !(y[i] != y[i] && want != want)) || dx[i] != wantGrad {
					t.Errorf("avx=%t n=%d: ReLU(%v) = %v with gradient %v, want %v and %v", avx, n, v, y[i], dx[i], want, wantGrad)
				}
			}
		}
	}
}
