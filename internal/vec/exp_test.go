package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestExpShiftSum compares both kernels with math.Exp: within 2 float32
// units in the last place where the result is a normal float32, exactly 0
// below the clamp and for -Inf, NaN for NaN, and the sum, where float32
// holds it, within 1e-6 of the float64 sum.
func TestExpShiftSum(t *testing.T) {
	defer func(v bool) { useAVX2 = v }(useAVX2)
	r := rand.New(rand.NewPCG(5, 6))
	edges := []float32{float32(math.Inf(-1)), -200, -87.4, -87.3, -50, -1e-7, 0, 1e-7, 0.3466, 0.3467, 1, 40, 88.37}
	for _, avx := range []bool{true, false} {
		if avx && !useAVX2 {
			continue
		}
		useAVX2 = avx
		worst := 0.0
		for _, n := range []int{0, 1, 7, 8, 9, 16, 33, 1000} {
			for _, shift := range []float32{0, 3.5, -2} {
				x := make([]float32, n)
				for i := range x {
					if i%4 == 3 {
						x[i] = edges[i%len(edges)] + shift
					} else {
						x[i] = float32(r.Float64()*180-95) + shift
					}
				}
				y := make([]float32, n)
				sum := ExpShiftSum(y, x, shift)
				var want64 float64
				for i, v := range x {
					want := math.Exp(float64(v - shift))
					want64 += float64(float32(want))
					switch {
					case float64(v-shift) < -87.34 && y[i] != 0:
						t.Errorf("avx=%t: exp(%v) = %v, want 0 below the clamp", avx, v-shift, y[i])
					case want >= 0x1p-126 && want < math.MaxFloat32:
						ulp := math.Abs(float64(math.Nextafter32(float32(want), float32(math.Inf(1)))) - float64(float32(want)))
						worst = math.Max(worst, math.Abs(float64(y[i])-want)/ulp)
					}
				}
				if d := math.Abs(float64(sum) - want64); want64 < math.MaxFloat32 && !(d <= 1e-6*want64) {
					t.Errorf("avx=%t n=%d: sum %v, want %v", avx, n, sum, want64)
				}
			}
		}
		if worst > 2 {
			t.Errorf("avx=%t: up to %.2f units in the last place from math.Exp, want at most 2", avx, worst)
		}
		nan := []float32{float32(math.NaN()), 0, 0, 0, 0, 0, 0, 0, 0}
		y := make([]float32, len(nan))
		if ExpShiftSum(y, nan, 0); y[0] == y[0] || y[1] != 1 {
			t.Errorf("avx=%t: exp(NaN, 0) = %v, %v; want NaN, 1", avx, y[0], y[1])
		}
	}
}

// BenchmarkExpShiftSum is a softmax row's exponentials at 32 keys.
func BenchmarkExpShiftSum(b *testing.B) {
	x := make([]float32, 32)
	for i := range x {
		x[i] = float32(i) * -0.3
	}
	y := make([]float32, len(x))
	for b.Loop() {
		ExpShiftSum(y, x, 0.5)
	}
}
