package graph

import (
	"fmt"
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func TestSumMean(t *testing.T) {
	for i, test := range []struct {
		shape tensor.Shape
		axes  []int
	}{
		{shape: tensor.Shape{3, 4}, axes: []int{0, 1}},
		{shape: tensor.Shape{2, 3, 4}, axes: []int{0, 1, 2}},
		{shape: tensor.Shape{2, 3, 4, 5}, axes: []int{0, 1, 2, 3}},
		{shape: tensor.Shape{2, 2, 3, 2, 2}, axes: []int{1, 2, 3}},
		{shape: tensor.Shape{1, 3, 1, 2}, axes: []int{1, 2}},
	} {
		for _, dt := range floatTypes {
			for _, axis := range test.axes {
				xs := roundTo(dt, uniform(newRand(uint64(400+i)), test.shape.TotalSize(), -2, 2))
				g := G.NewGraph()
				x := input(g, dt, test.shape, "x")
				sum, err := Sum(x, axis)
				if err != nil {
					t.Fatalf("test %d: Sum(axis %d): %v", i, axis, err)
				}
				mean, err := Mean(x, axis)
				if err != nil {
					t.Fatalf("test %d: Mean(axis %d): %v", i, axis, err)
				}
				wantShape := append(append(tensor.Shape{}, test.shape[:axis]...), test.shape[axis+1:]...)
				for _, n := range []*G.Node{sum, mean} {
					if !n.Shape().Eq(wantShape) || n.Dtype() != dt {
						t.Errorf("test %d axis %d: output %v %v, want %v %v", i, axis, n.Shape(), n.Dtype(), wantShape, dt)
					}
				}
				// Both read from one graph: with gorgonia's aliasing Reshape the
				// sum read back as the mean (see TestDefectReshapeAliasesInput).
				got := eval(t, map[*G.Node]G.Value{x: NewDense(dt, test.shape, xs)}, sum, mean)
				wantSum, wantMean := reduceRef(xs, test.shape, axis)
				what := fmt.Sprintf("test %d %v %v axis %d", i, dt, test.shape, axis)
				checkClose(t, what+": Sum", got[0], wantSum, 10*tolFor(dt))
				checkClose(t, what+": Mean", got[1], wantMean, 10*tolFor(dt))
			}
		}
	}
}

// Each reduction alone in its graph, so that a bug hidden by sharing nodes
// between Sum and Mean cannot cancel out.
func TestSumMeanAlone(t *testing.T) {
	shape := tensor.Shape{2, 3, 4, 5}
	xs := uniform(newRand(41), shape.TotalSize(), -1, 1)
	for axis := 0; axis < 4; axis++ {
		wantSum, wantMean := reduceRef(xs, shape, axis)
		for k, f := range []func(*G.Node, int) (*G.Node, error){Sum, Mean} {
			g := G.NewGraph()
			x := input(g, tensor.Float64, shape, "x")
			out, err := f(x, axis)
			if err != nil {
				t.Fatal(err)
			}
			got := eval(t, map[*G.Node]G.Value{x: NewDense(tensor.Float64, shape, xs)}, out)[0]
			checkClose(t, fmt.Sprintf("%s axis %d", []string{"Sum", "Mean"}[k], axis), got, [][]float64{wantSum, wantMean}[k], 1e-12)
		}
	}
}

func TestReduceAxisErrors(t *testing.T) {
	g := G.NewGraph()
	x := input(g, tensor.Float64, tensor.Shape{2, 3, 4, 5}, "x")
	for _, axis := range []int{-1, 4, 10} {
		for k, f := range []func(*G.Node, int) (*G.Node, error){Sum, Mean} {
			err := noPanic(t, "reduce", func() error { _, err := f(x, axis); return err })
			if err == nil {
				t.Errorf("%s(axis %d) of a 4-D tensor: no error", []string{"Sum", "Mean"}[k], axis)
			}
		}
	}
}

func TestInvSqrt(t *testing.T) {
	for _, dt := range floatTypes {
		for _, eps := range []float64{0, 1e-5, 0.5} {
			xs := roundTo(dt, []float64{0.01, 0.25, 1, 2, 9, 1e4})
			shape := tensor.Shape{2, 3}
			g := G.NewGraph()
			x := input(g, dt, shape, "x")
			y, err := InvSqrt(x, eps)
			if err != nil {
				t.Fatal(err)
			}
			got := eval(t, map[*G.Node]G.Value{x: NewDense(dt, shape, xs)}, y)[0]
			want := make([]float64, len(xs))
			for i, v := range xs {
				want[i] = 1 / math.Sqrt(v+eps)
			}
			checkClose(t, fmt.Sprintf("InvSqrt %v eps %v", dt, eps), got, want, 10*tolFor(dt))
		}
	}
}

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
