package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestExpShiftSum compares each path with math.Exp: within 2 float32 units
// in the last place where the result is a normal float32, exactly 0 below
// the clamp and for -Inf (a hidden key), NaN for NaN, and the sum, where
// float32 holds it, within 1e-6 of the float64 sum of the float32 values.
func TestExpShiftSum(t *testing.T) {
	edges := []float32{float32(math.Inf(-1)), -200, -87.4, -87.3, -50, -1e-7, 0, 1e-7, 0.3466, 0.3467, 1, 40, 88.37}
	forEachPath(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		worst := 0.0
		for _, n := range lengths {
			for _, shift := range []float32{0, 3.5, -2} {
				for _, off := range offsets {
					x, _ := guarded[float32](n, (off+1)%4) // at another offset than y
					for i := range x {
						if i%4 == 3 {
							x[i] = edges[i%len(edges)] + shift
						} else {
							x[i] = float32(r.Float64()*180-95) + shift
						}
					}
					y, check := guarded[float32](n, off)
					sum := ExpShiftSum(y, x, shift)
					check(t)
					var want64 float64
					for i, v := range x {
						want := math.Exp(float64(v - shift))
						want64 += float64(float32(want))
						switch {
						case float64(v-shift) < -87.34 && y[i] != 0:
							t.Errorf("exp(%v) = %v, want 0 below the clamp", v-shift, y[i])
						case want >= 0x1p-126 && want < math.MaxFloat32:
							worst = math.Max(worst, ulps(y[i], want))
						}
					}
					// The exponentials below the smallest normal float32
					// are 0, hence the absolute tolerance.
					if d := math.Abs(float64(sum) - want64); want64 < math.MaxFloat32 && !(d <= 1e-6*want64+float64(n)*0x1p-126) {
						t.Errorf("n=%d: sum %v, want %v", n, sum, want64)
					}
				}
			}
		}
		if worst > 2 {
			t.Errorf("up to %.2f units in the last place from math.Exp, want at most 2", worst)
		}
		// A row of hidden keys but its maximum, and NaN.
		for _, n := range []int{1, 5, 16, 17, 40} {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(math.Inf(-1))
			}
			x[n-1] = 2
			y := make([]float32, n)
			if sum := ExpShiftSum(y, x, 2); sum != 1 || y[n-1] != 1 {
				t.Errorf("n=%d: one visible key of %d: sum %v, its exp %v; want 1, 1", n, n, sum, y[n-1])
			}
			for i, v := range y[:n-1] {
				if v != 0 || math.Signbit(float64(v)) {
					t.Errorf("n=%d: hidden key %d: exp %v, want +0", n, i, v)
				}
			}
		}
		nan := make([]float32, 17)
		nan[0], nan[16] = float32(math.NaN()), float32(math.NaN())
		y := make([]float32, len(nan))
		if ExpShiftSum(y, nan, 0); y[0] == y[0] || y[16] == y[16] || y[1] != 1 {
			t.Errorf("exp(NaN, 0, ..., NaN) = %v, %v, ..., %v; want NaN, 1, ..., NaN", y[0], y[1], y[16])
		}
	})
}
