package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// geluRef and geluGradRef are the formulas in float64 with math.Tanh.
func geluRef(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

func geluGradRef(x float64) float64 {
	c := math.Sqrt(2 / math.Pi)
	t := math.Tanh(c * (x + 0.044715*x*x*x))
	return 0.5*(1+t) + 0.5*x*(1-t*t)*c*(1+3*0.044715*x*x)
}

// inputs are lengths around the 8 lanes, with values from a wide normal
// and the edges: zeros, saturation, huge.
func inputs(r *rand.Rand, n int) []float32 {
	edges := []float32{0, float32(math.Copysign(0, -1)), 7.9, -7.9, 8, -8, 30, -30, 1e30, -1e30, 1e-30}
	x := make([]float32, n)
	for i := range x {
		if i%5 == 4 {
			x[i] = edges[i%len(edges)]
		} else {
			x[i] = float32(3 * r.NormFloat64())
		}
	}
	return x
}

// TestGELU compares each path with float64 GELU and its derivative. GELU
// is within 1e-6 absolute plus 4e-6 relative, a few float32 roundings; the
// derivative within 1e-5 |dy| plus 4e-6 relative, since near x = -4 it is
// 1 + t and 1 - t^2 with t near -1, where float32's tanh has 4e-7 absolute
// error and the x^3 slope multiplies it.
func TestGELU(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		for _, n := range lengths {
			for _, off := range offsets {
				// The inputs at other offsets than the outputs.
				x, _ := guarded[float32](n, (off+1)%4)
				dy, _ := guarded[float32](n, (off+2)%4)
				copy(x, inputs(r, n))
				copy(dy, inputs(r, n))
				for i := range dy {
					dy[i] = min(max(dy[i], -10), 10)
				}
				y, checkY := guarded[float32](n, off)
				dx, checkDX := guarded[float32](n, off)
				GELU(y, x)
				GELUGrad(dx, x, dy)
				checkY(t)
				checkDX(t)
				for i, v := range x {
					want, wantGrad := geluRef(float64(v)), float64(dy[i])*geluGradRef(float64(v))
					if d := math.Abs(float64(y[i]) - want); !(d <= 1e-6+4e-6*math.Abs(want)) {
						t.Errorf("n=%d: GELU(%v) = %v, want %v", n, v, y[i], want)
					}
					if d := math.Abs(float64(dx[i]) - wantGrad); !(d <= 1e-5*math.Abs(float64(dy[i]))+4e-6*math.Abs(wantGrad)) {
						t.Errorf("n=%d: GELU'(%v) * %v = %v, want %v", n, v, dy[i], dx[i], wantGrad)
					}
				}
			}
		}
	})
}

// TestGELUNaN: on each path, a NaN input gives NaN, not the clamped
// tanh's finite value, in a full block and a partial one.
func TestGELUNaN(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		x := make([]float32, 25)
		for i := range x {
			x[i] = float32(math.NaN())
		}
		y, dx := make([]float32, len(x)), make([]float32, len(x))
		GELU(y, x)
		GELUGrad(dx, x, x)
		for i := range y {
			if y[i] == y[i] || dx[i] == dx[i] {
				t.Errorf("element %d: GELU(NaN) = %v, gradient %v, want NaN", i, y[i], dx[i])
			}
		}
	})
}

// TestTanh: within 7 float32 units in the last place of math.Tanh from -20
// to 20, odd, exact at 0, and ±1 when saturated.
func TestTanh(t *testing.T) {
	worst := 0.0
	for i := -2_000_000; i <= 2_000_000; i++ {
		x := float32(float64(i) * 1e-5)
		got, want := float64(Tanh(x)), float64(float32(math.Tanh(float64(x))))
		ulp := math.Abs(float64(math.Nextafter32(float32(want), 2)) - want)
		worst = math.Max(worst, math.Abs(got-want)/ulp)
		if float64(Tanh(-x)) != -got {
			t.Fatalf("Tanh(%v) = %v but Tanh(%v) = %v", x, got, -x, Tanh(-x))
		}
	}
	if worst > 7 {
		t.Errorf("Tanh is up to %.1f units in the last place from math.Tanh, want at most 7", worst)
	}
	if Tanh(0) != 0 || Tanh(100) != 1 || Tanh(float32(math.Inf(-1))) != -1 {
		t.Errorf("Tanh(0, 100, -Inf) = %v, %v, %v; want 0, 1, -1", Tanh(0), Tanh(100), Tanh(float32(math.Inf(-1))))
	}
}
