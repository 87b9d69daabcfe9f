package graph

import (
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func TestScaleForward(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		g := G.NewGraph()
		x := input(g, dt, tensor.Shape{2, 3}, "x")
		y, err := Scale(x, 0.25)
		if err != nil {
			t.Fatal(err)
		}
		vals := []float64{1, -2, 3, 0.5, -4, 8}
		got := eval(t, map[*G.Node]G.Value{x: NewDense(dt, tensor.Shape{2, 3}, vals)}, y)[0]
		want := make([]float64, len(vals))
		for i, v := range vals {
			want[i] = v * 0.25
		}
		checkClose(t, "Scale "+dt.String(), got, want, 0)
		if !y.Shape().Eq(tensor.Shape{2, 3}) || y.Dtype() != dt {
			t.Errorf("%v: Scale gives %v %v, want (2, 3) %v", dt, y.Shape(), y.Dtype(), dt)
		}
	}
}

func TestScaleErrors(t *testing.T) {
	g := G.NewGraph()
	x := input(g, tensor.Float64, tensor.Shape{2}, "x")
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, err := Scale(x, f); err == nil {
			t.Errorf("Scale by %v: no error", f)
		}
	}
	if _, err := Scale(nil, 2); err == nil {
		t.Error("Scale of nil: no error")
	}
}
