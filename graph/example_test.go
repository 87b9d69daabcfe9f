package graph_test

import (
	"fmt"
	"math"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Attention weights of one sequence of three tokens under a causal mask: query
// i sees keys 0..i only, so the first query puts all its weight on key 0 and
// the huge score of key 2 in the second row is ignored. The last row's scores
// 0, ln 2, ln 3 give weights proportional to 1, 2, 3.
func ExampleMaskedSoftmax() {
	g := G.NewGraph()
	scores := G.NewTensor(g, tensor.Float64, 3, G.WithShape(1, 3, 3), G.WithName("scores"))
	causal, err := graph.Causal(1, 3)
	if err != nil {
		panic(err)
	}
	mask, err := graph.NewMaskConst(g, tensor.Float64, causal, "causal")
	if err != nil {
		panic(err)
	}
	weights, err := graph.MaskedSoftmax(scores, mask)
	if err != nil {
		panic(err)
	}
	var out G.Value
	G.Read(weights, &out)

	vm, err := graph.NewMachine(g)
	if err != nil {
		panic(err)
	}
	defer vm.Close()
	err = G.Let(scores, tensor.New(tensor.WithShape(1, 3, 3), tensor.WithBacking([]float64{
		5, 0, 0,
		1, 1, 9,
		0, math.Ln2, math.Log(3),
	})))
	if err != nil {
		panic(err)
	}
	if err := vm.RunAll(); err != nil {
		panic(err)
	}
	w, err := graph.Float64s(out)
	if err != nil {
		panic(err)
	}
	fmt.Println("causal:", mask.Causal)
	for i := 0; i < 3; i++ {
		fmt.Printf("query %d: %.3f\n", i, w[3*i:3*i+3])
	}
	// Output:
	// causal: true
	// query 0: [1.000 0.000 0.000]
	// query 1: [0.500 0.500 0.000]
	// query 2: [0.167 0.333 0.500]
}
