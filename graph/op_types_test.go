package graph

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// gorgonia unifies an op's declared type with its inputs' types without
// looking at ranks: an op that declares a 4-D input accepts a 3-D node (see
// the notes on v0.9.18), so a wrong declaration guards nothing and nothing
// fails. TestOpDeclaredTypes runs every custom op of this package, forward
// and backward, in one real graph and compares each op's declared input and
// output types with the nodes it was actually applied to.

// customOps are the String() kinds of every op this package defines; the test
// fails if one of them does not appear in its graph, so that a new op (or a
// new step of an op) must be added here and to the graph below.
var customOps = []string{
	"qkv.AttentionWeights", "qkv.AttentionMix",
	"qkv.AttentionGradQ", "qkv.AttentionGradK", "qkv.AttentionGradP", "qkv.AttentionGradV", "qkv.AttentionGradBias",
	"qkv.AttentionModDeriv", "qkv.AttentionGradSinks", "qkv.ScoreMods", "qkv.ScoreModsDeriv",
	"qkv.Linear", "qkv.LinearGradX", "qkv.LinearGradW", "qkv.LinearGradB",
	"qkv.LayerNorm", "qkv.LayerNormGradX", "qkv.LayerNormGradGain", "qkv.LayerNormGradBias",
	"qkv.Reshape",
	"qkv.FlashAttention", "qkv.FlashOutput", "qkv.FlashPad", "qkv.FlashGrad",
	"qkv.FlashGradQ", "qkv.FlashGradK", "qkv.FlashGradV", "qkv.FlashGradSinks",
	"qkv.RoPE", "qkv.RoPEInverse", "qkv.RMSNorm", "qkv.RMSNormGradX", "qkv.RMSNormGradGain",
	"qkv.HeadScale", "qkv.HeadScaleGradX", "qkv.HeadScaleGradScale",
	"qkv.Features", "qkv.FeaturesGrad", "qkv.LinearMask",
	"qkv.LinearAttention", "qkv.LinearAttentionGrad", "qkv.LinearAttentionGradQ", "qkv.LinearAttentionGradK", "qkv.LinearAttentionGradV",
	"qkv.LinearStepState", "qkv.LinearStepZ", "qkv.LinearStepOut",
}

// opKind is the op's String() without its parameters ("qkv.Reshape(2, 3)").
func opKind(op G.Op) string {
	s := fmt.Sprint(op)
	if i := strings.IndexAny(s, "(["); i >= 0 {
		s = s[:i]
	}
	return s
}

// isCustomOp reports whether op is defined in this package.
func isCustomOp(op G.Op) bool {
	if op == nil {
		return false
	}
	return reflect.TypeOf(op).PkgPath() == reflect.TypeOf(attentionOp{}).PkgPath()
}

// checkDeclaredType compares the type n's op declares with n's inputs (in
// order) and with n itself: the number of inputs, the rank of each, the rank
// of the result, and that every input and the result declared with one type
// variable share one dtype. After a run it also compares the ranks of the
// values the op actually received.
func checkDeclaredType(n *G.Node) error {
	op := n.Op()
	fn, ok := op.Type().(*hm.FunctionType)
	if !ok {
		return fmt.Errorf("%v: type %v is not a function type", op, op.Type())
	}
	ts := fn.FlatTypes() // inputs..., result
	var in []*G.Node
	for it := n.Graph().From(n.ID()); it.Next(); {
		in = append(in, it.Node().(*G.Node))
	}
	if len(ts)-1 != len(in) || op.Arity() != len(in) {
		return fmt.Errorf("%v: declares %d inputs (arity %d), applied to %d", op, len(ts)-1, op.Arity(), len(in))
	}
	dtypes := map[hm.TypeVariable]tensor.Dtype{}
	match := func(what string, declared hm.Type, got *G.Node) error {
		tt, ok := declared.(*G.TensorType)
		if !ok {
			return fmt.Errorf("%v: %s declared %v, not a tensor type", op, what, declared)
		}
		if tt.Dims != got.Shape().Dims() {
			return fmt.Errorf("%v: %s declared %d-D, but node %q is %v", op, what, tt.Dims, got.Name(), got.Shape())
		}
		if v := got.Value(); v != nil && v.Shape().Dims() != tt.Dims {
			return fmt.Errorf("%v: %s declared %d-D, but its value is %v", op, what, tt.Dims, v.Shape())
		}
		switch of := tt.Of.(type) {
		case hm.TypeVariable:
			if dt, ok := dtypes[of]; ok && dt != got.Dtype() {
				return fmt.Errorf("%v: %s is %v, but type variable %v is %v", op, what, got.Dtype(), of, dt)
			}
			dtypes[of] = got.Dtype()
		case tensor.Dtype:
			if of != got.Dtype() {
				return fmt.Errorf("%v: %s declared %v, node is %v", op, what, of, got.Dtype())
			}
		default:
			return fmt.Errorf("%v: %s declared of %v", op, what, tt.Of)
		}
		return nil
	}
	for i, c := range in {
		if err := match(fmt.Sprintf("input %d", i), ts[i], c); err != nil {
			return err
		}
	}
	return match("the result", ts[len(ts)-1], n)
}

// valued returns a node of dtype dt holding vals.
func valued(g *G.ExprGraph, dt tensor.Dtype, shape tensor.Shape, vals []float64, name string) *G.Node {
	return G.NewTensor(g, dt, len(shape), G.WithShape(shape...), G.WithName(name), G.WithValue(NewDense(dt, shape, vals)))
}

// everyOp builds, in g, a cost that goes through every custom op and every
// variant of its inputs (with and without mask, dropout and bias), and
// returns it with the nodes to differentiate it by.
func everyOp(t *testing.T, g *G.ExprGraph, dt tensor.Dtype) (cost *G.Node, wrt G.Nodes) {
	t.Helper()
	const b, sq, sk, d, heads = 2, 3, 4, 6, 2
	rng := newRand(5)
	val := func(shape tensor.Shape, name string) *G.Node {
		n := valued(g, dt, shape, roundTo(dt, uniform(rng, shape.TotalSize(), -1, 1)), name)
		wrt = append(wrt, n)
		return n
	}
	must := func(n *G.Node, err error) *G.Node {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	var outs G.Nodes
	add := func(n *G.Node) { outs = append(outs, n) }

	q, k, v := val(tensor.Shape{b, sq, d}, "q"), val(tensor.Shape{b, sk, d}, "k"), val(tensor.Shape{b, sk, d}, "v")
	pad, err := KeyPadding([]int{4, 2}, sq, sk)
	if err != nil {
		t.Fatal(err)
	}
	mask, err := NewMaskConst(g, dt, pad, "mask")
	if err != nil {
		t.Fatal(err)
	}
	keep := valued(g, dt, tensor.Shape{b, heads, sq, sk}, roundTo(dt, uniform(rng, b*heads*sq*sk, 0, 2)), "keep")
	shared := val(tensor.Shape{heads, sq, sk}, "shared bias")
	batched := val(tensor.Shape{b, heads, sq, sk}, "batched bias")
	for _, c := range []struct {
		mask       *MaskNode
		bias, keep *G.Node
	}{
		{nil, nil, nil}, {mask, nil, nil}, {nil, nil, keep}, {mask, nil, keep},
		{nil, shared, nil}, {mask, shared, keep}, {nil, batched, keep}, {mask, batched, nil},
	} {
		out, weights, err := Attend(q, k, v, Spec{Heads: heads, Mask: c.mask, Bias: c.bias, Keep: c.keep})
		if err != nil {
			t.Fatal(err)
		}
		add(out)
		add(weights)
	}

	for _, s := range []Spec{{}, {Mask: mask, MaskMod: Causal(), Tile: 2}} {
		s.Impl, s.Heads = Flash, heads
		add(must(outputOf(Attend(q, k, v, s))))
	}

	// Modifiers: a score modifier, a mask modifier, two KV heads of 3 and
	// sinks, in each implementation, with and without the mask tensor.
	kg, vg := val(tensor.Shape{b, sk, d / heads}, "k of 1 KV head"), val(tensor.Shape{b, sk, d / heads}, "v of 1 KV head")
	sinks := val(tensor.Shape{heads}, "sinks")
	soft, err := Softcap(2)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*MaskNode{nil, mask} {
		mods := Spec{Heads: heads, Mask: m, MaskMod: Causal(), ScoreMod: soft, KVHeads: 1, Sinks: sinks}
		fused := mods
		fused.Bias, fused.Keep = shared, keep
		out, weights, err := Attend(q, kg, vg, fused)
		if err != nil {
			t.Fatal(err)
		}
		add(out)
		add(weights)
		composed := mods
		composed.Impl = Composed
		if out, weights, err = Attend(q, kg, vg, composed); err != nil {
			t.Fatal(err)
		}
		add(out)
		add(weights)
		flash := mods
		flash.Impl, flash.Tile = Flash, 2
		add(must(outputOf(Attend(q, kg, vg, flash))))
	}

	x := val(tensor.Shape{b, sq, d}, "x")
	w, bias := val(tensor.Shape{d, 5}, "w"), val(tensor.Shape{5}, "b")
	add(must(Linear(x, w, bias)))
	add(must(Linear(x, w, nil)))
	x2 := val(tensor.Shape{b * sq, d}, "x2")
	add(must(Linear(x2, w, bias)))
	gain, shift := val(tensor.Shape{d}, "gain"), val(tensor.Shape{d}, "shift")
	add(must(LayerNorm(x, gain, shift, 1e-5)))
	add(must(Reshape(x, tensor.Shape{b * sq, d})))
	// QK-norm then RoPE over 3 heads of 2, and the interleaved pairing.
	pos, err := NewIDs(g, b, sq, 10, "pos")
	if err != nil {
		t.Fatal(err)
	}
	if err := pos.Set([]int{0, 1, 2, 5, 6, 7}); err != nil {
		t.Fatal(err)
	}
	add(must(RoPE(must(HeadRMSNorm(x, val(tensor.Shape{2}, "qk gain"), 3, 0)), 3, pos, RoPEOptions{})))
	add(must(RoPE(x, 3, pos, RoPEOptions{Interleaved: true})))
	add(must(RMSNorm(x2, gain, 1e-6)))
	add(must(HeadScale(x, val(tensor.Shape{3}, "temperature"), 3)))

	// Linear attention: features, the composed and fused forms, causal and
	// padded, and the (forward-only) step on inputs of its own.
	for _, f := range []FeatureMap{FeatureELU1, FeatureTaylor} {
		fq, fk := must(Features(q, heads, f)), must(Features(k, heads, f))
		for _, ls := range []LinearSpec{{Causal: true, Normalize: true, Chunk: 3}, {KeyLengths: []int{4, 0}, Impl: Composed}, {KeyLengths: []int{3, 4}}} {
			ls.Heads = heads
			queries := fq
			if ls.Causal {
				queries = fk // Sq = Sk
			}
			add(must(LinearAttend(queries, fk, v, ls)))
		}
	}
	hf := heads * FeatureTaylor.Dim(d/heads)
	stepIn := func(shape tensor.Shape, name string) *G.Node {
		return valued(g, dt, shape, roundTo(dt, uniform(rng, shape.TotalSize(), 0, 1)), name)
	}
	sq1, sk1, sv1 := stepIn(tensor.Shape{b, 1, hf}, "step phiQ"), stepIn(tensor.Shape{b, 1, hf}, "step phiK"), stepIn(tensor.Shape{b, 1, d}, "step v")
	state, z := stepIn(tensor.Shape{b, hf, d / heads}, "step state"), stepIn(tensor.Shape{b, 1, hf}, "step z")
	o, ns, nz, err := LinearStep(sq1, sk1, sv1, state, z, LinearSpec{Heads: heads, Normalize: true})
	if err != nil {
		t.Fatal(err)
	}
	add(o)
	add(ns)
	add(nz)

	for _, o := range outs {
		c := weightedSum(t, o, rng)
		if cost == nil {
			cost = c
		} else {
			cost = must(G.Add(cost, c))
		}
	}
	return cost, wrt
}

// TestOpDeclaredTypes checks every custom op's declared types against the
// nodes and values it is applied to in a real graph, forward and backward.
func TestOpDeclaredTypes(t *testing.T) {
	for _, dt := range floatTypes {
		g := G.NewGraph()
		cost, wrt := everyOp(t, g, dt)
		if _, err := G.Grad(cost, wrt...); err != nil {
			t.Fatal(err)
		}
		vm, err := NewMachine(g)
		if err != nil {
			t.Fatal(err)
		}
		if err := vm.RunAll(); err != nil {
			t.Fatalf("%v: run: %v", dt, err)
		}
		seen := map[string]int{}
		for _, n := range g.AllNodes() {
			if !isCustomOp(n.Op()) {
				continue
			}
			seen[opKind(n.Op())]++
			if err := checkDeclaredType(n); err != nil {
				t.Errorf("%v: %v", dt, err)
			}
		}
		vm.Close()
		for _, k := range customOps {
			if seen[k] == 0 {
				t.Errorf("%v: op %s is not in the graph: the test no longer covers it", dt, k)
			}
			delete(seen, k)
		}
		var extra []string
		for k := range seen {
			extra = append(extra, k)
		}
		sort.Strings(extra)
		if len(extra) > 0 {
			t.Errorf("%v: custom ops %v are not listed in customOps", dt, extra)
		}
	}
}
