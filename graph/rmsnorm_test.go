package graph

import (
	"errors"
	"fmt"
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// rmsNormRef normalises every row of length w of x in plain loops:
// x / sqrt(mean(x^2) + eps) * gain.
func rmsNormRef(x, gain []float64, eps float64) []float64 {
	w := len(gain)
	out := make([]float64, len(x))
	for r := 0; r*w < len(x); r++ {
		row := x[r*w : (r+1)*w]
		var ms float64
		for _, v := range row {
			ms += v * v / float64(w)
		}
		for j, v := range row {
			out[r*w+j] = v / math.Sqrt(ms+eps) * gain[j]
		}
	}
	return out
}

// rmsCase is one configuration of HeadRMSNorm (RMSNorm when heads is 1).
type rmsCase struct {
	shape tensor.Shape
	heads int
	eps   float64
}

func (c rmsCase) String() string {
	return fmt.Sprintf("%v/heads%d/eps%g", c.shape, c.heads, c.eps)
}

func (c rmsCase) width() int { return c.shape[len(c.shape)-1] / c.heads }

func rmsCases() []rmsCase {
	return []rmsCase{
		{tensor.Shape{3, 5}, 1, 1e-5},
		{tensor.Shape{2, 3, 8}, 1, 0},
		{tensor.Shape{2, 3, 8}, 2, 1e-6},
		{tensor.Shape{2, 2, 3, 6}, 3, 0},  // dk 2
		{tensor.Shape{3, 2, 16}, 4, 1e-5}, // dk 4
		{tensor.Shape{2, 3, 48}, 3, 1e-6}, // dk 16
		{tensor.Shape{4, 2, 12}, 12, 0.1}, // dk 1: y ≈ sign(x) gain, smooth only at a large eps
	}
}

// rmsBig are the benchmark's sizes, large enough that the rows (and the
// sums of dgain) are split over several blocks and goroutines.
var rmsBig = []rmsCase{{tensor.Shape{12, 64, 128}, 4, 0}, {tensor.Shape{12, 64, 128}, 1, 0}}

// rmsEval runs HeadRMSNorm of dtype dt and, if dy is not nil, the gradients
// of sum(y ⊙ dy) with respect to x and gain.
func rmsEval(t *testing.T, dt tensor.Dtype, c rmsCase, xv, gv, dy []float64) (y, dx, dgain []float64) {
	t.Helper()
	g := G.NewGraph()
	x := valued(g, dt, c.shape, xv, "x")
	gain := valued(g, dt, tensor.Shape{c.width()}, gv, "gain")
	var out *G.Node
	var err error
	if c.heads == 1 {
		out, err = RMSNorm(x, gain, c.eps)
	} else {
		out, err = HeadRMSNorm(x, gain, c.heads, c.eps)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !out.Shape().Eq(c.shape) || out.Dtype() != dt {
		t.Fatalf("RMSNorm: %v %v, want %v %v", out.Dtype(), out.Shape(), dt, c.shape)
	}
	if dy == nil {
		return eval(t, nil, out)[0], nil, nil
	}
	cost := qkMust(t)(G.Sum(qkMust(t)(G.HadamardProd(out, valued(g, dt, c.shape, dy, "dy")))))
	grads, err := G.Grad(cost, x, gain)
	if err != nil {
		t.Fatal(err)
	}
	vals := eval(t, nil, out, grads[0], grads[1])
	return vals[0], vals[1], vals[2]
}

func (c rmsCase) epsOrDefault() float64 {
	if c.eps == 0 {
		return DefaultRMSNormEps
	}
	return c.eps
}

// RMSNorm and HeadRMSNorm equal the loops in float64 to 1e-12 and in float32
// to float32's precision, against the reference and against the float64 op.
func TestRMSNormMatchesLoops(t *testing.T) {
	for i, c := range append(rmsCases(), rmsBig...) {
		t.Run(c.String(), func(t *testing.T) {
			rng := newRand(uint64(30 + i))
			x := uniform(rng, c.shape.TotalSize(), -3, 3)
			gain := uniform(rng, c.width(), 0.5, 2)
			got, _, _ := rmsEval(t, tensor.Float64, c, x, gain, nil)
			checkClose(t, "float64", got, rmsNormRef(x, gain, c.epsOrDefault()), 1e-12)

			x32, g32 := roundTo(tensor.Float32, x), roundTo(tensor.Float32, gain)
			got32, _, _ := rmsEval(t, tensor.Float32, c, x32, g32, nil)
			checkClose(t, "float32 vs reference", got32, rmsNormRef(x32, g32, c.epsOrDefault()), tolFor(tensor.Float32))
			want, _, _ := rmsEval(t, tensor.Float64, c, x32, g32, nil)
			checkClose(t, "float32 vs float64", got32, want, tolFor(tensor.Float32))
		})
	}
}

// The reference has teeth: normalising over the whole last axis instead of
// per head, or with the variance (mean subtracted) instead of the mean
// square, differs from the op by more than 0.05.
func TestRMSNormReferenceCatchesMistakes(t *testing.T) {
	c := rmsCase{tensor.Shape{2, 3, 8}, 2, 1e-6}
	rng := newRand(31)
	x := uniform(rng, c.shape.TotalSize(), 0, 3) // a mean far from 0
	gain := uniform(rng, c.width(), 0.5, 2)
	got, _, _ := rmsEval(t, tensor.Float64, c, x, gain, nil)
	gain2 := append(append([]float64(nil), gain...), gain...)
	centred := make([]float64, len(x))
	for r := 0; r*4 < len(x); r++ {
		var mean float64
		for _, v := range x[r*4 : (r+1)*4] {
			mean += v / 4
		}
		for j := r * 4; j < (r+1)*4; j++ {
			centred[j] = x[j] - mean
		}
	}
	for name, want := range map[string][]float64{
		"whole last axis": rmsNormRef(x, gain2, c.eps),
		"variance":        rmsNormRef(centred, gain, c.eps),
	} {
		if d := qkMaxDiff(got, want); d < 0.05 {
			t.Errorf("the op is within %.3g of the reference over the %s", d, name)
		}
	}
}

// HeadRMSNorm of (B, S, H*dk) is RMSNorm of the (B*S*H, dk) reshape, reshaped
// back, bit for bit: what Qwen3 computes with .view(hidden_shape), without
// the copies.
func TestHeadRMSNormEqualsReshape(t *testing.T) {
	const b, s, heads, dk = 2, 3, 4, 6
	rng := newRand(32)
	xv, gv := uniform(rng, b*s*heads*dk, -2, 2), uniform(rng, dk, 0.5, 2)
	for _, dt := range floatTypes {
		g := G.NewGraph()
		x := valued(g, dt, tensor.Shape{b, s, heads * dk}, roundTo(dt, xv), "x")
		gain := valued(g, dt, tensor.Shape{dk}, roundTo(dt, gv), "gain")
		head := qkMust(t)(HeadRMSNorm(x, gain, heads, 0))
		rows := qkMust(t)(Reshape(x, tensor.Shape{b * s * heads, dk}))
		back := qkMust(t)(Reshape(qkMust(t)(RMSNorm(rows, gain, 0)), tensor.Shape{b, s, heads * dk}))
		got := eval(t, nil, head, back)
		checkClose(t, dt.String()+" HeadRMSNorm vs reshape", got[0], got[1], 0)
	}
}

// A row of zeros gives zeros and finite gradients (dx = gain dy / sqrt(eps)).
func TestRMSNormZeroRow(t *testing.T) {
	c := rmsCase{tensor.Shape{2, 4}, 1, 1e-6}
	x := []float64{0, 0, 0, 0, 1, -2, 3, -4}
	gain := []float64{1, 2, 3, 4}
	dy := []float64{1, 1, -1, 2, 0.5, 0.5, 0.5, 0.5}
	y, dx, dgain := rmsEval(t, tensor.Float64, c, x, gain, dy)
	checkClose(t, "y", y, rmsNormRef(x, gain, c.eps), 1e-12)
	for j := 0; j < 4; j++ {
		if want := gain[j] * dy[j] / math.Sqrt(c.eps); !closeTo(dx[j], want, 1e-12) {
			t.Errorf("dx[%d] = %v, want %v", j, dx[j], want)
		}
	}
	if !allFinite(dx) || !allFinite(dgain) {
		t.Errorf("gradients not finite: dx %v, dgain %v", dx, dgain)
	}
}

// Central finite differences of the gradients with respect to x and gain,
// in float64, for RMSNorm, HeadRMSNorm, and QK-norm followed by RoPE in
// Qwen3's order.
func TestRMSNormGradients(t *testing.T) {
	for i, c := range rmsCases() {
		t.Run(c.String(), func(t *testing.T) {
			rng := newRand(uint64(40 + i))
			g := G.NewGraph()
			x := param(g, c.shape, uniform(rng, c.shape.TotalSize(), -2, 2), "x")
			gain := param(g, tensor.Shape{c.width()}, uniform(rng, c.width(), 0.5, 2), "gain")
			y, err := HeadRMSNorm(x.Node, gain.Node, c.heads, c.eps)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := GradCheck(weightedSum(t, y, rng), []Param{x, gain}, nil, GradCheckConfig{})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range rep {
				if e.Rel > 1e-7 || e.Norm < 1e-3 {
					t.Errorf("rmsnorm gradients:\n%s", rep)
					break
				}
			}
		})
	}
	for _, interleaved := range []bool{false, true} {
		t.Run(fmt.Sprintf("qk-norm then rope/%s", qkPairing(interleaved)), func(t *testing.T) {
			const b, s, heads, dk = 2, 3, 2, 6
			rng := newRand(49)
			g := G.NewGraph()
			x := param(g, tensor.Shape{b, s, heads * dk}, uniform(rng, b*s*heads*dk, -2, 2), "x")
			gain := param(g, tensor.Shape{dk}, uniform(rng, dk, 0.5, 2), "gain")
			ids, err := NewIDs(g, b, s, 100, "pos")
			if err != nil {
				t.Fatal(err)
			}
			if err := ids.Set(qkPositions(b*s, 100, 50)); err != nil {
				t.Fatal(err)
			}
			y := qkMust(t)(RoPE(qkMust(t)(HeadRMSNorm(x.Node, gain.Node, heads, 0)), heads, ids, RoPEOptions{Interleaved: interleaved}))
			rep, err := GradCheck(weightedSum(t, y, rng), []Param{x, gain}, nil, GradCheckConfig{})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range rep {
				if e.Rel > 1e-7 || e.Norm < 1e-3 {
					t.Errorf("qk-norm + rope gradients:\n%s", rep)
					break
				}
			}
		})
	}
}

func TestRMSNormErrors(t *testing.T) {
	g := G.NewGraph()
	f64 := tensor.Float64
	x := input(g, f64, tensor.Shape{2, 3, 8}, "x")
	v8 := input(g, f64, tensor.Shape{8}, "v8")
	v4 := input(g, f64, tensor.Shape{4}, "v4")
	v32 := input(g, tensor.Float32, tensor.Shape{8}, "v32")
	m := input(g, f64, tensor.Shape{2, 4}, "m")
	ints := input(g, tensor.Int, tensor.Shape{2, 8}, "ints")
	rms := func(x, gain *G.Node, eps float64) func() error {
		return func() error { return node2(RMSNorm(x, gain, eps)) }
	}
	head := func(x, gain *G.Node, heads int, eps float64) func() error {
		return func() error { return node2(HeadRMSNorm(x, gain, heads, eps)) }
	}
	cases := []errCase{
		{"gain of the wrong size", rms(x, v4, 0), []string{`rmsnorm: gain "v4" is float64 (4), want float64 (8)`}},
		{"gain of another dtype", rms(x, v32, 0), []string{`gain "v32" is float32`}},
		{"gain not a vector", rms(x, m, 0), []string{`gain "m"`}},
		{"rank 1", rms(v8, v8, 0), []string{"input shape (8), want (..., D)"}},
		{"int input", rms(ints, v8, 0), []string{"dtype int is not supported"}},
		{"negative eps", rms(x, v8, -1e-6), []string{"eps must be positive and finite (0 for the default 1e-06), got -1e-06"}},
		{"NaN eps", rms(x, v8, math.NaN()), []string{"got NaN"}},
		{"infinite eps", rms(x, v8, math.Inf(1)), []string{"got +Inf"}},
		{"nil input", rms(nil, v8, 0), []string{"rmsnorm: input is nil"}},
		{"nil gain", rms(x, nil, 0), []string{"gain is nil"}},
		{"zero-value gain", rms(x, &G.Node{}, 0), []string{"gain is a zero-value node"}},
		{"heads do not divide", head(x, v4, 3, 0), []string{"head rmsnorm: input \"x\" has 8 features, which 3 heads do not divide"}},
		{"no heads", head(x, v4, 0, 0), []string{"0 heads"}},
		{"head gain of the whole width", head(x, v8, 2, 0), []string{`gain "v8" is float64 (8), want float64 (4) to match input (2, 3, 8) with 2 heads`}},
		{"head nil input", head(nil, v4, 2, 0), []string{"head rmsnorm: input is nil"}},
	}
	checkErrCases(t, cases)
	for _, tc := range cases[:4] {
		if err := tc.run(); !errors.Is(err, ErrShape) {
			t.Errorf("%s: %v does not match ErrShape", tc.name, err)
		}
	}
}

// rmsNormTorchChecks: RMSNorm and HeadRMSNorm equal Qwen3RMSNorm applied per
// head (with a float64 upcast in place of HF's float32 one), outputs and
// gradients (torch autograd), to 1e-12 in float64; and QK-norm then RoPE,
// Qwen3's order, both pairings.
func rmsNormTorchChecks(t *testing.T) []torchCheck {
	var checks []torchCheck
	for i, c := range append(rmsCases(), rmsBig...) {
		rng := newRand(uint64(60 + i))
		x := uniform(rng, c.shape.TotalSize(), -3, 3)
		gain := uniform(rng, c.width(), 0.5, 2)
		dy := uniform(rng, c.shape.TotalSize(), -1, 1)
		y, dx, dgain := rmsEval(t, tensor.Float64, c, x, gain, dy)
		tc := map[string]any{"op": "rmsnorm", "dtype": "float64", "shape": c.shape, "x": x, "gain": gain,
			"eps": c.epsOrDefault(), "heads": c.heads, "dy": dy}
		checks = append(checks, torchCheck{"rmsnorm/" + c.String(), tc, func(t *testing.T, r refResult) {
			checkClose(t, "y vs torch", y, r.Y, 1e-12)
			checkClose(t, "dx vs torch autograd", dx, r.DX, 1e-12)
			checkClose(t, "dgain vs torch autograd", dgain, r.DGain, 1e-12)
			t.Logf("max |Δy| %.2g, |Δdx| %.2g, |Δdgain| %.2g", qkMaxDiff(y, r.Y), qkMaxDiff(dx, r.DX), qkMaxDiff(dgain, r.DGain))
		}})
	}
	for i, interleaved := range []bool{false, true} {
		const b, s, heads, dk = 2, 5, 4, 8
		rng := newRand(uint64(70 + i))
		x := uniform(rng, b*s*heads*dk, -3, 3)
		gain := uniform(rng, dk, 0.5, 2)
		dy := uniform(rng, b*s*heads*dk, -1, 1)
		pos := qkPositions(b*s, 200, uint64(71+i))
		opt := RoPEOptions{Interleaved: interleaved, Base: 1e6}

		g := G.NewGraph()
		xn := valued(g, tensor.Float64, tensor.Shape{b, s, heads * dk}, x, "x")
		gn := valued(g, tensor.Float64, tensor.Shape{dk}, gain, "gain")
		ids, err := NewIDs(g, b, s, 200, "pos")
		if err != nil {
			t.Fatal(err)
		}
		if err := ids.Set(pos); err != nil {
			t.Fatal(err)
		}
		yn := qkMust(t)(RoPE(qkMust(t)(HeadRMSNorm(xn, gn, heads, 0)), heads, ids, opt))
		cost := qkMust(t)(G.Sum(qkMust(t)(G.HadamardProd(yn, valued(g, tensor.Float64, tensor.Shape{b, s, heads * dk}, dy, "dy")))))
		grads, err := G.Grad(cost, xn, gn)
		if err != nil {
			t.Fatal(err)
		}
		vals := eval(t, nil, yn, grads[0], grads[1])
		tc := map[string]any{"op": "qknorm_rope", "dtype": "float64", "shape": []int{b, s, heads * dk}, "x": x, "gain": gain,
			"eps": DefaultRMSNormEps, "heads": heads, "positions": pos, "base": opt.Base, "pairing": qkPairing(interleaved), "dy": dy}
		checks = append(checks, torchCheck{"qknorm_rope/" + qkPairing(interleaved), tc, func(t *testing.T, r refResult) {
			checkClose(t, "y vs torch", vals[0], r.Y, 1e-12)
			checkClose(t, "dx vs torch autograd", vals[1], r.DX, 1e-12)
			checkClose(t, "dgain vs torch autograd", vals[2], r.DGain, 1e-12)
		}})
	}
	return checks
}

// BenchmarkRMSNorm times the forward and backward kernels at B=12, S=64,
// D=128: QK-norm over H=4 heads of dk=32 (HeadRMSNorm), and over the whole
// 128 (RMSNorm). MB/s counts the bytes of x.
func BenchmarkRMSNorm(b *testing.B) {
	const bs, s, d = 12, 64, 128
	for _, dt := range floatTypes {
		rng := newRand(1)
		x := NewDense(dt, tensor.Shape{bs, s, d}, uniform(rng, bs*s*d, -1, 1))
		dy := NewDense(dt, tensor.Shape{bs, s, d}, uniform(rng, bs*s*d, -1, 1))
		for _, heads := range []int{4, 1} {
			w := d / heads
			gain := NewDense(dt, tensor.Shape{w}, uniform(rng, w, 0.5, 2))
			for _, out := range []int{rmsOutput, rmsGradX, rmsGradGain} {
				op := rmsNormOp{paramOp: paramOp{shape: tensor.Shape{bs, s, d}, n: w, params: 1, out: out}, eps: DefaultRMSNormEps}.withOutput(new(output))
				vals := []G.Value{x, gain, dy}[:op.Arity()]
				b.Run(fmt.Sprintf("%v/H%d/%v", dt, heads, op), func(b *testing.B) {
					b.SetBytes(int64(bs * s * d * dt.Size())) // MB/s: of x
					for i := 0; i < b.N; i++ {
						if _, err := op.Do(vals...); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
