package optim_test

import (
	"fmt"
	"log"
	"math/rand/v2"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/optim"
)

// A model of your own from qkv layers, trained with qkv's AdamW and
// gradient clipping: embeddings, self-attention, the mean over positions
// and a linear classifier learn whether token 1 occurs in a sequence.
func Example() {
	const batch, seqLen, vocab, dim = 16, 4, 4, 8
	rng := rand.New(rand.NewPCG(1, 2))
	tokens, labels, weights := make([]int, batch*seqLen), make([]int, batch), make([]float64, batch)
	for b := range labels {
		for i := 0; i < seqLen; i++ {
			tokens[b*seqLen+i] = []int{0, 2, 3}[rng.IntN(3)]
		}
		if b%2 == 0 {
			tokens[b*seqLen+rng.IntN(seqLen)], labels[b] = 1, 1
		}
		weights[b] = 1
	}

	g := G.NewGraph()
	s := must(layers.NewScope(g, tensor.Float64, 7))
	emb := must(layers.NewEmbedding(s.Sub("emb"), layers.EmbeddingConfig{Vocab: vocab, Dim: dim}))
	attn := must(layers.NewMultiHeadAttention(s.Sub("attn"), layers.AttentionConfig{Dim: dim, Heads: 2, Bias: true}))
	cls := must(layers.NewLinear(s.Sub("cls"), layers.LinearConfig{In: dim, Out: 2, Bias: true}))
	ids := must(graph.NewIDs(g, batch, seqLen, vocab, "ids"))
	targets := must(graph.NewTargets(g, tensor.Float64, batch, 2, "labels"))
	x := must(emb.Forward(ids))                                // (B, S, D)
	h, _, err := attn.Forward(x, x, x, nil)                    // (B, S, D)
	logits := must(cls.Forward(must(G.Mean(must(h, err), 1)))) // (B, 2)
	loss := must(graph.CrossEntropy(logits, targets))

	params := append(append(emb.Params(), attn.Params()...), cls.Params()...)
	must(G.Grad(loss, graph.Nodes(params)...))
	vm := must(graph.NewMachine(g))
	defer vm.Close()
	adamw := must(optim.NewAdamW(optim.DefaultBeta1, optim.DefaultBeta2, optim.DefaultEps, optim.DefaultWeightDecay, optim.DecayWeights))
	opt := must(optim.New(adamw, params))

	var first, last float64
	for step := 0; step < 60; step++ {
		check(ids.Set(tokens))
		check(targets.Set(labels, weights))
		check(vm.RunAll())
		last = must(graph.Float64s(loss.Value()))[0]
		if step == 0 {
			first = last
		}
		must(optim.ClipGradNorm(params, 1))
		check(opt.Step(0.05)) // updates the weights and zeroes the gradients
		vm.Reset()
	}
	fmt.Printf("loss %.3f after 1 step, below 0.01 after 60: %v\n", first, last < 0.01)
	// Output:
	// loss 0.684 after 1 step, below 0.01 after 60: true
}

// must returns v, or stops the example on an error.
func must[T any](v T, err error) T {
	if err != nil {
		log.Fatal(err)
	}
	return v
}

// check stops the example on an error.
func check(err error) { must(0, err) }
