package graph

import (
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// linearRef is x W + b in plain loops over rows of length in.
func linearRef(x, w, b []float64, in, out int) []float64 {
	y := make([]float64, len(x)/in*out)
	for r := 0; r*in < len(x); r++ {
		for j := 0; j < out; j++ {
			if b != nil {
				y[r*out+j] = b[j]
			}
			for k := 0; k < in; k++ {
				y[r*out+j] += x[r*in+k] * w[k*out+j]
			}
		}
	}
	return y
}

func TestLinearMatchesLoops(t *testing.T) {
	const in, out = 4, 3
	rng := newRand(21)
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		for _, shape := range []tensor.Shape{{5, in}, {2, 3, in}} {
			for _, bias := range []bool{true, false} {
				g := G.NewGraph()
				xv := roundTo(dt, uniform(rng, shape.TotalSize(), -2, 2))
				wv := roundTo(dt, uniform(rng, in*out, -1, 1))
				x := input(g, dt, shape, "x")
				w := G.NewMatrix(g, dt, G.WithShape(in, out), G.WithName("w"), G.WithValue(NewDense(dt, tensor.Shape{in, out}, wv)))
				var b *G.Node
				var bv []float64
				if bias {
					bv = roundTo(dt, uniform(rng, out, -1, 1))
					b = G.NewVector(g, dt, G.WithShape(out), G.WithName("b"), G.WithValue(NewDense(dt, tensor.Shape{out}, bv)))
				}
				y, err := Linear(x, w, b)
				if err != nil {
					t.Fatal(err)
				}
				if want := append(shape[:len(shape)-1].Clone(), out); !y.Shape().Eq(want) {
					t.Errorf("shape %v, want %v", y.Shape(), want)
				}
				got := eval(t, map[*G.Node]G.Value{x: NewDense(dt, shape, xv)}, y)
				checkClose(t, dt.String()+" linear", got[0], linearRef(xv, wv, bv, in, out), tolFor(dt))
			}
		}
	}
}

// TestLinearGradients checks dx, dW and db of Linear (W (In, Out)) and of
// LinearT (W (Out, In), a tied head's) against central finite differences
// in float64.
func TestLinearGradients(t *testing.T) {
	const in, out = 4, 3
	for _, op := range []struct {
		name    string
		seed    uint64
		wShape  tensor.Shape
		forward func(x, w, b *G.Node) (*G.Node, error)
	}{
		{"linear", 22, tensor.Shape{in, out}, Linear},
		{"linearT", 24, tensor.Shape{out, in}, LinearT},
	} {
		for _, bias := range []bool{true, false} {
			rng := newRand(op.seed)
			g := G.NewGraph()
			x := param(g, tensor.Shape{2, 3, in}, uniform(rng, 2*3*in, -1, 1), "x")
			w := param(g, op.wShape, uniform(rng, in*out, -1, 1), "w")
			params := []Param{x, w}
			var b *G.Node
			if bias {
				bp := param(g, tensor.Shape{out}, uniform(rng, out, -1, 1), "b")
				b, params = bp.Node, append(params, bp)
			}
			y, err := op.forward(x.Node, w.Node, b)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := GradCheck(weightedSum(t, y, rng), params, nil, GradCheckConfig{})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range rep {
				if e.Rel > 1e-8 || e.Norm == 0 {
					t.Errorf("%s gradients (bias %v):\n%s", op.name, bias, rep)
					break
				}
			}
			t.Logf("%s, bias %v:\n%s", op.name, bias, rep)
		}
	}
}

func TestLinearErrors(t *testing.T) {
	g := G.NewGraph()
	x := input(g, tensor.Float64, tensor.Shape{2, 4}, "x")
	w := input(g, tensor.Float64, tensor.Shape{4, 3}, "w")
	w5 := input(g, tensor.Float64, tensor.Shape{5, 3}, "w5")
	w32 := input(g, tensor.Float32, tensor.Shape{4, 3}, "w32")
	b4 := input(g, tensor.Float64, tensor.Shape{4}, "b4")
	for want, f := range map[string]func() error{
		"want (..., In) and (In, Out)": func() error { _, err := Linear(x, w5, nil); return err },
		`"w32" are float32`:            func() error { _, err := Linear(x, w32, nil); return err },
		`bias "b4"`:                    func() error { _, err := Linear(x, w, b4); return err },
	} {
		if err := noPanic(t, want, f); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}
