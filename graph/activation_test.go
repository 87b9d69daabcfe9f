package graph

import (
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// geluRef is the tanh form of GELU, and geluExact the erf form it
// approximates.
func geluRef(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

func geluExact(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

func TestGELU(t *testing.T) {
	xs := []float64{-6, -3, -1.5, -1, -0.5, -1e-3, 0, 1e-3, 0.5, 1, 1.5, 3, 6, 20}
	shape := tensor.Shape{2, len(xs) / 2}
	for _, dt := range floatTypes {
		in := roundTo(dt, xs)
		g := G.NewGraph()
		x := input(g, dt, shape, "x")
		y, err := GELU(x)
		if err != nil {
			t.Fatal(err)
		}
		if !y.Shape().Eq(shape) || y.Dtype() != dt {
			t.Errorf("GELU output %v %v, want %v %v", y.Shape(), y.Dtype(), shape, dt)
		}
		got := eval(t, map[*G.Node]G.Value{x: NewDense(dt, shape, in)}, y)[0]
		want := make([]float64, len(in))
		for i, v := range in {
			want[i] = geluRef(v)
			if d := math.Abs(got[i] - geluExact(v)); d > 1e-3 {
				t.Errorf("GELU(%v) = %v is %v from the exact erf form %v", v, got[i], d, geluExact(v))
			}
		}
		checkClose(t, "GELU "+dt.String(), got, want, 10*tolFor(dt))
	}
}

// TestReLU: max(x, 0) forward, and a gradient that passes dy where x > 0
// and is 0 elsewhere, 0 included (PyTorch's convention).
func TestReLU(t *testing.T) {
	xs := []float64{-2, -1e-30, 0, 1e-30, 0.5, 3}
	shape := tensor.Shape{2, 3}
	for _, dt := range floatTypes {
		g := G.NewGraph()
		x := input(g, dt, shape, "x")
		y, err := ReLU(x)
		if err != nil {
			t.Fatal(err)
		}
		cost, err := G.Sum(y)
		if err != nil {
			t.Fatal(err)
		}
		grads, err := G.Grad(cost, x)
		if err != nil {
			t.Fatal(err)
		}
		got := eval(t, map[*G.Node]G.Value{x: NewDense(dt, shape, roundTo(dt, xs))}, y, grads[0])
		for i, v := range roundTo(dt, xs) {
			wantGrad := 0.0
			if v > 0 {
				wantGrad = 1
			}
			if got[0][i] != math.Max(v, 0) || got[1][i] != wantGrad {
				t.Errorf("%v: ReLU(%v) = %v with gradient %v, want %v and %v", dt, v, got[0][i], got[1][i], math.Max(v, 0), wantGrad)
			}
		}
	}
}
