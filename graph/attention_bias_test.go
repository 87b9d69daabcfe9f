package graph

import (
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// biasCase is one attention with an additive score bias.
type biasCase struct {
	name string
	// batched: the bias is (B, H, Sq, Sk); else (H, Sq, Sk), shared by the batch.
	batched bool
	// lengths, when not nil, adds a key-padding mask; a length 0 leaves a
	// sequence whose queries see nothing.
	lengths []int
	dropout bool
	// scale is the range of the bias values, [-scale, scale].
	scale float64
}

var biasCases = []biasCase{
	{name: "shared bias", scale: 2},
	{name: "per-sequence bias", batched: true, scale: 2},
	{name: "shared bias, padding with an empty sequence", lengths: []int{3, 0}, scale: 2},
	{name: "per-sequence bias, padding", batched: true, lengths: []int{2, 4}, scale: 2},
	{name: "shared bias, padding, dropout", lengths: []int{4, 1}, dropout: true, scale: 2},
	{name: "large bias", batched: true, lengths: []int{4, 2}, scale: 30},
}

const biasB, biasSq, biasSk, biasD, biasH = 2, 3, 4, 6, 2

// biasShape is the shape of the case's bias.
func (c biasCase) biasShape() tensor.Shape {
	if c.batched {
		return tensor.Shape{biasB, biasH, biasSq, biasSk}
	}
	return tensor.Shape{biasH, biasSq, biasSk}
}

// biasAt returns the reference's bias(n, h, i, j) over the values of the
// case's bias.
func (c biasCase) biasAt(vals []float64) func(n, h, i, j int) float64 {
	return func(n, h, i, j int) float64 {
		if !c.batched {
			n = 0
		}
		return vals[((n*biasH+h)*biasSq+i)*biasSk+j]
	}
}

// TestFusedBiasMatchesLoops compares fused Attend with the
// plain-loop reference for every case in float64 (within 1e-12) and float32,
// and checks that the bias matters: a reference without it must not match.
func TestFusedBiasMatchesLoops(t *testing.T) {
	const b, sq, sk, d, heads = biasB, biasSq, biasSk, biasD, biasH
	for ci, tc := range biasCases {
		for _, dt := range floatTypes {
			rng := newRand(40 + uint64(ci))
			g := G.NewGraph()
			qv := roundTo(dt, uniform(rng, b*sq*d, -2, 2))
			kv := roundTo(dt, uniform(rng, b*sk*d, -2, 2))
			vv := roundTo(dt, uniform(rng, b*sk*d, -2, 2))
			bs := tc.biasShape()
			bv := roundTo(dt, uniform(rng, bs.TotalSize(), -tc.scale, tc.scale))
			q, k, v := valued(g, dt, tensor.Shape{b, sq, d}, qv, "q"), valued(g, dt, tensor.Shape{b, sk, d}, kv, "k"), valued(g, dt, tensor.Shape{b, sk, d}, vv, "v")
			bias := valued(g, dt, bs, bv, "bias")
			var mask *MaskNode
			var allow []bool
			if tc.lengths != nil {
				m, err := KeyPadding(tc.lengths, sq, sk)
				if err != nil {
					t.Fatal(err)
				}
				if mask, err = NewMaskConst(g, dt, m, "mask"); err != nil {
					t.Fatal(err)
				}
				allow = m.Allow
			}
			var keep *G.Node
			var keepRef []float64
			if tc.dropout {
				keepRef = roundTo(dt, uniform(rng, b*heads*sq*sk, 0, 2))
				keep = valued(g, dt, tensor.Shape{b, heads, sq, sk}, keepRef, "keep")
			}
			out, weights, err := Attend(q, k, v, Spec{Heads: heads, Mask: mask, Bias: bias, Keep: keep})
			if err != nil {
				t.Fatal(err)
			}
			got := eval(t, nil, out, weights)
			wantOut, wantW := attentionRef(qv, kv, vv, allow, tc.biasAt(bv), keepRef, b, sq, sk, d, heads)
			tol := 1e-12
			if dt == tensor.Float32 {
				tol = 2e-6
			}
			what := dt.String() + " " + tc.name
			checkClose(t, what+": output", got[0], wantOut, tol)
			checkClose(t, what+": weights", got[1], wantW, tol)
			t.Logf("%s: max |graph - reference|: output %.2e, weights %.2e", what, maxDiff(got[0], wantOut), maxDiff(got[1], wantW))

			// The control: the same attention without the bias is far away.
			plainOut, plainW := attentionRef(qv, kv, vv, allow, nil, keepRef, b, sq, sk, d, heads)
			if maxDiff(got[1], plainW) < 1e-2 || maxDiff(got[0], plainOut) < 1e-2 {
				t.Errorf("%s: the weights match attention without the bias within %.2e: the bias is ignored", what, maxDiff(got[1], plainW))
			}
			// Hidden keys get exactly 0, whatever their bias; a query that
			// sees nothing gets a row of zeros.
			for i, ok := range allow {
				n, rest := i/(sq*sk), i%(sq*sk)
				for h := 0; h < heads; h++ {
					if w := got[1][(n*heads+h)*sq*sk+rest]; !ok && w != 0 {
						t.Errorf("%s: hidden entry %d of head %d has weight %v", what, i, h, w)
					}
				}
			}
		}
	}
}

func maxDiff(a, b []float64) float64 {
	var m float64
	for i := range a {
		m = math.Max(m, math.Abs(a[i]-b[i]))
	}
	return m
}

// TestFusedBiasGradients checks dq, dk, dv and the gradient of the
// bias against central finite differences (float64), with a random finite
// bias, for every case, including a sequence whose queries see nothing.
func TestFusedBiasGradients(t *testing.T) {
	const b, sq, sk, d, heads = biasB, biasSq, biasSk, biasD, biasH
	var worst float64
	for ci, tc := range biasCases {
		rng := newRand(60 + uint64(ci))
		g := G.NewGraph()
		q := param(g, tensor.Shape{b, sq, d}, uniform(rng, b*sq*d, -1, 1), "q")
		k := param(g, tensor.Shape{b, sk, d}, uniform(rng, b*sk*d, -1, 1), "k")
		v := param(g, tensor.Shape{b, sk, d}, uniform(rng, b*sk*d, -1, 1), "v")
		bs := tc.biasShape()
		// A large bias saturates the softmax; its gradient is then tiny
		// and finite differences of it meaningless: check within [-2, 2].
		bias := param(g, bs, uniform(rng, bs.TotalSize(), -min(tc.scale, 2), min(tc.scale, 2)), "bias")
		var mask *MaskNode
		if tc.lengths != nil {
			m, err := KeyPadding(tc.lengths, sq, sk)
			if err != nil {
				t.Fatal(err)
			}
			if mask, err = NewMaskConst(g, tensor.Float64, m, "mask"); err != nil {
				t.Fatal(err)
			}
		}
		var keep *G.Node
		if tc.dropout {
			keep = valued(g, tensor.Float64, tensor.Shape{b, heads, sq, sk}, roundTo(tensor.Float64, uniform(rng, b*heads*sq*sk, 0, 2)), "keep")
		}
		out, _, err := Attend(q.Node, k.Node, v.Node, Spec{Heads: heads, Mask: mask, Bias: bias.Node, Keep: keep})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := GradCheck(weightedSum(t, out, rng), []Param{q, k, v, bias}, nil, GradCheckConfig{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range rep {
			worst = math.Max(worst, e.Rel)
			if e.Rel > 1e-7 || e.Norm == 0 {
				t.Errorf("%s:\n%s", tc.name, rep)
				break
			}
		}
		t.Logf("%s: worst relative error %.2e (%s)", tc.name, rep.Worst().Rel, rep.Worst().Name)
	}
	t.Logf("worst relative error over all cases: %.2e", worst)
}

// TestFusedBiasEmptyRow: a query that sees no key gets zero weights
// and zero gradients for q, k, v and its bias entries, whatever the bias.
func TestFusedBiasEmptyRow(t *testing.T) {
	const b, sq, sk, d, heads = 1, 2, 3, 4, 2
	m, err := NewMask(b, sq, sk)
	if err != nil {
		t.Fatal(err)
	}
	for j := 0; j < sk; j++ {
		m.Allow[1*sk+j] = false // query 1 sees nothing
	}
	rng := newRand(81)
	g := G.NewGraph()
	q := param(g, tensor.Shape{b, sq, d}, uniform(rng, b*sq*d, -1, 1), "q")
	k := param(g, tensor.Shape{b, sk, d}, uniform(rng, b*sk*d, -1, 1), "k")
	v := param(g, tensor.Shape{b, sk, d}, uniform(rng, b*sk*d, -1, 1), "v")
	bias := param(g, tensor.Shape{heads, sq, sk}, uniform(rng, heads*sq*sk, 5, 10), "bias") // large and positive
	mask, err := NewMaskConst(g, tensor.Float64, m, "mask")
	if err != nil {
		t.Fatal(err)
	}
	out, weights, err := Attend(q.Node, k.Node, v.Node, Spec{Heads: heads, Mask: mask, Bias: bias.Node})
	if err != nil {
		t.Fatal(err)
	}
	cost := weightedSum(t, out, rng)
	grads, err := G.Grad(cost, q.Node, bias.Node)
	if err != nil {
		t.Fatal(err)
	}
	got := eval(t, nil, out, weights, grads[0], grads[1])
	if !allFinite(got[0]) || !allFinite(got[2]) || !allFinite(got[3]) {
		t.Fatalf("not finite: out %v, dq %v, dbias %v", got[0], got[2], got[3])
	}
	for c := 0; c < d; c++ {
		if o, dq := got[0][1*d+c], got[2][1*d+c]; o != 0 || dq != 0 {
			t.Errorf("query 1, column %d: output %v, dq %v, want 0 and 0", c, o, dq)
		}
	}
	for h := 0; h < heads; h++ {
		for j := 0; j < sk; j++ {
			i := (h*sq+1)*sk + j
			if w, db := got[1][i], got[3][i]; w != 0 || db != 0 {
				t.Errorf("head %d, query 1, key %d: weight %v, dbias %v, want 0 and 0", h, j, w, db)
			}
		}
	}
}

func TestFusedBiasErrors(t *testing.T) {
	g := G.NewGraph()
	q := input(g, tensor.Float64, tensor.Shape{3, 3, 6}, "q") // B 3, Sq 3; 2 heads
	k := input(g, tensor.Float64, tensor.Shape{3, 4, 6}, "k") // Sk 4
	for _, tc := range []struct {
		name string
		bias *G.Node
		want string
	}{
		{"(B, Sq, Sk): no head axis", input(g, tensor.Float64, tensor.Shape{3, 3, 4}, "b1"), `score bias "b1" is (3, 3, 4), want (H, Sq, Sk) = (2, 3, 4) or (B, H, Sq, Sk) = (3, 2, 3, 4)`},
		{"Sq and Sk swapped", input(g, tensor.Float64, tensor.Shape{2, 4, 3}, "b2"), "want (H, Sq, Sk)"},
		{"batched, wrong B", input(g, tensor.Float64, tensor.Shape{2, 2, 3, 4}, "b3"), "(B, H, Sq, Sk) = (3, 2, 3, 4)"},
		{"float32", input(g, tensor.Float32, tensor.Shape{2, 3, 4}, "b4"), `score bias "b4" is float32, q is float64`},
		{"zero node", new(G.Node), "score bias is a zero-value node"},
	} {
		err := noPanic(t, tc.name, func() error { _, _, err := Attend(q, k, k, Spec{Heads: 2, Bias: tc.bias}); return err })
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "attention") {
			t.Errorf("%s: got %v, want an attention error with %q", tc.name, err, tc.want)
		}
	}
	// A nil bias is no bias: the same graph as Attention's.
	if _, _, err := Attend(q, k, k, Spec{Heads: 2}); err != nil {
		t.Errorf("nil bias: %v", err)
	}
}
