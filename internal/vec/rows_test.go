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
