package graph

import (
	"fmt"
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// attentionRef is Attention in plain loops: per sequence b and head h,
// P = softmax(q_h k_h^T / sqrt(dk) + bias) over the allowed keys (all 0 when
// none is), out_h = (P * keep) v_h. bias(n, h, i, j) may be nil (no bias).
func attentionRef(q, k, v []float64, allow []bool, bias func(n, h, i, j int) float64, keep []float64, b, sq, sk, d, heads int) (out, weights []float64) {
	dk := d / heads
	out = make([]float64, b*sq*d)
	weights = make([]float64, b*heads*sq*sk)
	for n := 0; n < b; n++ {
		for h := 0; h < heads; h++ {
			for i := 0; i < sq; i++ {
				scores := make([]float64, sk)
				visible := make([]bool, sk)
				for j := 0; j < sk; j++ {
					visible[j] = allow == nil || allow[(n*sq+i)*sk+j]
					for c := 0; c < dk; c++ {
						scores[j] += q[(n*sq+i)*d+h*dk+c] * k[(n*sk+j)*d+h*dk+c]
					}
					scores[j] /= math.Sqrt(float64(dk))
					if bias != nil {
						scores[j] += bias(n, h, i, j)
					}
				}
				m, sum := math.Inf(-1), 0.0
				for j, s := range scores {
					if visible[j] {
						m = math.Max(m, s)
					}
				}
				for j, s := range scores {
					if visible[j] {
						sum += math.Exp(s - m)
					}
				}
				for j, s := range scores {
					w := 0.0
					if visible[j] {
						w = math.Exp(s-m) / sum
					}
					weights[((n*heads+h)*sq+i)*sk+j] = w
					if keep != nil {
						w *= keep[((n*heads+h)*sq+i)*sk+j]
					}
					for c := 0; c < dk; c++ {
						out[(n*sq+i)*d+h*dk+c] += w * v[(n*sk+j)*d+h*dk+c]
					}
				}
			}
		}
	}
	return out, weights
}

func TestAttentionMatchesLoops(t *testing.T) {
	const b, sq, sk, d, heads = 2, 3, 4, 6, 2
	padded, err := KeyPadding([]int{4, 0}, sq, sk) // sequence 1 sees nothing
	if err != nil {
		t.Fatal(err)
	}
	rng := newRand(3)
	keepVals := uniform(rng, b*heads*sq*sk, 0, 2)
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		for _, tc := range []struct {
			name    string
			allow   []bool
			dropout bool
		}{{"no mask", nil, false}, {"padding, a sequence with no keys", padded.Allow, false}, {"dropout", padded.Allow, true}} {
			g := G.NewGraph()
			qv := roundTo(dt, uniform(rng, b*sq*d, -2, 2))
			kv := roundTo(dt, uniform(rng, b*sk*d, -2, 2))
			vv := roundTo(dt, uniform(rng, b*sk*d, -2, 2))
			q := input(g, dt, tensor.Shape{b, sq, d}, "q")
			k := input(g, dt, tensor.Shape{b, sk, d}, "k")
			v := input(g, dt, tensor.Shape{b, sk, d}, "v")
			lets := map[*G.Node]G.Value{
				q: NewDense(dt, q.Shape(), qv), k: NewDense(dt, k.Shape(), kv), v: NewDense(dt, v.Shape(), vv),
			}
			var mask *MaskNode
			if tc.allow != nil {
				if mask, err = NewMaskConst(g, dt, Mask{B: b, Sq: sq, Sk: sk, Allow: tc.allow}, "mask"); err != nil {
					t.Fatal(err)
				}
			}
			var keep *G.Node
			var keepRef []float64
			if tc.dropout {
				keepRef = roundTo(dt, keepVals)
				keep = input(g, dt, tensor.Shape{b, heads, sq, sk}, "keep")
				lets[keep] = NewDense(dt, keep.Shape(), keepRef)
			}
			out, weights, err := Attend(q, k, v, Spec{Heads: heads, Mask: mask, Keep: keep})
			if err != nil {
				t.Fatal(err)
			}
			got := eval(t, lets, out, weights)
			wantOut, wantW := attentionRef(qv, kv, vv, tc.allow, nil, keepRef, b, sq, sk, d, heads)
			checkClose(t, dt.String()+" "+tc.name+": output", got[0], wantOut, tolFor(dt))
			checkClose(t, dt.String()+" "+tc.name+": weights", got[1], wantW, tolFor(dt))
		}
	}
}

func TestAttentionGradients(t *testing.T) {
	const b, sq, sk, d, heads = 2, 3, 4, 6, 2
	padded, err := KeyPadding([]int{3, 0}, sq, sk)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		mask    bool
		dropout bool
	}{{"plain", false, false}, {"masked with an empty row", true, false}, {"masked with dropout", true, true}} {
		rng := newRand(11)
		g := G.NewGraph()
		q := param(g, tensor.Shape{b, sq, d}, uniform(rng, b*sq*d, -1, 1), "q")
		k := param(g, tensor.Shape{b, sk, d}, uniform(rng, b*sk*d, -1, 1), "k")
		v := param(g, tensor.Shape{b, sk, d}, uniform(rng, b*sk*d, -1, 1), "v")
		var mask *MaskNode
		if tc.mask {
			if mask, err = NewMaskConst(g, tensor.Float64, padded, "mask"); err != nil {
				t.Fatal(err)
			}
		}
		var keep *G.Node
		if tc.dropout {
			keep = param(g, tensor.Shape{b, heads, sq, sk}, roundTo(tensor.Float64, uniform(rng, b*heads*sq*sk, 0, 2)), "keep").Node
		}
		out, _, err := Attend(q.Node, k.Node, v.Node, Spec{Heads: heads, Mask: mask, Keep: keep})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := GradCheck(weightedSum(t, out, rng), []Param{q, k, v}, nil, GradCheckConfig{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range rep {
			if e.Rel > 1e-7 || e.Norm == 0 {
				t.Errorf("%s:\n%s", tc.name, rep)
				break
			}
		}
	}
}

func TestAttentionErrors(t *testing.T) {
	g := G.NewGraph()
	q := input(g, tensor.Float64, tensor.Shape{2, 3, 6}, "q")
	k := input(g, tensor.Float64, tensor.Shape{2, 4, 6}, "k")
	k32 := input(g, tensor.Float32, tensor.Shape{2, 4, 6}, "k32")
	short := input(g, tensor.Float64, tensor.Shape{2, 5, 6}, "short")
	mask, err := NewMaskInput(g, tensor.Float64, 2, 4, 4, "mask")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]func() error{
		"not divisible":   func() error { _, _, err := Attend(q, k, k, Spec{Heads: 4}); return err },
		"want (B, Sq, D)": func() error { _, _, err := Attend(q, k, short, Spec{Heads: 2}); return err },
		"float32":         func() error { _, _, err := Attend(q, k32, k32, Spec{Heads: 2}); return err },
		"mask is":         func() error { _, _, err := Attend(q, k, k, Spec{Heads: 2, Mask: mask}); return err },
		"keep-mask":       func() error { _, _, err := Attend(q, k, k, Spec{Heads: 2, Keep: q}); return err },
	}
	for want, f := range cases {
		err := noPanic(t, want, f)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}

// TestWeightsGradIsDP: the gradient a caller reads from the fused
// attention's weights node (its Deriv, or Grad) is dP = (dO V^T) * keep,
// with dropout and the causal mask, with grouped-query heads and with a KV
// head per query head (where the Machine computes dP with the gradients of
// q and k, gradPQKOp), checked against a plain loop. (A backward that
// handed the weights node dS instead, to form dS once for dQ and dK, made
// this value silently wrong.)
func TestWeightsGradIsDP(t *testing.T) {
	for _, kv := range []int{2, 4} {
		t.Run(fmt.Sprintf("kv=%d", kv), func(t *testing.T) { testWeightsGradIsDP(t, kv) })
	}
}

func testWeightsGradIsDP(t *testing.T, kv int) {
	const b, s, d, heads = 2, 5, 8, 4
	dk := d / heads
	rng := newRand(9)
	g := G.NewGraph()
	q := param(g, tensor.Shape{b, s, d}, uniform(rng, b*s*d, -1, 1), "q")
	k := param(g, tensor.Shape{b, s, dk * kv}, uniform(rng, b*s*dk*kv, -1, 1), "k")
	vv := uniform(rng, b*s*dk*kv, -1, 1)
	v := param(g, tensor.Shape{b, s, dk * kv}, vv, "v")
	keepVals := roundTo(tensor.Float64, uniform(rng, b*heads*s*s, 0, 2))
	keep := param(g, tensor.Shape{b, heads, s, s}, keepVals, "keep")
	out, weights, err := Attend(q.Node, k.Node, v.Node, Spec{Impl: Fused, Heads: heads, KVHeads: kv, MaskMod: Causal(), Keep: keep.Node})
	if err != nil {
		t.Fatal(err)
	}
	dout := uniform(rng, b*s*d, -1, 1) // the cost's gradient with respect to out
	w := param(g, tensor.Shape{b, s, d}, dout, "dout")
	cost, err := G.Sum(G.Must(G.HadamardProd(out, w.Node)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := G.Grad(cost, q.Node, k.Node, v.Node); err != nil {
		t.Fatal(err)
	}
	got := eval(t, nil, weights.Deriv())[0]
	for bi := 0; bi < b; bi++ {
		for h := 0; h < heads; h++ {
			gh := h / (heads / kv)
			for i := 0; i < s; i++ {
				for j := 0; j < s; j++ {
					var dp float64
					for c := 0; c < dk; c++ {
						dp += dout[(bi*s+i)*d+h*dk+c] * vv[(bi*s+j)*dk*kv+gh*dk+c]
					}
					at := ((bi*heads+h)*s+i)*s + j
					if want := dp * keepVals[at]; math.Abs(got[at]-want) > 1e-12 {
						t.Fatalf("the weights' gradient [%d %d %d %d] = %v, want dP = %v", bi, h, i, j, got[at], want)
					}
				}
			}
		}
	}
}
