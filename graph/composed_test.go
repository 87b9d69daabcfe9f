package graph

import (
	"fmt"
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The tests of the composed attention hold it to the fused op, which
// attention_test.go and attention_bias_test.go hold to plain loops and
// finite differences: the two must agree on every mask, bias and dropout,
// forward and backward, and the composed one must pass its own
// finite-difference check.

// attentionFunc is Attend with one implementation, a mask, a score bias and
// a dropout keep-mask: what the comparisons vary.
type attentionFunc func(q, k, v *G.Node, heads int, mask *MaskNode, bias, keep *G.Node) (out, weights *G.Node, err error)

// attendWith returns Attend by impl as an attentionFunc.
func attendWith(impl Impl) attentionFunc {
	return func(q, k, v *G.Node, heads int, mask *MaskNode, bias, keep *G.Node) (*G.Node, *G.Node, error) {
		return Attend(q, k, v, Spec{Impl: impl, Heads: heads, Mask: mask, Bias: bias, Keep: keep})
	}
}

// Sizes of the comparisons: Sq != Sk, and 2 heads of width 3.
const cmpB, cmpSq, cmpSk, cmpD, cmpH = 2, 3, 5, 6, 2

// composedMasks are the masks every comparison runs with, by name; nil is no
// mask.
func composedMasks(t *testing.T) map[string]*Mask {
	t.Helper()
	must := func(m Mask, err error) Mask {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	// Causal for Sq < Sk, as in decoding with a cache: query i is position
	// i + Sk - Sq and sees the keys up to it.
	causal := must(NewMask(cmpB, cmpSq, cmpSk))
	for i := range causal.Allow {
		qi, kj := i/cmpSk%cmpSq, i%cmpSk
		causal.Allow[i] = kj <= qi+cmpSk-cmpSq
	}
	padding := must(KeyPadding([]int{5, 3}, cmpSq, cmpSk))
	both := must(causal.And(must(KeyPadding([]int{4, 2}, cmpSq, cmpSk))))
	// Sequence 1 sees no key at all, and query 1 of sequence 0 none either.
	hidden := must(KeyPadding([]int{4, 0}, cmpSq, cmpSk))
	for j := 0; j < cmpSk; j++ {
		hidden.Allow[1*cmpSk+j] = false
	}
	return map[string]*Mask{"no mask": nil, "causal": &causal, "key padding": &padding, "causal and padding": &both, "fully hidden rows": &hidden}
}

// composedCase is one comparison: a mask, a bias of rank 0 (none), 3
// (H, Sq, Sk) or 4 (B, H, Sq, Sk), and dropout or not.
type composedCase struct {
	mask    string
	bias    int
	dropout bool
}

func (c composedCase) String() string {
	s := c.mask
	if c.bias != 0 {
		s += fmt.Sprintf(", %d-D bias", c.bias)
	}
	if c.dropout {
		s += ", dropout"
	}
	return s
}

// composedCases is every combination.
func composedCases() []composedCase {
	var cases []composedCase
	for _, m := range []string{"no mask", "causal", "key padding", "causal and padding", "fully hidden rows"} {
		for _, b := range []int{0, 3, 4} {
			for _, drop := range []bool{false, true} {
				cases = append(cases, composedCase{m, b, drop})
			}
		}
	}
	return cases
}

// attentionValues are one case's random inputs, rounded to the dtype.
type attentionValues struct {
	q, k, v, bias, keep []float64
	biasShape           tensor.Shape
	mask                *Mask
}

func newAttentionValues(t *testing.T, tc composedCase, dt tensor.Dtype, seed uint64, scale float64) attentionValues {
	rng := newRand(seed)
	av := attentionValues{
		q:    roundTo(dt, uniform(rng, cmpB*cmpSq*cmpD, -scale, scale)),
		k:    roundTo(dt, uniform(rng, cmpB*cmpSk*cmpD, -scale, scale)),
		v:    roundTo(dt, uniform(rng, cmpB*cmpSk*cmpD, -2, 2)),
		mask: composedMasks(t)[tc.mask],
	}
	switch tc.bias {
	case 3:
		av.biasShape = tensor.Shape{cmpH, cmpSq, cmpSk}
	case 4:
		av.biasShape = tensor.Shape{cmpB, cmpH, cmpSq, cmpSk}
	}
	if tc.bias != 0 {
		av.bias = roundTo(dt, uniform(rng, av.biasShape.TotalSize(), -2, 2))
	}
	if tc.dropout {
		// A real keep-mask: dropped entries 0, kept ones 1/(1-p), p = 0.2.
		av.keep = make([]float64, cmpB*cmpH*cmpSq*cmpSk)
		for i := range av.keep {
			if rng.Float64() >= 0.2 {
				av.keep[i] = 1.25
			}
		}
	}
	return av
}

// attentionGraph is one attention built over an attentionValues.
type attentionGraph struct {
	out, weights *G.Node
	// wrt is q, k, v and, with a bias, the bias.
	wrt G.Nodes
}

// build builds attend over av in g; q, k, v and the bias hold their values.
func (av attentionValues) build(t *testing.T, g *G.ExprGraph, dt tensor.Dtype, attend attentionFunc) attentionGraph {
	t.Helper()
	q := valued(g, dt, tensor.Shape{cmpB, cmpSq, cmpD}, av.q, "q")
	k := valued(g, dt, tensor.Shape{cmpB, cmpSk, cmpD}, av.k, "k")
	v := valued(g, dt, tensor.Shape{cmpB, cmpSk, cmpD}, av.v, "v")
	ag := attentionGraph{wrt: G.Nodes{q, k, v}}
	var mask *MaskNode
	if av.mask != nil {
		var err error
		if mask, err = NewMaskConst(g, dt, *av.mask, "mask"); err != nil {
			t.Fatal(err)
		}
	}
	var bias, keep *G.Node
	if av.bias != nil {
		bias = valued(g, dt, av.biasShape, av.bias, "bias")
		ag.wrt = append(ag.wrt, bias)
	}
	if av.keep != nil {
		keep = valued(g, dt, tensor.Shape{cmpB, cmpH, cmpSq, cmpSk}, av.keep, "keep")
	}
	var err error
	if ag.out, ag.weights, err = attend(q, k, v, cmpH, mask, bias, keep); err != nil {
		t.Fatal(err)
	}
	return ag
}

// linearCost returns sum(out ⊙ W1) + sum(weights ⊙ W2) for random constants
// seeded by seed, so that two graphs get the same cost.
func (ag attentionGraph) linearCost(t *testing.T, seed uint64) *G.Node {
	t.Helper()
	rng := newRand(seed)
	cost, err := G.Add(weightedSum(t, ag.out, rng), weightedSum(t, ag.weights, rng))
	if err != nil {
		t.Fatal(err)
	}
	return cost
}

// TestComposedMatchesFused compares outputs and weights with
// the fused Attend for every mask, bias and dropout, in float64 (within
// 1e-12) and float32 (1e-5 relative).
func TestComposedMatchesFused(t *testing.T) {
	worst := map[tensor.Dtype][2]float64{}
	for ci, tc := range composedCases() {
		for _, dt := range floatTypes {
			av := newAttentionValues(t, tc, dt, 100+uint64(ci), 2)
			var got [2][][]float64
			for i, attend := range []attentionFunc{attendWith(Composed), attendWith(Fused)} {
				ag := av.build(t, G.NewGraph(), dt, attend)
				got[i] = eval(t, nil, ag.out, ag.weights)
			}
			what := fmt.Sprintf("%v %v", dt, tc)
			for i, name := range []string{"output", "weights"} {
				if !allFinite(got[0][i]) {
					t.Errorf("%s: %s not finite: %v", what, name, got[0][i])
				}
				checkClose(t, what+": "+name, got[0][i], got[1][i], tolFor(dt))
				w := worst[dt]
				w[i] = math.Max(w[i], maxDiff(got[0][i], got[1][i]))
				worst[dt] = w
			}
		}
	}
	for _, dt := range floatTypes {
		t.Logf("%v: max |composed - fused| over %d cases: output %.2e, weights %.2e", dt, len(composedCases()), worst[dt][0], worst[dt][1])
	}
}

// TestComposedGradientsMatchFused compares gorgonia's gradients of
// a random linear cost of the output and the weights, with respect to q, k, v
// and the bias, with the fused op's hand-written ones (float64, within
// 1e-10). Fully hidden rows must get exactly zero gradients in both.
func TestComposedGradientsMatchFused(t *testing.T) {
	var worst float64
	for ci, tc := range composedCases() {
		av := newAttentionValues(t, tc, tensor.Float64, 200+uint64(ci), 1)
		var got [2][][]float64
		for i, attend := range []attentionFunc{attendWith(Composed), attendWith(Fused)} {
			ag := av.build(t, G.NewGraph(), tensor.Float64, attend)
			grads, err := G.Grad(ag.linearCost(t, 300+uint64(ci)), ag.wrt...)
			if err != nil {
				t.Fatalf("%v: %v", tc, err)
			}
			got[i] = eval(t, nil, grads...)
		}
		for i, name := range []string{"dq", "dk", "dv", "dbias"}[:len(got[0])] {
			if !allFinite(got[0][i]) {
				t.Errorf("%v: %s not finite: %v", tc, name, got[0][i])
			}
			checkClose(t, fmt.Sprintf("%v: %s", tc, name), got[0][i], got[1][i], 1e-10)
			worst = math.Max(worst, maxDiff(got[0][i], got[1][i]))
		}
		if tc.mask == "fully hidden rows" {
			// Sequence 1 sees nothing; so does query 1 of sequence 0.
			for i, g := range got[0][0] {
				if n, qi := i/(cmpSq*cmpD), i/cmpD%cmpSq; (n == 1 || qi == 1) && g != 0 {
					t.Errorf("%v: dq[%d] of a query that sees nothing is %v, want 0", tc, i, g)
				}
			}
		}
	}
	t.Logf("max |composed - fused| of the gradients over %d cases: %.2e", len(composedCases()), worst)
}

// TestComposedGradCheck checks the composed attention's gradients
// against central finite differences (float64), once per mask with each
// bias, with dropout on the 3-D bias.
func TestComposedGradCheck(t *testing.T) {
	var worst float64
	for ci, tc := range composedCases() {
		if tc.dropout != (tc.bias == 3) {
			continue
		}
		av := newAttentionValues(t, tc, tensor.Float64, 400+uint64(ci), 1)
		g := G.NewGraph()
		ag := av.build(t, g, tensor.Float64, attendWith(Composed))
		var params []Param
		for _, n := range ag.wrt {
			params = append(params, Param{Name: n.Name(), Node: n})
		}
		rep, err := GradCheck(ag.linearCost(t, 500+uint64(ci)), params, nil, GradCheckConfig{})
		if err != nil {
			t.Fatalf("%v: %v", tc, err)
		}
		for _, e := range rep {
			if e.Rel > 1e-7 || (e.Norm == 0 && e.Name != "bias") {
				t.Errorf("%v:\n%s", tc, rep)
				break
			}
		}
		worst = math.Max(worst, rep.Worst().Rel)
	}
	t.Logf("worst norm-relative error against finite differences: %.2e", worst)
}

// TestComposedLargeScoresFloat32: scores near 1e3 in float32, far
// beyond exp's range (88), give finite outputs, weights and gradients, close
// to the fused op's (which computes in float64 inside).
func TestComposedLargeScoresFloat32(t *testing.T) {
	for ci, tc := range []composedCase{{mask: "no mask"}, {mask: "causal and padding", bias: 3}, {mask: "fully hidden rows", bias: 4, dropout: true}} {
		// |q|, |k| up to 40 with dk = 3: scores Q K^T / sqrt(3) up to ~2.8e3.
		av := newAttentionValues(t, tc, tensor.Float32, 600+uint64(ci), 40)
		var got [2][][]float64
		var maxScore float64
		for i, attend := range []attentionFunc{attendWith(Composed), attendWith(Fused)} {
			ag := av.build(t, G.NewGraph(), tensor.Float32, attend)
			grads, err := G.Grad(ag.linearCost(t, 700+uint64(ci)), ag.wrt...)
			if err != nil {
				t.Fatal(err)
			}
			got[i] = eval(t, nil, append(G.Nodes{ag.out, ag.weights}, grads...)...)
		}
		for i := 0; i < cmpB*cmpSq; i++ {
			for j := 0; j < cmpSk; j++ {
				for h := 0; h < cmpH; h++ {
					var s float64
					for c := 0; c < cmpD/cmpH; c++ {
						s += av.q[i*cmpD+h*3+c] * av.k[(i/cmpSq*cmpSk+j)*cmpD+h*3+c]
					}
					maxScore = math.Max(maxScore, math.Abs(s)/math.Sqrt(3))
				}
			}
		}
		for i, name := range []string{"output", "weights", "dq", "dk", "dv", "dbias"}[:len(got[0])] {
			if !allFinite(got[0][i]) {
				t.Errorf("%v: %s not finite: %v", tc, name, got[0][i])
			}
			if i < 2 {
				// Near-ties of scores ~1e3 apart by float32 rounding (~1e-4)
				// move weights by as much: compare loosely.
				checkClose(t, fmt.Sprintf("%v: %s", tc, name), got[0][i], got[1][i], 1e-2)
			}
		}
		t.Logf("%v: max |score| %.0f; max |composed - fused|: output %.2e, weights %.2e", tc, maxScore, maxDiff(got[0][0], got[1][0]), maxDiff(got[0][1], got[1][1]))
	}
}

// TestComposedErrors: bad inputs are errors naming what is wrong,
// never panics.
func TestComposedErrors(t *testing.T) {
	g := G.NewGraph()
	q := input(g, tensor.Float64, tensor.Shape{2, 3, 6}, "q")
	k := input(g, tensor.Float64, tensor.Shape{2, 4, 6}, "k")
	k32 := input(g, tensor.Float32, tensor.Shape{2, 4, 6}, "k32")
	short := input(g, tensor.Float64, tensor.Shape{2, 5, 6}, "short")
	flat := input(g, tensor.Float64, tensor.Shape{6, 6}, "flat")
	mask, err := NewMaskInput(g, tensor.Float64, 2, 4, 4, "mask")
	if err != nil {
		t.Fatal(err)
	}
	badBias := input(g, tensor.Float64, tensor.Shape{2, 4, 3}, "bb")
	for _, tc := range []struct {
		name string
		f    func() error
		want string
	}{
		{"heads do not divide D", func() error { _, _, err := Attend(q, k, k, Spec{Impl: Composed, Heads: 4}); return err }, "width 6 is not divisible by 4 heads"},
		{"zero heads", func() error { _, _, err := Attend(q, k, k, Spec{Impl: Composed, Heads: 0}); return err }, "0 heads"},
		{"v of other length", func() error { _, _, err := Attend(q, k, short, Spec{Impl: Composed, Heads: 2}); return err }, "want (B, Sq, D)"},
		{"2-D q", func() error { _, _, err := Attend(flat, k, k, Spec{Impl: Composed, Heads: 2}); return err }, "want (B, Sq, D)"},
		{"nil q", func() error { _, _, err := Attend(nil, k, k, Spec{Impl: Composed, Heads: 2}); return err }, "q is nil"},
		{"mixed dtypes", func() error { _, _, err := Attend(q, k32, k32, Spec{Impl: Composed, Heads: 2}); return err }, "float32"},
		{"mask of other sizes", func() error { _, _, err := Attend(q, k, k, Spec{Impl: Composed, Heads: 2, Mask: mask}); return err }, "mask is (B, Sq, Sk) = (2, 4, 4), want (2, 3, 4)"},
		{"zero mask", func() error {
			_, _, err := Attend(q, k, k, Spec{Impl: Composed, Heads: 2, Mask: &MaskNode{}})
			return err
		}, "mask: bias is nil"},
		{"bias shape", func() error { _, _, err := Attend(q, k, k, Spec{Impl: Composed, Heads: 2, Bias: badBias}); return err }, `score bias "bb" is (2, 4, 3)`},
		{"zero bias", func() error {
			_, _, err := Attend(q, k, k, Spec{Impl: Composed, Heads: 2, Bias: new(G.Node)})
			return err
		}, "score bias is a zero-value node"},
		{"keep shape", func() error { _, _, err := Attend(q, k, k, Spec{Impl: Composed, Heads: 2, Keep: q}); return err }, "dropout keep-mask"},
	} {
		err := noPanic(t, tc.name, tc.f)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "composed attention") {
			t.Errorf("%s: got %v, want a composed attention error with %q", tc.name, err, tc.want)
		}
	}
}

// TestComposedOddShapes: sizes of 1 (one sequence, one query, one
// key, one head, heads of width 1), where gorgonia might drop an axis, and a
// bias with -Inf entries, one of which hides a whole row: outputs, weights and
// gradients equal the fused op's (float64).
func TestComposedOddShapes(t *testing.T) {
	for ci, tc := range []struct {
		b, sq, sk, d, h int
		infBias         bool
	}{
		{1, 1, 1, 2, 1, false}, {1, 1, 3, 4, 4, false}, {3, 4, 1, 2, 2, false}, {1, 2, 2, 1, 1, false},
		{2, 3, 4, 4, 2, true},
	} {
		what := fmt.Sprintf("B %d, Sq %d, Sk %d, D %d, H %d, -Inf bias %v", tc.b, tc.sq, tc.sk, tc.d, tc.h, tc.infBias)
		rng := newRand(800 + uint64(ci))
		qv, kv, vv := uniform(rng, tc.b*tc.sq*tc.d, -2, 2), uniform(rng, tc.b*tc.sk*tc.d, -2, 2), uniform(rng, tc.b*tc.sk*tc.d, -2, 2)
		bs := tensor.Shape{tc.h, tc.sq, tc.sk}
		bv := uniform(rng, bs.TotalSize(), -1, 1)
		if tc.infBias {
			bv[0] = math.Inf(-1) // head 0, query 0: key 0 hidden
			for j := 0; j < tc.sk; j++ {
				bv[(1*tc.sq+2)*tc.sk+j] = math.Inf(-1) // head 1, query 2: everything hidden
			}
		}
		var got [2][][]float64
		for i, attend := range []attentionFunc{attendWith(Composed), attendWith(Fused)} {
			g := G.NewGraph()
			q := valued(g, tensor.Float64, tensor.Shape{tc.b, tc.sq, tc.d}, qv, "q")
			k := valued(g, tensor.Float64, tensor.Shape{tc.b, tc.sk, tc.d}, kv, "k")
			v := valued(g, tensor.Float64, tensor.Shape{tc.b, tc.sk, tc.d}, vv, "v")
			bias := valued(g, tensor.Float64, bs, bv, "bias")
			out, weights, err := attend(q, k, v, tc.h, nil, bias, nil)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			ag := attentionGraph{out: out, weights: weights}
			grads, err := G.Grad(ag.linearCost(t, 900+uint64(ci)), q, k, v, bias)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			got[i] = eval(t, nil, append(G.Nodes{out, weights}, grads...)...)
		}
		for i, name := range []string{"output", "weights", "dq", "dk", "dv", "dbias"} {
			if !allFinite(got[0][i]) {
				t.Errorf("%s: %s not finite: %v", what, name, got[0][i])
			}
			checkClose(t, what+": "+name, got[0][i], got[1][i], 1e-10)
		}
	}
}

// BenchmarkAttentionForwardBackward times one forward and backward pass of
// the composed and the fused attention, causal, H 4, dk 32, float32: B 1
// at n 128 and 512, and the nanoGPT preset's B 12 at n 65 (go test ./graph
// -run X -bench AttentionForwardBackward).
func BenchmarkAttentionForwardBackward(b *testing.B) {
	const heads, dk = 4, 32
	for _, size := range []struct{ batch, n int }{{1, 128}, {1, 512}, {12, 65}} {
		batch, n := size.batch, size.n
		for _, impl := range []struct {
			name   string
			attend attentionFunc
		}{{"composed", attendWith(Composed)}, {"fused", attendWith(Fused)}} {
			b.Run(fmt.Sprintf("%s/B=%d/n=%d", impl.name, batch, n), func(b *testing.B) {
				rng := newRand(1)
				g := G.NewGraph()
				shape := tensor.Shape{batch, n, heads * dk}
				var qkv G.Nodes
				for _, name := range []string{"q", "k", "v"} {
					qkv = append(qkv, valued(g, tensor.Float32, shape, uniform(rng, shape.TotalSize(), -1, 1), name))
				}
				m, err := MaskOf(Causal(), batch, n, n)
				if err != nil {
					b.Fatal(err)
				}
				mask, err := NewMaskConst(g, tensor.Float32, m, "mask")
				if err != nil {
					b.Fatal(err)
				}
				out, _, err := impl.attend(qkv[0], qkv[1], qkv[2], heads, mask, nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				cost, err := G.Sum(out)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := G.Grad(cost, qkv...); err != nil {
					b.Fatal(err)
				}
				vm, err := NewMachine(g)
				if err != nil {
					b.Fatal(err)
				}
				defer vm.Close()
				b.ResetTimer()
				for range b.N {
					if err := vm.RunAll(); err != nil {
						b.Fatal(err)
					}
					vm.Reset()
				}
			})
		}
	}
}
