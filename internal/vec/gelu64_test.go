package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// gelu64MaxULPs is how far GELU64 and GELUGrad64 may be from the formula
// with math.Tanh (gelu64Ref, gelu64GradRef), in float64 units in the last
// place: not at all, since the kernels round as the formula and math.Tanh
// do. The tests log the worst distance they see, so that a kernel which
// gives up exactness shows what it costs.
const gelu64MaxULPs = 0

// gelu64Ref and gelu64GradRef are geluRef and geluGradRef (gelu_test.go),
// the formula with math.Tanh, with each product rounded before it is added
// or subtracted, as Go evaluates them in a default amd64 build. With
// GOAMD64=v3 or on arm64 Go fuses the two, which moves u = c (x + a x^3),
// and so t, by an ulp here and there, and GELU(x) for x below -3 by
// thousands of its ulps where 1 + t cancels: another rounding of the
// formula, no more accurate.
func gelu64Ref(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(geluU(x)))
}

func gelu64GradRef(x float64) float64 {
	t := math.Tanh(geluU(x))
	return float64(0.5*(1+t)) + float64(0.5*x*(1-float64(t*t))*geluC*(1+float64(3*0.044715*x*x)))
}

// ulps64 is how many float64 values lie from want to got (1 for adjacent
// ones), counting across 0, where both zeros are the same; 0 when both are
// NaN, and the most there is when only one is.
func ulps64(got, want float64) float64 {
	if math.IsNaN(got) || math.IsNaN(want) {
		if math.IsNaN(got) && math.IsNaN(want) {
			return 0
		}
		return math.Inf(1)
	}
	// Without the sign bit, a float64's bits count the values from 0 to
	// it; across 0 the counts add.
	g, w := math.Float64bits(got), math.Float64bits(want)
	mg, mw := g&^(1<<63), w&^(1<<63)
	switch {
	case mg == 0 && mw == 0:
		return 0
	case g>>63 != w>>63:
		return float64(mg + mw)
	case mg > mw:
		return float64(mg - mw)
	}
	return float64(mw - mg)
}

// TestULPs64: ulps64 counts adjacent values, across 0 and to Inf, as 1.
func TestULPs64(t *testing.T) {
	for _, c := range []struct{ got, want, ulps float64 }{
		{1, math.Nextafter(1, 2), 1}, {-1, math.Nextafter(-1, -2), 1}, {3, 3, 0},
		{0, math.Copysign(0, -1), 0}, {5e-324, -5e-324, 2}, {math.MaxFloat64, math.Inf(1), 1},
		{math.NaN(), math.NaN(), 0}, {math.NaN(), 1, math.Inf(1)},
	} {
		if got := ulps64(c.got, c.want); got != c.ulps {
			t.Errorf("ulps64(%v, %v) = %v, want %v", c.got, c.want, got, c.ulps)
		}
	}
}

// geluU is the tanh's argument, c (x + a x^3), as the formula rounds it.
func geluU(x float64) float64 { return geluC * (x + float64(0.044715*x*x*x)) }

// geluUInverse returns the largest x >= 0 whose geluU is below u > 0:
// GELU's input where tanh changes branch (u = 0.625) or saturates.
func geluUInverse(u float64) float64 {
	lo, hi := 0.0, u/geluC
	for math.Nextafter(lo, hi) < hi { // geluU(lo) < u <= geluU(hi)
		mid := lo + (hi-lo)/2
		if mid == lo || mid == hi {
			mid = math.Nextafter(lo, hi)
		}
		if geluU(mid) < u {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// gelu64Edges are inputs at the formula's edges, each also negated: 0,
// subnormal and tiny, the neighbours of the x where tanh's argument
// crosses 0.625 and tanhSat, saturation (20, 400), x^3 overflowing
// (1e103: t is ±1, GELU x or -0), x^2 overflowing in the derivative
// (1e160: NaN), the largest float64, Inf (GELU(-Inf) is NaN) and NaN.
var gelu64Edges = func() []float64 {
	xs := []float64{0, 5e-324, 1e-310, 1e-160, 1e-20, 0.624, 0.625, 20, 400, 1e103, 1e160, math.MaxFloat64, math.Inf(1), math.NaN()}
	for _, u := range []float64{tanhSmall, tanhSat} {
		x := geluUInverse(u)
		for range 3 {
			xs = append(xs, x, math.Nextafter(x, math.Inf(1)))
			x = math.Nextafter(x, 0)
		}
	}
	for _, x := range xs {
		xs = append(xs, -x)
	}
	return xs
}()

// gelu64Inputs returns n inputs: one in five an edge, the others from a
// normal of deviation 3, uniform on [-12, 12] (|u| up to 44, past tanhSat)
// or of magnitude log-uniform from 1e-20 to 1e20, with either sign.
func gelu64Inputs(r *rand.Rand, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		switch r.IntN(5) {
		case 0:
			x[i] = gelu64Edges[r.IntN(len(gelu64Edges))]
		case 1, 2:
			x[i] = 3 * r.NormFloat64()
		case 3:
			x[i] = 24*r.Float64() - 12
		default:
			x[i] = math.Copysign(math.Pow(10, 40*r.Float64()-20), r.Float64()-0.5)
		}
	}
	return x
}

// checkGELU64 compares y and dx, GELU64 and GELUGrad64 of x and dy, with
// the formula and returns the worst distances in units in the last place.
func checkGELU64(t *testing.T, x, dy, y, dx []float64) (worstY, worstDX float64) {
	t.Helper()
	for i, v := range x {
		want, wantGrad := gelu64Ref(v), dy[i]*gelu64GradRef(v)
		if d := ulps64(y[i], want); d > worstY {
			worstY = d
			if d > gelu64MaxULPs {
				t.Errorf("GELU64(%v) = %v, want %v (%g ulps)", v, y[i], want, d)
			}
		}
		if d := ulps64(dx[i], wantGrad); d > worstDX {
			worstDX = d
			if d > gelu64MaxULPs {
				t.Errorf("GELUGrad64(%v, dy %v) = %v, want %v (%g ulps)", v, dy[i], dx[i], wantGrad, d)
			}
		}
	}
	return worstY, worstDX
}

// TestGELU64 runs each path on every length to 40 and longer rows, at
// several offsets, with inputs at other offsets than the outputs and
// canaries around the outputs, edges among the inputs and edges (0, -Inf,
// NaN, 1e300) among the dy.
func TestGELU64(t *testing.T) {
	var ns []int
	for n := range 41 {
		ns = append(ns, n)
	}
	ns = append(ns, 64, 255, 1001, 4099)
	forEachPath(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		for _, n := range ns {
			for _, off := range offsets {
				x, _ := guarded[float64](n, (off+1)%4)
				dy, _ := guarded[float64](n, (off+2)%4)
				copy(x, gelu64Inputs(r, n))
				for i := range dy {
					dy[i] = r.NormFloat64()
					if r.IntN(10) == 0 {
						dy[i] = []float64{0, math.Inf(-1), math.NaN(), 1e300}[r.IntN(4)]
					}
				}
				y, checkY := guarded[float64](n, off)
				dx, checkDX := guarded[float64](n, off)
				GELU64(y, x)
				GELUGrad64(dx, x, dy)
				checkY(t)
				checkDX(t)
				checkGELU64(t, x, dy, y, dx)
			}
		}
	})
}

// TestGELU64Precision runs each path on a million inputs, the edges and
// gelu64Inputs' mix, with dy = 1, and logs the worst distances from the
// formula.
func TestGELU64Precision(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	x := append(gelu64Inputs(r, 1<<20), gelu64Edges...)
	dy := make([]float64, len(x))
	for i := range dy {
		dy[i] = 1
	}
	y, dx := make([]float64, len(x)), make([]float64, len(x))
	forEachPath(t, func(t *testing.T) {
		GELU64(y, x)
		GELUGrad64(dx, x, dy)
		worstY, worstDX := checkGELU64(t, x, dy, y, dx)
		t.Logf("worst: GELU64 %g ulps, GELUGrad64 %g ulps", worstY, worstDX)
	})
}

// TestGELU64ShortPanics: on each path, an output or dy shorter than x
// panics instead of the assembly writing or reading past its end.
func TestGELU64ShortPanics(t *testing.T) {
	x, short := make([]float64, 40), make([]float64, 20)
	calls := map[string]func(){
		"GELU64":        func() { GELU64(short, x) },
		"GELUGrad64 dx": func() { GELUGrad64(short, x, x) },
		"GELUGrad64 dy": func() { GELUGrad64(x, x, short) },
	}
	forEachPath(t, func(t *testing.T) {
		for name, f := range calls {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s with a short slice did not panic", name)
					}
				}()
				f()
			}()
		}
	})
}

// BenchmarkGELU64 runs GELU64 and GELUGrad64 at the default model's
// feed-forward size (64 x 12 x 192) on every path, side by side
// (GELU64/path); the Go path is the math.Tanh loop the kernels replace.
func BenchmarkGELU64(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 64 * 12 * 192
	x, dy, out := make([]float64, n), make([]float64, n), make([]float64, n)
	for i := range x {
		x[i], dy[i] = 3*r.NormFloat64(), r.NormFloat64()
	}
	for _, k := range []struct {
		name string
		run  func()
	}{
		{"GELU64", func() { GELU64(out, x) }},
		{"GELUGrad64", func() { GELUGrad64(out, x, dy) }},
	} {
		for _, path := range paths() {
			b.Run(fmt.Sprintf("%s/%s", k.name, path.name), func(b *testing.B) {
				usePath(b, path.set)
				for b.Loop() {
					k.run()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/element")
			})
		}
	}
}
