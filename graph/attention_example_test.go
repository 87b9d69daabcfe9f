package graph_test

import (
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
)

// ALiBi (Press et al., "Train Short, Test Long", 2022) replaces positional
// embeddings with a bias of the attention scores that grows with distance:
// head h adds -m_h * (i - j) to the score of query i for key j, with slopes
// m_h = 2^(-8(h+1)/H) in a geometric sequence, so some heads look far and
// others near. The bias is (H, S, S), shared by the batch; the causal mask,
// not the bias, hides the future.
//
// Here the queries and keys are zero, so every dot product is 0 and the
// weights are softmax(bias) alone: in each head they decay with distance, by
// a factor of exp(-m_h) per position (head 0: e^-0.25 = 0.78), faster in the
// heads with larger slopes; keys after the query get exactly 0.
func ExampleAttend_bias() {
	const b, s, d, heads = 1, 5, 8, 4
	g := G.NewGraph()
	zeros := G.NewTensor(g, tensor.Float64, 3, G.WithShape(b, s, d), G.WithName("x"),
		G.WithValue(tensor.New(tensor.WithShape(b, s, d), tensor.Of(tensor.Float64))))
	q, k, v := zeros, zeros, zeros // (B, S, D): every score Q K^T is 0

	// bias[h, i, j] = -m_h * (i - j): 0 on the diagonal, more negative the
	// further key j lies behind query i. Entries j > i are hidden by the
	// causal mask whatever they hold.
	alibi := make([]float64, heads*s*s)
	for h := 0; h < heads; h++ {
		slope := math.Pow(2, -8*float64(h+1)/heads)
		for i := 0; i < s; i++ {
			for j := 0; j < s; j++ {
				alibi[(h*s+i)*s+j] = -slope * float64(i-j)
			}
		}
	}
	bias := G.NewTensor(g, tensor.Float64, 3, G.WithShape(heads, s, s), G.WithName("alibi"),
		G.WithValue(tensor.New(tensor.WithShape(heads, s, s), tensor.WithBacking(alibi))))
	_, weights, err := graph.Attend(q, k, v, graph.Spec{Heads: heads, MaskMod: graph.Causal(), Bias: bias})
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
	fmt.Println("weights of the last query over keys 0..4:")
	for h := 0; h < heads; h++ {
		fmt.Printf("head %d, slope 1/%-3v %.3f\n", h, math.Pow(2, 8*float64(h+1)/heads), p[(h*s+s-1)*s:][:s])
	}
	fmt.Printf("head 0, query 2:    %.3f\n", p[2*s:][:s])
	// Output:
	// weights of the last query over keys 0..4:
	// head 0, slope 1/4   [0.114 0.146 0.188 0.241 0.310]
	// head 1, slope 1/16  [0.176 0.187 0.199 0.212 0.226]
	// head 2, slope 1/64  [0.194 0.197 0.200 0.203 0.206]
	// head 3, slope 1/256 [0.198 0.199 0.200 0.201 0.202]
	// head 0, query 2:    [0.254 0.326 0.419 0.000 0.000]
}
