package layers

import (
	"errors"
	"fmt"
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/graphtest"
)

// implRun is what one implementation of an attention layer computed: its
// output and the gradient of a random linear cost with respect to every
// parameter and to the query and key/value inputs.
type implRun struct {
	out   []float64
	grads map[string][]float64
}

// runImpl builds the same attention layer (same seed, so same parameters)
// and inputs with implementation impl, scores scale, and the positions and
// variants of v, and runs forward and backward. Without KVHeads it has 2
// heads; with, 4.
func runImpl(t *testing.T, dt tensor.Dtype, impl AttentionImpl, scale AttentionScale, v attnVariant, b, sq, sk int, causal bool, lengths []int) implRun {
	t.Helper()
	dim, heads := 8, 2
	if v.KVHeads != 0 || v.Positions == PositionsALiBi {
		heads = 4
	}
	s := newScope(t, dt, 3)
	g := s.Graph()
	attn, err := NewMultiHeadAttention(s.Sub("attn"), AttentionConfig{Dim: dim, Heads: heads, Causal: causal, Bias: true, Impl: impl, Scale: scale,
		Positions: v.Positions, AttentionVariants: v.AttentionVariants})
	if err != nil {
		t.Fatal(err)
	}
	rng := graphtest.NewRand(5)
	perturb(t, attn.Params(), rng)
	q := graph.Param{Name: "query", Node: valueNode(g, dt, tensor.Shape{b, sq, dim}, graphtest.RoundTo(dt, graphtest.Uniform(rng, b*sq*dim, -2, 2)), "query")}
	kv := graph.Param{Name: "kv", Node: valueNode(g, dt, tensor.Shape{b, sk, dim}, graphtest.RoundTo(dt, graphtest.Uniform(rng, b*sk*dim, -2, 2)), "kv")}
	var mask *graph.MaskNode
	if lengths != nil {
		_, mask = paddingMask(t, s, lengths, sq, sk, "pad")
	}
	out, weights, err := attn.Forward(q.Node, kv.Node, kv.Node, mask)
	if err != nil {
		t.Fatal(err)
	}
	if (weights == nil) != (impl == AttentionFlash) {
		t.Fatalf("%s: weights %v; flash alone returns none", impl, weights)
	}
	cost, _ := weightedSum(t, out, rng)
	params := append(attn.Params(), q, kv)
	grads, err := G.Grad(cost, graph.Nodes(params)...)
	if err != nil {
		t.Fatal(err)
	}
	vals := newRunner(t, append([]*G.Node{out}, grads...)).run(t, nil)
	r := implRun{out: vals[0], grads: map[string][]float64{}}
	for i, p := range params {
		r.grads[p.Name] = vals[1+i]
	}
	return r
}

// TestAttentionImplsAgree: composed, fused and flash attention give the same
// layer output and the same gradients of every parameter and input, for
// every mask combination, cross-attention with Sq != Sk and fully hidden
// rows, in float64 and float32; checkpoints are therefore interchangeable.
func TestAttentionImplsAgree(t *testing.T) {
	type attnCase struct {
		name    string
		b, sq   int
		sk      int
		causal  bool
		lengths []int
		v       attnVariant
	}
	cases := []attnCase{
		{"no mask", 2, 5, 5, false, nil, attnVariant{}},
		{"causal", 2, 6, 6, true, nil, attnVariant{}},
		{"padding", 3, 5, 5, false, []int{5, 3, 1}, attnVariant{}},
		{"causal and padding", 3, 7, 7, true, []int{7, 4, 2}, attnVariant{}},
		{"cross Sq != Sk", 2, 3, 6, false, nil, attnVariant{}},
		{"cross with padding", 2, 4, 6, false, []int{6, 2}, attnVariant{}},
		{"empty key set", 2, 4, 4, false, []int{4, 0}, attnVariant{}},
	}
	// Each variant alone and all at once, under causal and padding masks
	// with a fully hidden row, and in cross-attention.
	for _, v := range []struct {
		name string
		v    attnVariant
	}{
		{"GQA 4 over 2", attnVariant{"", AttentionVariants{KVHeads: 2}}},
		{"MQA", attnVariant{"", AttentionVariants{KVHeads: 1}}},
		{"softcap", attnVariant{"", AttentionVariants{Softcap: 0.7}}},
		{"sinks", attnVariant{"", AttentionVariants{Sinks: true}}},
		{"QK-norm", attnVariant{"", AttentionVariants{QKNorm: true}}},
		{"head temperature", attnVariant{"", AttentionVariants{HeadTemperature: true}}},
		{"RoPE", attnVariant{PositionsRoPE, AttentionVariants{}}},
		{"RoPE interleaved, base 100", attnVariant{PositionsRoPEInterleaved, AttentionVariants{RoPEBase: 100}}},
		{"ALiBi", attnVariant{PositionsALiBi, AttentionVariants{}}},
		{"window 3", attnVariant{"", AttentionVariants{Window: 3}}},
		{"all variants", attnVariant{"", allVariants}},
		{"all variants, RoPE, window 3", attnVariant{PositionsRoPE, withWindow(allVariants, 3)}},
		{"all variants, ALiBi, window 2", attnVariant{PositionsALiBi, withWindow(allVariants, 2)}},
	} {
		cases = append(cases,
			attnCase{v.name + ", causal and padding", 3, 7, 7, true, []int{7, 4, 0}, v.v},
			attnCase{v.name + ", cross with padding", 2, 4, 6, false, []int{6, 2}, v.v})
	}
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		outTol, gradTol := 1e-12, 1e-10
		if dt == tensor.Float32 {
			outTol, gradTol = 1e-5, 1e-4
		}
		for _, c := range cases {
			t.Run(fmt.Sprintf("%v/%s", dt, c.name), func(t *testing.T) {
				fused := runImpl(t, dt, AttentionFused, "", c.v, c.b, c.sq, c.sk, c.causal, c.lengths)
				for _, impl := range []AttentionImpl{AttentionComposed, AttentionFlash} {
					got := runImpl(t, dt, impl, "", c.v, c.b, c.sq, c.sk, c.causal, c.lengths)
					if d := relDiff(got.out, fused.out); d > outTol {
						t.Errorf("%s output differs from fused by %.3g (tolerance %g)", impl, d, outTol)
					}
					worst := 0.0
					for name, g := range fused.grads {
						if d := relDiff(got.grads[name], g); d > gradTol {
							t.Errorf("%s gradient of %s differs from fused by %.3g (tolerance %g)", impl, name, d, gradTol)
						} else {
							worst = max(worst, d)
						}
					}
					t.Logf("%s vs fused: output %.2g, worst gradient %.2g", impl, relDiff(got.out, fused.out), worst)
				}
			})
		}
	}
}

// attnVariant is what runImpl varies besides the implementation: the
// positions an attention applies and its variants.
type attnVariant struct {
	Positions PositionsKind
	AttentionVariants
}

// withWindow is v with a window of w.
func withWindow(v AttentionVariants, w int) AttentionVariants {
	v.Window = w
	return v
}

// relDiff is the largest |a-b| relative to max(1, |b|), elementwise; +Inf
// for different lengths or a NaN.
func relDiff(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	worst := 0.0
	for i := range a {
		d := math.Abs(a[i]-b[i]) / max(1, math.Abs(b[i]))
		if math.IsNaN(d) {
			return math.Inf(1)
		}
		worst = max(worst, d)
	}
	return worst
}

func TestFlashRefusesBiasAndDropout(t *testing.T) {
	s := newScope(t, tensor.Float64, 1)
	_, err := NewMultiHeadAttention(s.Sub("attn"), AttentionConfig{Dim: 4, Heads: 2, Dropout: 0.1, Impl: AttentionFlash})
	if err == nil || !errors.Is(err, ErrConfig) {
		t.Errorf("flash with attention dropout: %v, want an ErrConfig error", err)
	}
	attn, err := NewMultiHeadAttention(s.Sub("attn2"), AttentionConfig{Dim: 4, Heads: 2, Impl: AttentionFlash})
	if err != nil {
		t.Fatal(err)
	}
	x := valueNode(s.Graph(), tensor.Float64, tensor.Shape{1, 3, 4}, make([]float64, 12), "x")
	bias := valueNode(s.Graph(), tensor.Float64, tensor.Shape{2, 3, 3}, make([]float64, 18), "bias")
	if _, _, err := attn.ForwardWithBias(x, x, x, nil, bias); err == nil || !errors.Is(err, ErrConfig) {
		t.Errorf("flash with a score bias: %v, want an ErrConfig error", err)
	}
	if _, err := ParseAttentionImpl("sparse"); err == nil {
		t.Error(`ParseAttentionImpl("sparse"): no error`)
	}
}
