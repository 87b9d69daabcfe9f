package layers

import (
	"math"
	"testing"

	"github.com/qkv-dev/qkv/graph"
	"gorgonia.org/tensor"
)

// maskKind says where the mask of an attention test comes from.
type maskKind int

const (
	noMask       maskKind = iota
	causalConst           // graph.Causal as a constant mask input (Config.Causal false)
	padding               // key padding as a mask input
	fullyMasked           // key padding plus a query row that may see nothing
	customRagged          // an arbitrary pattern, different per sequence
)

// attnMask returns the (B, Sq, Sk) mask of kind k, or nil for noMask.
func attnMask(t *testing.T, k maskKind, b, sq, sk int) *graph.Mask {
	t.Helper()
	var m graph.Mask
	var err error
	switch k {
	case noMask:
		return nil
	case causalConst:
		m, err = graph.MaskOf(graph.Causal(), b, sq, sq)
	case padding, fullyMasked:
		lengths := make([]int, b)
		for n := range lengths {
			lengths[n] = sk - n // sequence 0 unpadded, sequence 1 one key short, ...
		}
		m, err = graph.KeyPadding(lengths, sq, sk)
		if err == nil && k == fullyMasked {
			for j := 0; j < sk; j++ {
				m.Allow[(1*sq+1)*sk+j] = false // query 1 of sequence 1 sees nothing
			}
		}
	case customRagged:
		m, err = graph.NewMask(b, sq, sk)
		for i := range m.Allow {
			m.Allow[i] = (i*7)%5 != 0 || i%sk == 0
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return &m
}

// and returns the allow function of "a and b"; nil means allow all.
func and(a, b func(n, i, j int) bool) func(n, i, j int) bool {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(n, i, j int) bool { return a(n, i, j) && b(n, i, j) }
}

func causalAllow(_, i, j int) bool { return j <= i }

type attnCase struct {
	name string
	cfg  AttentionConfig
	// self passes one node as query, key and value (Sq = Sk, widths = Dim).
	self      bool
	b, sq, sk int
	mask      maskKind
	dt        tensor.Dtype
	tol       float64
}

var attnCases = []attnCase{
	{name: "self/no mask", cfg: AttentionConfig{Dim: 8, Heads: 2, Bias: true}, self: true, b: 2, sq: 4, sk: 4, dt: tensor.Float64, tol: 1e-12},
	{name: "self/causal config", cfg: AttentionConfig{Dim: 8, Heads: 2, Bias: true, Causal: true}, self: true, b: 2, sq: 4, sk: 4, dt: tensor.Float64, tol: 1e-12},
	{name: "self/causal mask input", cfg: AttentionConfig{Dim: 8, Heads: 2, Bias: true}, self: true, b: 2, sq: 4, sk: 4, mask: causalConst, dt: tensor.Float64, tol: 1e-12},
	{name: "self/key padding", cfg: AttentionConfig{Dim: 8, Heads: 2, Bias: true}, self: true, b: 2, sq: 5, sk: 5, mask: padding, dt: tensor.Float64, tol: 1e-12},
	{name: "self/causal+padding", cfg: AttentionConfig{Dim: 8, Heads: 2, Bias: true, Causal: true}, self: true, b: 2, sq: 5, sk: 5, mask: padding, dt: tensor.Float64, tol: 1e-12},
	{name: "self/fully masked row", cfg: AttentionConfig{Dim: 8, Heads: 2, Bias: true}, self: true, b: 2, sq: 4, sk: 4, mask: fullyMasked, dt: tensor.Float64, tol: 1e-12},
	{name: "self/4 heads no bias", cfg: AttentionConfig{Dim: 8, Heads: 4}, self: true, b: 2, sq: 3, sk: 3, mask: customRagged, dt: tensor.Float64, tol: 1e-12},
	{name: "self/1 head", cfg: AttentionConfig{Dim: 8, Heads: 1, Bias: true}, self: true, b: 2, sq: 3, sk: 3, dt: tensor.Float64, tol: 1e-12},
	{name: "cross/no mask", cfg: AttentionConfig{Dim: 8, Heads: 2, KeyDim: 6, ValueDim: 4, Bias: true}, b: 2, sq: 3, sk: 5, dt: tensor.Float64, tol: 1e-12},
	{name: "cross/key padding", cfg: AttentionConfig{Dim: 8, Heads: 2, KeyDim: 6, ValueDim: 4, Bias: true}, b: 2, sq: 3, sk: 5, mask: padding, dt: tensor.Float64, tol: 1e-12},
	{name: "cross/longer queries ragged", cfg: AttentionConfig{Dim: 8, Heads: 4, KeyDim: 5, ValueDim: 7}, b: 2, sq: 5, sk: 2, mask: customRagged, dt: tensor.Float64, tol: 1e-12},
	{name: "float32/causal+padding", cfg: AttentionConfig{Dim: 8, Heads: 2, Bias: true, Causal: true}, self: true, b: 2, sq: 5, sk: 5, mask: padding, dt: tensor.Float32, tol: 2e-6},
	{name: "float32/cross", cfg: AttentionConfig{Dim: 8, Heads: 2, KeyDim: 6, ValueDim: 4, Bias: true}, b: 2, sq: 3, sk: 5, mask: padding, dt: tensor.Float32, tol: 2e-6},
}

// TestAttentionMatchesReference compares the output and the weights of
// MultiHeadAttention on random inputs and random parameters with the plain-Go
// reference, and checks that a reference scaled by 1/sqrt(D) instead of
// 1/sqrt(dk) does not match.
func TestAttentionMatchesReference(t *testing.T) {
	var worst float64
	for ci, tc := range attnCases {
		t.Run(tc.name, func(t *testing.T) {
			rng := newRand(100 + uint64(ci))
			s := newScope(t, tc.dt, 1)
			a, err := NewMultiHeadAttention(s.Sub("enc").Sub("attn"), tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			perturb(t, a.Params(), rng)
			c := a.Config() // with KeyDim and ValueDim filled in
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
			m := attnMask(t, tc.mask, tc.b, tc.sq, tc.sk)
			var mn *graph.MaskNode
			if m != nil {
				mn = maskInput(t, s, *m, "mask")
			}
			out, weights, err := a.Forward(q, k, v, mn)
			if err != nil {
				t.Fatal(err)
			}
			if want := (tensor.Shape{tc.b, tc.sq, c.Dim}); !out.Shape().Eq(want) {
				t.Errorf("output shape %v, want %v", out.Shape(), want)
			}
			if want := (tensor.Shape{tc.b, c.Heads, tc.sq, tc.sk}); !weights.Shape().Eq(want) {
				t.Errorf("weights shape %v, want %v", weights.Shape(), want)
			}
			got := evalOnce(t, nil, out, weights)

			allow := allowFunc(m)
			if c.Causal {
				allow = and(allow, causalAllow)
			}
			r := ref{t, readParams(t, a.Params())}
			want := r.attention("enc.attn", dims, c.Bias, xq, xk, xv, allow, c.Dim/c.Heads)
			dOut := checkClose(t, "output", got[0], want.Out, tc.tol)
			dW := checkClose(t, "weights", got[1], want.Weights, tc.tol)
			t.Logf("max |graph - reference|: output %.2e, weights %.2e", dOut, dW)
			if tc.dt == tensor.Float64 {
				worst = math.Max(worst, math.Max(dOut, dW))
			}

			// The control: with more than one head, a reference that divides
			// by sqrt(D) must not match, so the test above can tell the two
			// scales apart.
			if c.Heads > 1 {
				wrong := r.attention("enc.attn", dims, c.Bias, xq, xk, xv, allow, c.Dim)
				if d := maxAbsDiff(got[1], wrong.Weights); d < 1e-3 {
					t.Errorf("weights match a reference scaled by 1/sqrt(D) = 1/sqrt(%d) within %.2e: the scale must be 1/sqrt(dk) = 1/sqrt(%d)", c.Dim, d, c.Dim/c.Heads)
				}
				if d := maxAbsDiff(got[0], wrong.Out); d < 1e-3 {
					t.Errorf("output matches a reference scaled by 1/sqrt(D) within %.2e", d)
				}
			}
		})
	}
	t.Logf("worst float64 max |graph - reference| over all cases: %.2e", worst)
}

// TestAttentionQueryKeyValueRoles swaps the roles of the inputs: the output
// of cross-attention must depend on which node is the query, which the key
// and which the value, as the reference says. A layer that, say, took K from
// the value input would match the reference only when key == value.
func TestAttentionQueryKeyValueRoles(t *testing.T) {
	const b, sq, sk, d = 2, 3, 4, 8
	rng := newRand(7)
	s := newScope(t, tensor.Float64, 1)
	a, err := NewMultiHeadAttention(s.Sub("attn"), AttentionConfig{Dim: d, Heads: 2, Bias: true})
	if err != nil {
		t.Fatal(err)
	}
	perturb(t, a.Params(), rng)
	g := s.Graph()
	xq := uniformVals(rng, b*sq*d, -1, 1)
	x1 := uniformVals(rng, b*sk*d, -1, 1)
	x2 := uniformVals(rng, b*sk*d, -1, 1)
	q := valueNode(g, tensor.Float64, tensor.Shape{b, sq, d}, xq, "q")
	n1 := valueNode(g, tensor.Float64, tensor.Shape{b, sk, d}, x1, "x1")
	n2 := valueNode(g, tensor.Float64, tensor.Shape{b, sk, d}, x2, "x2")
	outA, _, err := a.Forward(q, n1, n2, nil) // K from x1, V from x2
	if err != nil {
		t.Fatal(err)
	}
	outB, _, err := a.Forward(q, n2, n1, nil) // K from x2, V from x1
	if err != nil {
		t.Fatal(err)
	}
	got := evalOnce(t, nil, outA, outB)
	r := ref{t, readParams(t, a.Params())}
	dims := attnDims{B: b, Sq: sq, Sk: sk, Dim: d, KeyDim: d, ValueDim: d, Heads: 2}
	checkClose(t, "K=x1, V=x2", got[0], r.attention("attn", dims, true, xq, x1, x2, nil, d/2).Out, 1e-12)
	checkClose(t, "K=x2, V=x1", got[1], r.attention("attn", dims, true, xq, x2, x1, nil, d/2).Out, 1e-12)
	if maxAbsDiff(got[0], got[1]) < 1e-6 {
		t.Error("swapping key and value inputs does not change the output")
	}
}
