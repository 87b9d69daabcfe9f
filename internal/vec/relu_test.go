package vec

import (
	"math"
	"testing"
)

// TestReLU checks each path in both dtypes against the definition over
// the test lengths and offsets and the edge values; NaN must stay NaN, and
// -0 may come out as -0 (VMAXPS returns x when both are zeros).
func TestReLU(t *testing.T) {
	t.Run("float32", func(t *testing.T) { forEachPath(t, testReLU[float32]) })
	t.Run("float64", func(t *testing.T) { forEachPath(t, testReLU[float64]) })
}

func testReLU[T float32 | float64](t *testing.T) {
	edges := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), 1e-40, -1e-40, 2.5, -2.5, -7}
	for _, n := range lengths {
		for _, off := range offsets {
			x, _ := guarded[T](n, (off+1)%4) // the inputs at other offsets than the outputs
			dy, _ := guarded[T](n, (off+2)%4)
			for i := range x {
				x[i], dy[i] = T(edges[(i+off)%len(edges)]), T(i+1)
			}
			y, checkY := guarded[T](n, off)
			dx, checkDX := guarded[T](n, off)
			ReLU(y, x)
			ReLUGrad(dx, x, dy)
			checkY(t)
			checkDX(t)
			for i, v := range x {
				want, wantGrad := T(0), T(0)
				if v > 0 {
					want, wantGrad = v, dy[i]
				}
				if v != v {
					want = v
				}
				if (y[i] != want && !(y[i] != y[i] && want != want)) || dx[i] != wantGrad {
					t.Errorf("n=%d: ReLU(%v) = %v with gradient %v, want %v and %v", n, v, y[i], dx[i], want, wantGrad)
				}
			}
		}
	}
}
