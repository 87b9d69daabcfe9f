package graph_test

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
)

// A batch of two sequences of up to four tokens, the second one only two
// long: its keys 2 and 3 are padding, which no query may attend to. The
// mask is a graph input bound once per batch from the lengths; a sequence
// that fills its row hides nothing, and the attention ops skip adding its
// mask at all. With equal values, every query averages the values of the
// keys it sees: sequence 0 all four, sequence 1 its first two.
func ExampleMaskNode_SetKeyLengths() {
	const b, s, d = 2, 4, 2
	g := G.NewGraph()
	zeros := G.NewTensor(g, tensor.Float64, 3, G.WithShape(b, s, d), G.WithName("qk"),
		G.WithValue(tensor.New(tensor.WithShape(b, s, d), tensor.Of(tensor.Float64))))
	// Value j of each sequence is (j, 10 j).
	vals := make([]float64, b*s*d)
	for i := 0; i < b; i++ {
		for j := 0; j < s; j++ {
			vals[(i*s+j)*d], vals[(i*s+j)*d+1] = float64(j), float64(10*j)
		}
	}
	v := G.NewTensor(g, tensor.Float64, 3, G.WithShape(b, s, d), G.WithName("v"),
		G.WithValue(tensor.New(tensor.WithShape(b, s, d), tensor.WithBacking(vals))))
	pad, err := graph.NewMaskInput(g, tensor.Float64, b, s, s, "pad")
	if err != nil {
		panic(err)
	}
	out, _, err := graph.Attend(zeros, zeros, v, graph.Spec{Heads: 1, Mask: pad})
	if err != nil {
		panic(err)
	}
	var o G.Value
	G.Read(out, &o)
	vm, err := graph.NewMachine(g)
	if err != nil {
		panic(err)
	}
	defer vm.Close()

	if err := pad.SetKeyLengths([]int{4, 2}); err != nil { // each batch
		panic(err)
	}
	if err := vm.RunAll(); err != nil {
		panic(err)
	}
	y, err := graph.Float64s(o) // (B, S, D)
	if err != nil {
		panic(err)
	}
	fmt.Println("key lengths:", pad.KeyLengths())
	fmt.Println("sequence 0, query 0:", y[0:2])
	fmt.Println("sequence 1, query 3:", y[(1*s+3)*d:][:2])
	// Output:
	// key lengths: [4 2]
	// sequence 0, query 0: [1.5 15]
	// sequence 1, query 3: [0.5 5]
}
