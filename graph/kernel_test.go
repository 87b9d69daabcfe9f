package graph

import (
	"reflect"
	"slices"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// outputGraph builds a cost through every kernel op, forward and backward:
// layer norm, linear with and without bias, GELU, ReLU, fused attention
// with a mask and a score bias shared by the batch (whose gradient adds
// into its output), and flash attention. It returns the gradients.
func outputGraph(t *testing.T) (*G.ExprGraph, G.Nodes) {
	t.Helper()
	g := G.NewGraph()
	rng := newRand(7)
	const b, s, d = 2, 5, 8
	p := func(name string, shape ...int) *G.Node {
		return param(g, shape, uniform(rng, tensor.Shape(shape).TotalSize(), -1, 1), name).Node
	}
	x, gain, bias := p("x", b, s, d), p("gain", d), p("bias", d)
	w1, b1, w2, scoreBias := p("w1", d, d), p("b1", d), p("w2", d, d), p("scoreBias", 2, s, s)
	must := func(n *G.Node, err error) *G.Node {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	h := must(LayerNorm(x, gain, bias, 1e-5))
	h = must(GELU(must(Linear(h, w1, b1))))
	h = must(ReLU(must(Linear(h, w2, nil))))
	causal, err := MaskOf(Causal(), b, s, s)
	if err != nil {
		t.Fatal(err)
	}
	mask, err := NewMaskConst(g, tensor.Float64, causal, "causal")
	if err != nil {
		t.Fatal(err)
	}
	fused, _, err := Attend(h, h, h, Spec{Heads: 2, Mask: mask, Bias: scoreBias})
	if err != nil {
		t.Fatal(err)
	}
	flash, _, err := Attend(h, h, h, Spec{Impl: Flash, Heads: 2, Tile: 2, MaskMod: Causal()})
	if err != nil {
		t.Fatal(err)
	}
	cost := must(G.Add(weightedSum(t, fused, rng), weightedSum(t, flash, rng)))
	grads, err := G.Grad(cost, x, gain, bias, w1, b1, w2, scoreBias)
	if err != nil {
		t.Fatal(err)
	}
	return g, grads
}

// TestOutputsAreNotShared: every kernel op in a graph has an output of its
// own, so that reusing it from one run to the next never overwrites another
// node's value.
func TestOutputsAreNotShared(t *testing.T) {
	g, _ := outputGraph(t)
	owner := map[uintptr]string{}
	kernels := 0
	for _, n := range g.AllNodes() {
		v := reflect.ValueOf(n.Op())
		if v.Kind() != reflect.Struct {
			continue
		}
		f := v.FieldByName("buf")
		if !f.IsValid() || f.Type() != reflect.TypeFor[*output]() {
			continue
		}
		kernels++
		ptr := f.Pointer()
		if ptr == 0 {
			t.Errorf("%v (node %s) has no output: apply it with apply, not G.ApplyOp", n.Op(), n.Name())
			continue
		}
		if o, ok := owner[ptr]; ok {
			t.Errorf("%v (node %s) shares its output with %s", n.Op(), n.Name(), o)
		}
		owner[ptr] = n.Name()
	}
	if kernels < 20 {
		t.Errorf("found %d kernel ops in the graph, want at least 20: is the buf field still named buf?", kernels)
	}
}

// TestOutputsReusedAcrossRuns: running a graph again gives the same
// gradients bit for bit, including those of kernels that add into their
// output (a bias's and a shared score bias's).
func TestOutputsReusedAcrossRuns(t *testing.T) {
	g, grads := outputGraph(t)
	vm, err := NewMachine(g)
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	var first [][]float64
	for run := 0; run < 3; run++ {
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		var got [][]float64
		for _, gr := range grads {
			v, err := Float64s(gr.Value())
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, v)
		}
		vm.Reset()
		if run == 0 {
			first = got
			continue
		}
		for i := range got {
			if !slices.Equal(got[i], first[i]) {
				t.Errorf("run %d: gradient %d differs from the first run's: %v vs %v", run, i, got[i], first[i])
			}
		}
	}
}
