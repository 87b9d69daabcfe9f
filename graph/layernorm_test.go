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

// TestLayerNormParamGradsFromDXPass: the gain's and bias's gradient ops
// that run after dx's (paramOp.after) return the sums dx's pass left, the
// same bits as computing them from x and dy themselves, over rows in
// several blocks; given inputs other than those dx's op last saw, they
// compute them themselves. The graph's gradients take dx as their fourth
// input.
func TestLayerNormParamGradsFromDXPass(t *testing.T) {
	const rows, d = 150, 64 // 3 blocks of layerNormBlock/d rows
	rng := newRand(3)
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		for _, params := range []int{1, 2} {
			shape := tensor.Shape{rows, d}
			dense := func(s tensor.Shape, lo, hi float64) *tensor.Dense {
				return NewDense(dt, s, roundTo(dt, uniform(rng, s.TotalSize(), lo, hi)))
			}
			x, x2, gain, dy := dense(shape, -3, 3), dense(shape, -3, 3), dense(tensor.Shape{d}, 0.5, 2), dense(shape, -1, 1)
			fwd := layerNormOp{paramOp: paramOp{shape: shape, n: d, params: params, after: true}, eps: 1e-5}
			sums := new(lnSums)
			shared := func(out int) layerNormOp { g := fwd; g.out, g.sums, g.buf = out, sums, new(output); return g }
			alone := func(out int) layerNormOp { g := fwd; g.out, g.after, g.buf = out, false, new(output); return g }
			do := func(op layerNormOp, vals ...G.Value) []float64 {
				t.Helper()
				v, err := op.Do(vals...)
				if err != nil {
					t.Fatal(err)
				}
				f, err := Float64s(v)
				if err != nil {
					t.Fatal(err)
				}
				return f
			}
			same := func(a, b []float64) bool {
				for i := range a {
					if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
						return false
					}
				}
				return len(a) == len(b)
			}
			for p := range params {
				out := lnGradGain + p
				want := do(alone(out), x, gain, dy)
				dx, err := shared(lnGradX).Do(x, gain, dy)
				if err != nil {
					t.Fatal(err)
				}
				if got := do(shared(out), x, gain, dy, dx); !same(got, want) {
					t.Errorf("%v params=%d: %v after dx's pass differs from its own pass", dt, params, shared(out))
				}
				if _, err := shared(lnGradX).Do(x2, gain, dy); err != nil {
					t.Fatal(err)
				}
				if got := do(shared(out), x, gain, dy, dx); !same(got, want) {
					t.Errorf("%v params=%d: %v with dx's sums of another x differs from its own pass", dt, params, shared(out))
				}
			}
		}
	}
	g := G.NewGraph()
	x := param(g, tensor.Shape{2, 3}, uniform(rng, 6, -2, 2), "x")
	gain := param(g, tensor.Shape{3}, uniform(rng, 3, 0.5, 2), "gain")
	bias := param(g, tensor.Shape{3}, uniform(rng, 3, -1, 1), "bias")
	y, err := LayerNorm(x.Node, gain.Node, bias.Node, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	grads, err := y.Op().(G.SDOp).SymDiff(G.Nodes{x.Node, gain.Node, bias.Node}, y, G.NewTensor(g, tensor.Float64, 2, G.WithShape(2, 3), G.WithName("dy")))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range grads[1:] {
		if in := children(g, p); len(in) != 4 || in[3] != grads[0] {
			t.Errorf("gradient %d of layernorm takes %v, want dx %v last", i+1, in, grads[0])
		}
	}
}
