package layers_test

import (
	"fmt"
	"log"
	"math/rand/v2"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/layers"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// A model of your own around MultiHeadAttention: a tiny sequence classifier,
// embeddings → self-attention → mean over positions → Linear → cross-entropy,
// trained with plain SGD to tell whether token 1 occurs in a sequence.
func ExampleMultiHeadAttention() {
	const (
		batch, seqLen, vocab, dim = 16, 4, 4, 8
		steps                     = 40
		lr                        = 0.5
	)

	// The data: half the sequences contain token 1 (label 1), half do not.
	rng := rand.New(rand.NewPCG(1, 2))
	tokens := make([]int, batch*seqLen)
	labels := make([]int, batch)
	for b := 0; b < batch; b++ {
		for i := 0; i < seqLen; i++ {
			tokens[b*seqLen+i] = []int{0, 2, 3}[rng.IntN(3)]
		}
		if b%2 == 0 {
			tokens[b*seqLen+rng.IntN(seqLen)] = 1
			labels[b] = 1
		}
	}
	weights := make([]float64, batch)
	for i := range weights {
		weights[i] = 1
	}

	// The model, built once.
	g := G.NewGraph()
	s, err := layers.NewScope(g, tensor.Float64, 7)
	if err != nil {
		log.Fatal(err)
	}
	emb, err := layers.NewEmbedding(s.Sub("emb"), layers.EmbeddingConfig{Vocab: vocab, Dim: dim})
	if err != nil {
		log.Fatal(err)
	}
	attn, err := layers.NewMultiHeadAttention(s.Sub("attn"), layers.AttentionConfig{Dim: dim, Heads: 2, Bias: true})
	if err != nil {
		log.Fatal(err)
	}
	cls, err := layers.NewLinear(s.Sub("cls"), layers.LinearConfig{In: dim, Out: 2, Bias: true})
	if err != nil {
		log.Fatal(err)
	}
	ids, err := graph.NewIDs(g, batch, seqLen, vocab, "ids")
	if err != nil {
		log.Fatal(err)
	}
	targets, err := graph.NewTargets(g, tensor.Float64, batch, 2, "labels")
	if err != nil {
		log.Fatal(err)
	}
	x, err := emb.Forward(ids) // (B, S, D)
	if err != nil {
		log.Fatal(err)
	}
	h, _, err := attn.Forward(x, x, x, nil) // self-attention, (B, S, D)
	if err != nil {
		log.Fatal(err)
	}
	pooled, err := G.Mean(h, 1) // (B, D): gorgonia reduces axis 1 of a 3-D tensor correctly
	if err != nil {
		log.Fatal(err)
	}
	logits, err := cls.Forward(pooled) // (B, 2)
	if err != nil {
		log.Fatal(err)
	}
	loss, err := graph.CrossEntropy(logits, targets)
	if err != nil {
		log.Fatal(err)
	}

	var params []graph.Param
	params = append(params, emb.Params()...)
	params = append(params, attn.Params()...)
	params = append(params, cls.Params()...)
	if _, err := G.Grad(loss, graph.Nodes(params)...); err != nil {
		log.Fatal(err)
	}
	var lossVal, logitsVal G.Value
	G.Read(loss, &lossVal)
	G.Read(logits, &logitsVal)
	vm := G.NewTapeMachine(g, G.BindDualValues(graph.Nodes(params)...))
	defer vm.Close()

	// Plain SGD: bind the batch, run, step, zero the gradients, reset.
	var first, last float64
	for step := 0; step <= steps; step++ {
		if err := ids.Set(tokens); err != nil {
			log.Fatal(err)
		}
		if err := targets.Set(labels, weights); err != nil {
			log.Fatal(err)
		}
		if err := vm.RunAll(); err != nil {
			log.Fatal(err)
		}
		last = lossVal.Data().(float64)
		if step == 0 {
			first = last
		}
		if step == steps {
			break // the last run only evaluates
		}
		for _, p := range params {
			grad, err := p.Node.Grad()
			if err != nil {
				log.Fatal(err)
			}
			// The machine adds each run's gradient to the one before
			// (vm.Reset does not clear it): zero it after the step.
			w, dw := p.Node.Value().Data().([]float64), grad.Data().([]float64)
			for i := range w {
				w[i] -= lr * dw[i]
				dw[i] = 0
			}
		}
		vm.Reset()
	}

	out, err := graph.Float64s(logitsVal) // copy before the machine reuses it
	if err != nil {
		log.Fatal(err)
	}
	correct := 0
	for b, label := range labels {
		predicted := 0
		if out[2*b+1] > out[2*b] {
			predicted = 1
		}
		if predicted == label {
			correct++
		}
	}
	fmt.Println("loss decreased:", last < first/2)
	fmt.Printf("accuracy: %.2f\n", float64(correct)/batch)
	// Output:
	// loss decreased: true
	// accuracy: 1.00
}
