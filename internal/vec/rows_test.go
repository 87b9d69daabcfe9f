package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRows compares Sum, Dot, Lin and MulAdd, on each path and in both
// dtypes, with float64 sums and products: within a few roundings of the
// dtype relative to the sum of magnitudes, over the test lengths and
// offsets. A sum is also the same bit for bit wherever its row starts: the
// order of its additions depends on the path and the length only.
func TestRows(t *testing.T) {
	t.Run("float32", func(t *testing.T) { forEachPath(t, func(t *testing.T) { testRows[float32](t, 1e-6) }) })
	t.Run("float64", func(t *testing.T) { forEachPath(t, func(t *testing.T) { testRows[float64](t, 1e-14) }) })
}

func testRows[T float32 | float64](t *testing.T, tol float64) {
	r := rand.New(rand.NewPCG(7, 8))
	rnd := func(n int) []T {
		x := make([]T, n)
		for i := range x {
			x[i] = T(r.NormFloat64())
		}
		return x
	}
	close := func(got T, want, scale float64) bool { return math.Abs(float64(got)-want) <= tol*(1+scale) }
	for _, n := range lengths {
		x, y, z := rnd(n), rnd(n), rnd(n)
		var sum, dot, abs, absDot float64
		for i := range x {
			sum += float64(x[i])
			dot += float64(x[i]) * float64(y[i])
			abs += math.Abs(float64(x[i]))
			absDot += math.Abs(float64(x[i]) * float64(y[i]))
		}
		gotSum, gotDot := Sum(x), Dot(x, y)
		if !close(gotSum, sum, abs) {
			t.Errorf("n=%d: Sum = %v, want %v", n, gotSum, sum)
		}
		if !close(gotDot, dot, absDot) {
			t.Errorf("n=%d: Dot = %v, want %v", n, gotDot, dot)
		}
		for _, off := range offsets {
			// The same rows elsewhere in memory.
			xo, _ := guarded[T](n, off)
			yo, _ := guarded[T](n, (off+1)%4)
			copy(xo, x)
			copy(yo, y)
			if s, d := Sum(xo), Dot(xo, yo); s != gotSum || d != gotDot {
				t.Errorf("n=%d offset %d: Sum, Dot = %v, %v; at offset 0 %v, %v", n, off, s, d, gotSum, gotDot)
			}
			a, b, c := T(0.5), T(-2), T(0.25)
			lin, checkLin := guarded[T](n, off)
			fma, checkFMA := guarded[T](n, off)
			mul, checkMul := guarded[T](n, off)
			Lin(lin, x, y, a, b, c)
			MulAdd(fma, x, y, z)
			MulAdd(mul, x, y, nil)
			checkLin(t)
			checkFMA(t)
			checkMul(t)
			for i := range x {
				xi, yi, zi := float64(x[i]), float64(y[i]), float64(z[i])
				if want := 0.5*xi - 2*yi + 0.25; !close(lin[i], want, math.Abs(0.5*xi)+math.Abs(2*yi)) {
					t.Errorf("n=%d: Lin[%d] = %v, want %v", n, i, lin[i], want)
				}
				if want := xi*yi + zi; !close(fma[i], want, math.Abs(xi*yi)+math.Abs(zi)) {
					t.Errorf("n=%d: MulAdd[%d] = %v, want %v", n, i, fma[i], want)
				}
				if want := xi * yi; !close(mul[i], want, math.Abs(want)) {
					t.Errorf("n=%d: MulAdd(nil)[%d] = %v, want %v", n, i, mul[i], want)
				}
			}
		}
		// In place: y may be one of the inputs.
		in := append([]T(nil), x...)
		Lin(in, in, in, 2, 0, 1)
		for i := range x {
			if !close(in[i], 2*float64(x[i])+1, 2*math.Abs(float64(x[i]))) {
				t.Fatalf("n=%d: Lin in place [%d] = %v, want %v", n, i, in[i], 2*float64(x[i])+1)
			}
		}
		in = append(in[:0], x...)
		MulAdd(in, in, in, in)
		for i := range x {
			xi := float64(x[i])
			if !close(in[i], xi*xi+xi, xi*xi+math.Abs(xi)) {
				t.Fatalf("n=%d: MulAdd in place [%d] = %v, want %v", n, i, in[i], xi*xi+xi)
			}
		}
	}
}

// TestAddWiden: AddWiden gives the Go loop's y[i] += float64(x[i]) bit for
// bit on every path, length and offset, and writes nothing outside y.
func TestAddWiden(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		for _, n := range lengths {
			for _, off := range offsets {
				x, _ := guarded[float32](n, (off+2)%4)
				y, check := guarded[float64](n, off)
				want := make([]float64, n)
				for i := range x {
					x[i] = float32(r.NormFloat64())
					y[i] = r.NormFloat64() * 1e3
					want[i] = y[i] + float64(x[i])
				}
				AddWiden(y, x)
				check(t)
				for i := range y {
					if y[i] != want[i] {
						t.Fatalf("n=%d offset %d: y[%d] = %v, want %v", n, off, i, y[i], want[i])
					}
				}
			}
		}
	})
}

// sumSquaresRef is SumSquares as its comment defines it, element by
// element: eight lanes of fused multiply-adds, added in its order.
func sumSquaresRef[T float32 | float64](x []T, scale float64) (sum, maxAbs float64) {
	var l [8]float64
	for i, v := range x {
		y := float64(v)
		if a := math.Abs(y); a > maxAbs {
			maxAbs = a
		}
		l[i%8] = math.FMA(y*scale, y*scale, l[i%8])
	}
	return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])), maxAbs
}

// TestSumSquares: SumSquares gives its definition's bits on every path,
// length and offset, float32 and float64, within rounding of the plain
// sum, and reads nothing it should not count: a NaN element makes the sum
// NaN but not the largest magnitude, an infinite one both infinite.
func TestSumSquares(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		testSumSquares[float32](t)
		testSumSquares[float64](t)
	})
}

func testSumSquares[T float32 | float64](t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range lengths {
		for _, off := range offsets {
			x, check := guarded[T](n, off)
			var plain, top float64
			for i := range x {
				x[i] = T(r.NormFloat64() * 3)
				plain += float64(x[i]) * float64(x[i]) / 4
				top = max(top, math.Abs(float64(x[i])))
			}
			got, gotMax := SumSquares(x, 0.5)
			check(t)
			want, wantMax := sumSquaresRef(x, 0.5)
			if math.Float64bits(got) != math.Float64bits(want) || gotMax != wantMax {
				t.Fatalf("%T n=%d offset %d: (%v, %v), want (%v, %v) bit for bit", x, n, off, got, gotMax, want, wantMax)
			}
			if math.Abs(got-plain) > 1e-13*plain || gotMax != top {
				t.Fatalf("%T n=%d offset %d: (%v, %v), the plain loop (%v, %v)", x, n, off, got, gotMax, plain, top)
			}
			if n == 0 {
				continue
			}
			for _, bad := range []float64{math.NaN(), math.Inf(-1)} {
				i := r.IntN(n)
				keep := x[i]
				x[i] = T(bad)
				got, gotMax := SumSquares(x, 0.5)
				switch {
				case math.IsNaN(bad) && (!math.IsNaN(got) || math.IsNaN(gotMax) || gotMax > top):
					t.Fatalf("%T n=%d: NaN at %d gives (%v, %v), want (NaN, at most %v)", x, n, i, got, gotMax, top)
				case math.IsInf(bad, 0) && (!math.IsInf(got, 1) || !math.IsInf(gotMax, 1)):
					t.Fatalf("%T n=%d: -Inf at %d gives (%v, %v), want (+Inf, +Inf)", x, n, i, got, gotMax)
				}
				x[i] = keep
			}
		}
	}
}

// TestMax: Max is the largest element on every path, length and offset,
// -Inf for none, and a NaN wherever one lies (each position of a short
// row, one position of a long one).
func TestMax(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(7, 8))
		for _, n := range lengths {
			for _, off := range offsets {
				x, check := guarded[float32](n, off)
				want := float32(math.Inf(-1))
				for i := range x {
					x[i] = float32(r.NormFloat64() * 10)
					want = max(want, x[i])
				}
				if got := Max(x); got != want {
					t.Fatalf("n=%d offset %d: Max = %v, want %v", n, off, got, want)
				}
				if got := Max(toFloat64(x)); float32(got) != want {
					t.Fatalf("float64, n=%d offset %d: Max = %v, want %v", n, off, got, want)
				}
				check(t)
				for i := range x {
					if n > 40 && i != n/3 {
						continue
					}
					keep := x[i]
					x[i] = float32(math.NaN())
					if got := Max(x); !math.IsNaN(float64(got)) {
						t.Fatalf("n=%d offset %d: NaN at %d, Max = %v", n, off, i, got)
					}
					x[i] = keep
				}
			}
		}
		if got := Max([]float32{float32(math.Inf(-1)), float32(math.Inf(-1))}); !math.IsInf(float64(got), -1) {
			t.Errorf("Max of -Infs = %v", got)
		}
	})
}

func toFloat64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// TestMulDiff: MulDiff gives the Go expression's p·(q − c)·scale bit for
// bit on every path, length and offset, in place too, and writes nothing
// outside y.
func TestMulDiff(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(9, 10))
		for _, n := range lengths {
			for _, off := range offsets {
				p, _ := guarded[float32](n, (off+1)%4)
				q, _ := guarded[float32](n, (off+2)%4)
				y, check := guarded[float32](n, off)
				c, scale := float32(r.NormFloat64()), float32(0.17677669)
				want := make([]float32, n)
				for i := range p {
					p[i], q[i] = float32(r.Float64()), float32(r.NormFloat64())
					want[i] = p[i] * (q[i] - c) * scale
				}
				MulDiff(y, p, q, c, scale)
				check(t)
				MulDiff(q, p, q, c, scale) // in place
				for i := range y {
					if y[i] != want[i] || q[i] != want[i] {
						t.Fatalf("n=%d offset %d: y[%d] = %v, in place %v, want %v", n, off, i, y[i], q[i], want[i])
					}
				}
			}
		}
	})
}

// normaliseComposed is Normalise as the calls it stands for.
func normaliseComposed(x, xhat []float32, eps float64) float32 {
	d := float32(len(x))
	Lin(xhat, x, x, 1, 0, -Sum(x)/d)
	rstd := float32(1 / math.Sqrt(float64(Dot(xhat, xhat)/d)+eps))
	Lin(xhat, xhat, xhat, rstd, 0, 0)
	return rstd
}

// TestNormalise: Normalise gives the composed calls' rstd and xhat bit for
// bit on every path, length and offset (rows with a large mean, and
// constant rows whose deviations are all zero), writes nothing outside
// xhat, and a row holding an infinity gives NaNs as the calls do.
func TestNormalise(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(11, 12))
		for _, n := range lengths[1:] {
			for _, off := range offsets {
				for _, kind := range []string{"normal", "mean 1000", "constant", "inf"} {
					x, _ := guarded[float32](n, (off+1)%4)
					for i := range x {
						switch kind {
						case "normal":
							x[i] = float32(r.NormFloat64())
						case "mean 1000":
							x[i] = 1000 + float32(r.NormFloat64())
						case "constant":
							x[i] = 3.5
						case "inf":
							x[i] = float32(r.NormFloat64())
							if i == n/2 {
								x[i] = float32(math.Inf(1))
							}
						}
					}
					xhat, check := guarded[float32](n, off)
					want := make([]float32, n)
					wantR := normaliseComposed(x, want, 1e-5)
					gotR := Normalise(x, xhat, 1e-5)
					check(t)
					same := func(a, b float32) bool { return a == b || (a != a && b != b) }
					if !same(gotR, wantR) {
						t.Fatalf("%s n=%d offset %d: rstd %v, want %v", kind, n, off, gotR, wantR)
					}
					for i := range xhat {
						if !same(xhat[i], want[i]) || math.Signbit(float64(xhat[i])) != math.Signbit(float64(want[i])) {
							t.Fatalf("%s n=%d offset %d: xhat[%d] = %v, want %v", kind, n, off, i, xhat[i], want[i])
						}
					}
				}
			}
		}
	})
}

// TestNormGrad: NormGrad gives the composed calls' dx and parameter sums
// bit for bit on every path, length and offset, with and without an
// addend, sums and a bias's sums, and writes nothing outside its outputs.
// A fused pass that added a sum in another order, skipped the addend or
// widened the wrong half of a block fails it.
func TestNormGrad(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(13, 14))
		rand32 := func(n int) []float32 {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			return x
		}
		for _, n := range lengths[1:] {
			for _, off := range offsets {
				for _, c := range []struct{ addend, sums, bias bool }{{false, false, false}, {true, false, false}, {false, true, false}, {true, true, true}, {false, true, true}} {
					x, dy, gain, g := rand32(n), rand32(n), rand32(n), make([]float32, n)
					xhat := make([]float32, n)
					rstd := Normalise(x, xhat, 1e-5)
					var addend []float32
					if c.addend {
						addend = rand32(n)
					}
					sums := func() (gain, bias []float64, check func(*testing.T)) {
						if !c.sums {
							return nil, nil, func(*testing.T) {}
						}
						gain, checkGain := guarded[float64](n, off)
						for i := range gain {
							gain[i] = float64(i) * 0.25
						}
						if !c.bias {
							return gain, nil, checkGain
						}
						bias, checkBias := guarded[float64](n, (off+2)%4)
						for i := range bias {
							bias[i] = -float64(i) * 0.5
						}
						return gain, bias, func(t *testing.T) { checkGain(t); checkBias(t) }
					}
					wantGain, wantBias, _ := sums()
					want := make([]float32, n)
					normGradCalls(want, xhat, dy, gain, make([]float32, n), rstd, addend, wantGain, wantBias)
					gotGain, gotBias, checkSums := sums()
					dx, checkDX := guarded[float32](n, off)
					NormGrad(dx, xhat, dy, gain, g, rstd, addend, gotGain, gotBias)
					checkDX(t)
					checkSums(t)
					for i := range dx {
						if math.Float32bits(dx[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%+v n=%d offset %d: dx[%d] = %v, want %v", c, n, off, i, dx[i], want[i])
						}
					}
					for i := range gotGain {
						if gotGain[i] != wantGain[i] || gotBias != nil && gotBias[i] != wantBias[i] {
							t.Fatalf("%+v n=%d offset %d: sums[%d] = %v, %v, want %v, %v", c, n, off, i, gotGain[i], gotBias, wantGain[i], wantBias)
						}
					}
				}
			}
		}
	})
}

// TestScaleWiden: ScaleWiden gives the Go loop's float32(float64(x) *
// scale) bit for bit on every path, length and offset, for ordinary
// values, zeros of both signs, subnormals, infinities, NaN and products
// that overflow float32, and writes nothing outside x.
func TestScaleWiden(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(15, 16))
		special := []float32{0, float32(math.Copysign(0, -1)), 1e-45, -3e-39, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 3e38}
		for _, n := range lengths[1:] {
			for _, off := range offsets {
				for _, scale := range []float64{0.3183098861837907, 1, 7.5, -2e-40} {
					x, check := guarded[float32](n, off)
					for i := range x {
						x[i] = float32(r.NormFloat64() * 100)
						if i%5 == 1 {
							x[i] = special[i%len(special)]
						}
					}
					want := make([]float32, n)
					for i, v := range x {
						want[i] = float32(float64(v) * scale)
					}
					ScaleWiden(x, scale)
					check(t)
					for i := range x {
						if math.Float32bits(x[i]) != math.Float32bits(want[i]) && !(x[i] != x[i] && want[i] != want[i]) {
							t.Fatalf("n=%d offset %d scale %v: x[%d] = %v, want %v", n, off, scale, i, x[i], want[i])
						}
					}
				}
			}
		}
	})
}

// TestRowsAllocateNothing: the row kernels allocate nothing on any path (a
// scratch array passed to a kernel through the kernel set's function
// values would escape, and be allocated at every call: SumSquares' lanes
// once were, 22 times a step of R).
func TestRowsAllocateNothing(t *testing.T) {
	x32, y32 := make([]float32, 100), make([]float32, 100)
	x64, sums, sums2, g32 := make([]float64, 100), make([]float64, 100), make([]float64, 100), make([]float32, 100)
	for i := range x32 {
		x32[i], x64[i] = float32(i), float64(i)
	}
	forEachPath(t, func(t *testing.T) {
		for name, f := range map[string]func(){
			"SumSquares float32": func() { SumSquares(x32, 1) },
			"SumSquares float64": func() { SumSquares(x64, 1) },
			"Max":                func() { Max(x32) },
			"MulDiff":            func() { MulDiff(y32, x32, x32, 1, 2) },
			"Normalise":          func() { Normalise(x32, y32, 1e-5) },
			"NormGrad":           func() { NormGrad(y32, x32, x32, x32, g32, 0.5, x32, sums, sums2) },
			"ScaleWiden":         func() { ScaleWiden(y32, 0.5) },
		} {
			if a := testing.AllocsPerRun(20, f); a != 0 {
				t.Errorf("%s allocates %v times a call", name, a)
			}
		}
	})
}
