package layers

import (
	"math"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// biasedAttentionRef is multi-head attention with an additive score bias,
// from its formula in plain loops: the projections come from ref.linear,
// P_h = softmax(Q_h K_h^T / sqrt(dk) + bias(b, h, i, j)) over the allowed
// keys (zeros when none is), out = Concat(P_h V_h) Wo + bo.
func biasedAttentionRef(r ref, prefix string, d attnDims, hasBias bool, xq, xk, xv []float64, allow func(b, i, j int) bool, bias func(b, h, i, j int) float64) attnOut {
	r.t.Helper()
	q := r.linear(xq, d.B*d.Sq, d.Dim, d.Dim, join(prefix, "wq"), join(prefix, "bq"), hasBias)
	k := r.linear(xk, d.B*d.Sk, d.KeyDim, d.Dim, join(prefix, "wk"), join(prefix, "bk"), hasBias)
	v := r.linear(xv, d.B*d.Sk, d.ValueDim, d.Dim, join(prefix, "wv"), join(prefix, "bv"), hasBias)
	dk := d.Dim / d.Heads
	res := attnOut{Weights: make([]float64, d.B*d.Heads*d.Sq*d.Sk)}
	concat := make([]float64, d.B*d.Sq*d.Dim)
	for b := 0; b < d.B; b++ {
		for h := 0; h < d.Heads; h++ {
			for i := 0; i < d.Sq; i++ {
				w := res.Weights[((b*d.Heads+h)*d.Sq+i)*d.Sk:][:d.Sk]
				rowMax, seen := math.Inf(-1), false
				for j := range w {
					if allow != nil && !allow(b, i, j) {
						continue
					}
					var dot float64
					for c := 0; c < dk; c++ {
						dot += q[(b*d.Sq+i)*d.Dim+h*dk+c] * k[(b*d.Sk+j)*d.Dim+h*dk+c]
					}
					w[j] = dot/math.Sqrt(float64(dk)) + bias(b, h, i, j) // the score, for now
					rowMax, seen = math.Max(rowMax, w[j]), true
				}
				if !seen {
					continue
				}
				var sum float64
				for j := range w {
					if allow != nil && !allow(b, i, j) {
						w[j] = 0
						continue
					}
					w[j] = math.Exp(w[j] - rowMax)
					sum += w[j]
				}
				for j := range w {
					w[j] /= sum
					for c := 0; c < dk; c++ {
						concat[(b*d.Sq+i)*d.Dim+h*dk+c] += w[j] * v[(b*d.Sk+j)*d.Dim+h*dk+c]
					}
				}
			}
		}
	}
	res.Out = r.linear(concat, d.B*d.Sq, d.Dim, d.Dim, join(prefix, "wo"), join(prefix, "bo"), hasBias)
	return res
}

// TestAttentionForwardWithBias compares ForwardWithBias with the plain-loop
// reference, for a bias shared by the batch and one per sequence, with the
// layer's causal flag, padding masks and cross-attention.
func TestAttentionForwardWithBias(t *testing.T) {
	for ci, tc := range []struct {
		name      string
		cfg       AttentionConfig
		self      bool
		b, sq, sk int
		mask      maskKind
		batched   bool
		dt        tensor.Dtype
		tol       float64
	}{
		{name: "self/causal, shared bias", cfg: AttentionConfig{Dim: 8, Heads: 2, Bias: true, Causal: true}, self: true, b: 2, sq: 4, sk: 4, dt: tensor.Float64, tol: 1e-12},
		{name: "self/causal+padding, per-sequence bias", cfg: AttentionConfig{Dim: 8, Heads: 4, Causal: true}, self: true, b: 2, sq: 5, sk: 5, mask: padding, batched: true, dt: tensor.Float64, tol: 1e-12},
		{name: "self/fully masked row, shared bias", cfg: AttentionConfig{Dim: 8, Heads: 2, Bias: true}, self: true, b: 2, sq: 4, sk: 4, mask: fullyMasked, dt: tensor.Float64, tol: 1e-12},
		{name: "cross/padding, per-sequence bias", cfg: AttentionConfig{Dim: 8, Heads: 2, KeyDim: 6, ValueDim: 4, Bias: true}, b: 2, sq: 3, sk: 5, mask: padding, batched: true, dt: tensor.Float64, tol: 1e-12},
		{name: "float32/causal+padding, shared bias", cfg: AttentionConfig{Dim: 8, Heads: 2, Bias: true, Causal: true}, self: true, b: 2, sq: 5, sk: 5, mask: padding, dt: tensor.Float32, tol: 2e-6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := newRand(300 + uint64(ci))
			s := newScope(t, tc.dt, 1)
			a, err := NewMultiHeadAttention(s.Sub("attn"), tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			perturb(t, a.Params(), rng)
			c := a.Config()
			dims := attnDims{B: tc.b, Sq: tc.sq, Sk: tc.sk, Dim: c.Dim, KeyDim: c.KeyDim, ValueDim: c.ValueDim, Heads: c.Heads}
			g := s.Graph()
			xq := roundTo(tc.dt, uniformVals(rng, tc.b*tc.sq*c.Dim, -1.5, 1.5))
			q := valueNode(g, tc.dt, tensor.Shape{tc.b, tc.sq, c.Dim}, xq, "x")
			k, v, xk, xv := q, q, xq, xq
			if !tc.self {
				xk = roundTo(tc.dt, uniformVals(rng, tc.b*tc.sk*c.KeyDim, -1.5, 1.5))
				xv = roundTo(tc.dt, uniformVals(rng, tc.b*tc.sk*c.ValueDim, -1.5, 1.5))
				k = valueNode(g, tc.dt, tensor.Shape{tc.b, tc.sk, c.KeyDim}, xk, "k")
				v = valueNode(g, tc.dt, tensor.Shape{tc.b, tc.sk, c.ValueDim}, xv, "v")
			}
			bs := tensor.Shape{c.Heads, tc.sq, tc.sk}
			if tc.batched {
				bs = tensor.Shape{tc.b, c.Heads, tc.sq, tc.sk}
			}
			bv := roundTo(tc.dt, uniformVals(rng, bs.TotalSize(), -2, 2))
			bias := valueNode(g, tc.dt, bs, bv, "bias")
			biasAt := func(b, h, i, j int) float64 {
				if !tc.batched {
					b = 0
				}
				return bv[((b*c.Heads+h)*tc.sq+i)*tc.sk+j]
			}
			m := attnMask(t, tc.mask, tc.b, tc.sq, tc.sk)
			var mn *graph.MaskNode
			if m != nil {
				mn = maskInput(t, s, *m, "mask")
			}
			out, weights, err := a.ForwardWithBias(q, k, v, mn, bias)
			if err != nil {
				t.Fatal(err)
			}
			got := evalOnce(t, nil, out, weights)
			allow := allowFunc(m)
			if c.Causal {
				allow = and(allow, causalAllow)
			}
			r := ref{t, readParams(t, a.Params())}
			want := biasedAttentionRef(r, "attn", dims, c.Bias, xq, xk, xv, allow, biasAt)
			dOut := checkClose(t, "output", got[0], want.Out, tc.tol)
			dW := checkClose(t, "weights", got[1], want.Weights, tc.tol)
			t.Logf("max |graph - reference|: output %.2e, weights %.2e", dOut, dW)
			// The control: the reference without the bias must not match.
			plain := biasedAttentionRef(r, "attn", dims, c.Bias, xq, xk, xv, allow, func(_, _, _, _ int) float64 { return 0 })
			if d := maxAbsDiff(got[1], plain.Weights); d < 1e-2 {
				t.Errorf("weights match attention without the bias within %.2e: the bias is ignored", d)
			}
		})
	}
}

// TestAttentionForwardWithBiasErrors: a bias of the wrong shape, dtype or a
// zero node is an error naming the layer, found while the graph is built.
func TestAttentionForwardWithBiasErrors(t *testing.T) {
	s := newScope(t, tensor.Float64, 1)
	a, err := NewMultiHeadAttention(s.Sub("enc").Sub("attn"), AttentionConfig{Dim: 8, Heads: 2})
	if err != nil {
		t.Fatal(err)
	}
	g := s.Graph()
	x := valueNode(g, tensor.Float64, tensor.Shape{3, 4, 8}, uniformVals(newRand(1), 3*4*8, -1, 1), "x")
	node := func(dt tensor.Dtype, shape tensor.Shape, name string) *G.Node {
		return G.NewTensor(g, dt, len(shape), G.WithShape(shape...), G.WithName(name))
	}
	for _, tc := range []struct {
		name string
		bias *G.Node
		want string
	}{
		{"no head axis", node(tensor.Float64, tensor.Shape{3, 4, 4}, "b1"), `bias "b1" is (3, 4, 4), want (H, Sq, Sk) = (2, 4, 4) or (B, H, Sq, Sk) = (3, 2, 4, 4)`},
		{"wrong Sk", node(tensor.Float64, tensor.Shape{2, 4, 5}, "b2"), "want (H, Sq, Sk) = (2, 4, 4)"},
		{"wrong B", node(tensor.Float64, tensor.Shape{2, 2, 4, 4}, "b3"), "(B, H, Sq, Sk) = (3, 2, 4, 4)"},
		{"float32", node(tensor.Float32, tensor.Shape{2, 4, 4}, "b4"), `bias "b4" is float32, the layer is float64`},
		{"zero node", new(G.Node), "bias is a zero-value node"},
	} {
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: panic %v", tc.name, r)
				}
			}()
			_, _, err = a.ForwardWithBias(x, x, x, nil, tc.bias)
		}()
		if err == nil || !strings.Contains(err.Error(), `layers: attention "enc.attn"`) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error naming the layer with %q", tc.name, err, tc.want)
		}
	}
}

// TestAttentionForwardWithBiasGradients checks the gradients of every
// parameter of the layer and of a learnable bias through ForwardWithBias
// (float64, central differences), causal and with padding.
func TestAttentionForwardWithBiasGradients(t *testing.T) {
	const b, n = 2, 4
	rng := newRand(17)
	s := newScope(t, tensor.Float64, 1)
	a, err := NewMultiHeadAttention(s.Sub("attn"), AttentionConfig{Dim: 8, Heads: 2, Bias: true, Causal: true})
	if err != nil {
		t.Fatal(err)
	}
	perturb(t, a.Params(), rng)
	g := s.Graph()
	x := inputParam(g, rng, tensor.Shape{b, n, 8}, "x")
	bias := inputParam(g, rng, tensor.Shape{2, n, n}, "bias")
	_, pad := paddingMask(t, s, []int{4, 2}, n, n, "pad")
	out, _, err := a.ForwardWithBias(x.Node, x.Node, x.Node, pad, bias.Node)
	if err != nil {
		t.Fatal(err)
	}
	cost, _ := weightedSum(t, out, rng)
	params := append(a.Params(), x, bias)
	rep, err := graph.GradCheck(cost, params, nil, graph.GradCheckConfig{Floor: gradFloor})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rep {
		// bk's gradient is 0 by softmax's shift invariance: judged by Floor.
		if e.Rel > gradTol || (e.Norm == 0 && e.Name != "attn.bk") {
			t.Errorf("gradient check:\n%s", rep)
			break
		}
	}
	t.Logf("gradient check:\n%s", rep)
}
