package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRows compares Sum, Dot, Lin and MulAdd, on both kernels and in both
// dtypes, with float64 sums and products: within a few roundings of the
// dtype relative to the sum of magnitudes, for lengths around a register.
func TestRows(t *testing.T) {
	t.Run("float32", func(t *testing.T) { testRows[float32](t, 1e-6) })
	t.Run("float64", func(t *testing.T) { testRows[float64](t, 1e-14) })
}

func testRows[T float32 | float64](t *testing.T, tol float64) {
	defer func(v bool) { useAVX2 = v }(useAVX2)
	r := rand.New(rand.NewPCG(7, 8))
	rnd := func(n int) []T {
		x := make([]T, n)
		for i := range x {
			x[i] = T(r.NormFloat64())
		}
		return x
	}
	close := func(got T, want, scale float64) bool { return math.Abs(float64(got)-want) <= tol*(1+scale) }
	for _, avx := range []bool{true, false} {
		if avx && !useAVX2 {
			continue
		}
		useAVX2 = avx
		for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 24, 48, 64, 100} {
			x, y, z := rnd(n), rnd(n), rnd(n)
			var sum, dot, abs, absDot float64
			for i := range x {
				sum += float64(x[i])
				dot += float64(x[i]) * float64(y[i])
				abs += math.Abs(float64(x[i]))
				absDot += math.Abs(float64(x[i]) * float64(y[i]))
			}
			if got := Sum(x); !close(got, sum, abs) {
				t.Errorf("avx=%t n=%d: Sum = %v, want %v", avx, n, got, sum)
			}
			if got := Dot(x, y); !close(got, dot, absDot) {
				t.Errorf("avx=%t n=%d: Dot = %v, want %v", avx, n, got, dot)
			}
			a, b, c := T(0.5), T(-2), T(0.25)
			lin, fma, mul := make([]T, n), make([]T, n), make([]T, n)
			Lin(lin, x, y, a, b, c)
			MulAdd(fma, x, y, z)
			MulAdd(mul, x, y, nil)
			for i := range x {
				xi, yi, zi := float64(x[i]), float64(y[i]), float64(z[i])
				if want := 0.5*xi - 2*yi + 0.25; !close(lin[i], want, math.Abs(0.5*xi)+math.Abs(2*yi)) {
					t.Errorf("avx=%t n=%d: Lin[%d] = %v, want %v", avx, n, i, lin[i], want)
				}
				if want := xi*yi + zi; !close(fma[i], want, math.Abs(xi*yi)+math.Abs(zi)) {
					t.Errorf("avx=%t n=%d: MulAdd[%d] = %v, want %v", avx, n, i, fma[i], want)
				}
				if want := xi * yi; !close(mul[i], want, math.Abs(want)) {
					t.Errorf("avx=%t n=%d: MulAdd(nil)[%d] = %v, want %v", avx, n, i, mul[i], want)
				}
			}
			// In place: y may be one of the inputs.
			in := append([]T(nil), x...)
			Lin(in, in, in, 2, 0, 1)
			for i := range x {
				if !close(in[i], 2*float64(x[i])+1, 2*math.Abs(float64(x[i]))) {
					t.Fatalf("avx=%t n=%d: Lin in place [%d] = %v, want %v", avx, n, i, in[i], 2*float64(x[i])+1)
				}
			}
		}
	}
}
