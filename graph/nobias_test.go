package graph

import (
	"fmt"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// transposeRef returns the (cols, rows) transpose of the row-major m.
func transposeRef(m []float64, rows, cols int) []float64 {
	t := make([]float64, len(m))
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			t[c*rows+r] = m[r*cols+c]
		}
	}
	return t
}

// TestLinearTMatchesLoops: LinearT with W (Out, In) is x W^T + b, checked
// against the loops of Linear on the transposed weight, with and without a
// bias, 2-D and 3-D, float64 and float32.
func TestLinearTMatchesLoops(t *testing.T) {
	const in, out = 4, 3
	rng := newRand(23)
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		for _, shape := range []tensor.Shape{{5, in}, {2, 3, in}} {
			for _, bias := range []bool{true, false} {
				g := G.NewGraph()
				xv := roundTo(dt, uniform(rng, shape.TotalSize(), -2, 2))
				wv := roundTo(dt, uniform(rng, out*in, -1, 1)) // (out, in)
				x := input(g, dt, shape, "x")
				w := G.NewMatrix(g, dt, G.WithShape(out, in), G.WithName("w"), G.WithValue(NewDense(dt, tensor.Shape{out, in}, wv)))
				var b *G.Node
				var bv []float64
				if bias {
					bv = roundTo(dt, uniform(rng, out, -1, 1))
					b = G.NewVector(g, dt, G.WithShape(out), G.WithName("b"), G.WithValue(NewDense(dt, tensor.Shape{out}, bv)))
				}
				y, err := LinearT(x, w, b)
				if err != nil {
					t.Fatal(err)
				}
				if want := append(shape[:len(shape)-1].Clone(), out); !y.Shape().Eq(want) {
					t.Errorf("shape %v, want %v", y.Shape(), want)
				}
				got := eval(t, map[*G.Node]G.Value{x: NewDense(dt, shape, xv)}, y)
				checkClose(t, fmt.Sprintf("%v linearT bias %v", dt, bias), got[0], linearRef(xv, transposeRef(wv, out, in), bv, in, out), tolFor(dt))
			}
		}
	}
}

// TestLinearTErrors: LinearT wants W (Out, In) and says so.
func TestLinearTErrors(t *testing.T) {
	g := G.NewGraph()
	x := input(g, tensor.Float64, tensor.Shape{2, 4}, "x")
	w := input(g, tensor.Float64, tensor.Shape{4, 3}, "w") // (In, Out): Linear's layout
	if _, err := LinearT(x, w, nil); err == nil || !strings.Contains(err.Error(), "(Out, In)") {
		t.Errorf("LinearT with W (In, Out): %v, want an error naming (Out, In)", err)
	}
}

// TestLayerNormNoBias: a nil bias is y = xhat * gain, the loops with a zero
// bias, in float64 and float32, and its gradients (x, gain) check out
// against central finite differences.
func TestLayerNormNoBias(t *testing.T) {
	const d, eps = 5, 1e-5
	rng := newRand(9)
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		g := G.NewGraph()
		shape := tensor.Shape{2, 3, d}
		xv := roundTo(dt, uniform(rng, shape.TotalSize(), -3, 3))
		gv := roundTo(dt, uniform(rng, d, 0.5, 2))
		x := input(g, dt, shape, "x")
		gain := G.NewVector(g, dt, G.WithShape(d), G.WithName("gain"), G.WithValue(NewDense(dt, tensor.Shape{d}, gv)))
		y, err := LayerNorm(x, gain, nil, eps)
		if err != nil {
			t.Fatal(err)
		}
		got := eval(t, map[*G.Node]G.Value{x: NewDense(dt, shape, xv)}, y)
		checkClose(t, dt.String()+" layernorm without bias", got[0], layerNormRef(xv, gv, make([]float64, d), d, eps), tolFor(dt))
	}
	g := G.NewGraph()
	x := param(g, tensor.Shape{2, 3, d}, uniform(rng, 2*3*d, -2, 2), "x")
	gain := param(g, tensor.Shape{d}, uniform(rng, d, 0.5, 2), "gain")
	y, err := LayerNorm(x.Node, gain.Node, nil, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := GradCheck(weightedSum(t, y, rng), []Param{x, gain}, nil, GradCheckConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rep {
		if e.Rel > 1e-7 || e.Norm == 0 {
			t.Errorf("layernorm without bias, gradients:\n%s", rep)
			break
		}
	}
	t.Logf("\n%s", rep)
}
