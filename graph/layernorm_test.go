package graph

import (
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// layerNormRef normalises every row of length d in plain loops.
func layerNormRef(x, gain, bias []float64, d int, eps float64) []float64 {
	out := make([]float64, len(x))
	for r := 0; r*d < len(x); r++ {
		row := x[r*d : (r+1)*d]
		var mean, variance float64
		for _, v := range row {
			mean += v / float64(d)
		}
		for _, v := range row {
			variance += (v - mean) * (v - mean) / float64(d)
		}
		for j, v := range row {
			out[r*d+j] = (v-mean)/math.Sqrt(variance+eps)*gain[j] + bias[j]
		}
	}
	return out
}

func TestLayerNormMatchesLoops(t *testing.T) {
	const d, eps = 5, 1e-5
	rng := newRand(5)
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		for _, shape := range []tensor.Shape{{3, d}, {2, 3, d}} {
			g := G.NewGraph()
			xv := roundTo(dt, uniform(rng, shape.TotalSize(), -3, 3))
			gv, bv := roundTo(dt, uniform(rng, d, 0.5, 2)), roundTo(dt, uniform(rng, d, -1, 1))
			x := input(g, dt, shape, "x")
			gain := G.NewVector(g, dt, G.WithShape(d), G.WithName("gain"), G.WithValue(NewDense(dt, tensor.Shape{d}, gv)))
			bias := G.NewVector(g, dt, G.WithShape(d), G.WithName("bias"), G.WithValue(NewDense(dt, tensor.Shape{d}, bv)))
			y, err := LayerNorm(x, gain, bias, eps)
			if err != nil {
				t.Fatal(err)
			}
			got := eval(t, map[*G.Node]G.Value{x: NewDense(dt, shape, xv)}, y)
			checkClose(t, dt.String()+" layernorm", got[0], layerNormRef(xv, gv, bv, d, eps), tolFor(dt))
		}
	}
}

func TestLayerNormGradients(t *testing.T) {
	const d = 6
	rng := newRand(8)
	g := G.NewGraph()
	x := param(g, tensor.Shape{2, 3, d}, uniform(rng, 2*3*d, -2, 2), "x")
	gain := param(g, tensor.Shape{d}, uniform(rng, d, 0.5, 2), "gain")
	bias := param(g, tensor.Shape{d}, uniform(rng, d, -1, 1), "bias")
	y, err := LayerNorm(x.Node, gain.Node, bias.Node, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := GradCheck(weightedSum(t, y, rng), []Param{x, gain, bias}, nil, GradCheckConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rep {
		if e.Rel > 1e-7 || e.Norm == 0 {
			t.Errorf("layernorm gradients:\n%s", rep)
			break
		}
	}
}

func TestLayerNormErrors(t *testing.T) {
	g := G.NewGraph()
	x := input(g, tensor.Float64, tensor.Shape{2, 4}, "x")
	v4 := input(g, tensor.Float64, tensor.Shape{4}, "v4")
	v3 := input(g, tensor.Float64, tensor.Shape{3}, "v3")
	v32 := input(g, tensor.Float32, tensor.Shape{4}, "v32")
	for want, f := range map[string]func() error{
		`"v3"`:             func() error { _, err := LayerNorm(x, v3, v4, 1e-5); return err },
		`"v32" is float32`: func() error { _, err := LayerNorm(x, v4, v32, 1e-5); return err },
		"want (..., D)":    func() error { _, err := LayerNorm(v4, v4, v4, 1e-5); return err },
		"eps":              func() error { _, err := LayerNorm(x, v4, v4, 0); return err },
	} {
		if err := noPanic(t, want, f); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}
