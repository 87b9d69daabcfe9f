package graph_test

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
)

// prefixLM is a user's mask modifier, written without touching qkv's
// kernels: the first n positions (the prompt) see each other both ways, as
// in T5's prefix LM and PaliGemma; every later position is causal.
type prefixLM struct{ n int }

func (m prefixLM) Visible(_, _, i, j int) bool { return j < m.n || j <= i }

// Block lets flash attention skip tiles: keys past the prefix and after
// every query are hidden; keys in the prefix, or at or before every query,
// are visible; anything else is asked entry by entry.
func (m prefixLM) Block(_, _, i0, i1, j0, j1 int) graph.Coverage {
	switch {
	case j0 >= m.n && j0 > i1-1:
		return graph.AllHidden
	case j1 <= m.n || j1-1 <= i0:
		return graph.AllVisible
	}
	return graph.Partial
}

func (m prefixLM) String() string { return fmt.Sprintf("PrefixLM(%d)", m.n) }

// ExampleSpec builds attention with a user's prefix-LM mask and a softcap
// and prints which keys each query weighs. The queries and keys are zero,
// so every visible key gets the same weight; the same Spec with Impl
// Composed or Flash computes the same weights.
func ExampleSpec() {
	const b, s, d, heads = 1, 5, 4, 1
	g := G.NewGraph()
	zeros := G.NewTensor(g, tensor.Float64, 3, G.WithShape(b, s, d), G.WithName("x"),
		G.WithValue(tensor.New(tensor.WithShape(b, s, d), tensor.Of(tensor.Float64))))
	softcap, err := graph.Softcap(50)
	if err != nil {
		panic(err)
	}
	spec := graph.Spec{Heads: heads, MaskMod: prefixLM{n: 3}, ScoreMod: softcap}
	_, weights, err := graph.Attend(zeros, zeros, zeros, spec)
	if err != nil {
		panic(err)
	}
	var w G.Value
	G.Read(weights, &w)
	vm, err := graph.NewMachine(g)
	if err != nil {
		panic(err)
	}
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		panic(err)
	}
	p, err := graph.Float64s(w) // (B, H, S, S)
	if err != nil {
		panic(err)
	}
	for i := 0; i < s; i++ {
		fmt.Printf("query %d: %.3f\n", i, p[i*s:][:s])
	}
	// Output:
	// query 0: [0.333 0.333 0.333 0.000 0.000]
	// query 1: [0.333 0.333 0.333 0.000 0.000]
	// query 2: [0.333 0.333 0.333 0.000 0.000]
	// query 3: [0.250 0.250 0.250 0.250 0.000]
	// query 4: [0.200 0.200 0.200 0.200 0.200]
}
