package layers

import (
	"math/rand/v2"
	"testing"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// benchDecoderStep measures one forward+backward pass of a decoder-only model
// of the given size, the unit of a training step.
func benchDecoderStep(b *testing.B, dt tensor.Dtype, batch, seq int, cfg StackConfig) {
	g := G.NewGraph()
	s, err := NewScope(g, dt, 1)
	if err != nil {
		b.Fatal(err)
	}
	d, err := NewDecoder(s, cfg)
	if err != nil {
		b.Fatal(err)
	}
	ids, _ := graph.NewIDs(g, batch, seq, cfg.Vocab, "ids")
	pad, _ := graph.NewMaskInput(g, dt, batch, seq, seq, "pad")
	logits, _, err := d.Forward(ids, pad)
	if err != nil {
		b.Fatal(err)
	}
	targets, _ := graph.NewTargets(g, dt, batch*seq, cfg.Vocab, "targets")
	cost, err := graph.CrossEntropy(logits, targets)
	if err != nil {
		b.Fatal(err)
	}
	params := graph.Nodes(d.Params())
	if _, err := G.Grad(cost, params...); err != nil {
		b.Fatal(err)
	}
	vm, err := graph.NewMachine(g)
	if err != nil {
		b.Fatal(err)
	}
	defer vm.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	tok := make([]int, batch*seq)
	w := make([]float64, batch*seq)
	lengths := make([]int, batch)
	for i := range tok {
		tok[i] = rng.IntN(cfg.Vocab)
		w[i] = 1
	}
	for i := range lengths {
		lengths[i] = seq
	}
	mask, _ := graph.KeyPadding(lengths, seq, seq)
	if err := ids.Set(tok); err != nil {
		b.Fatal(err)
	}
	if err := pad.Set(mask); err != nil {
		b.Fatal(err)
	}
	if err := targets.Set(tok, w); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := vm.RunAll(); err != nil {
			b.Fatal(err)
		}
		vm.Reset()
	}
}

// BenchmarkDecoderStepSort is the default `qkv train` model on minGPT's sort
// task (6 symbols over 3, 12 input positions).
func BenchmarkDecoderStepSort(b *testing.B) {
	benchDecoderStep(b, tensor.Float32, 64, 12, StackConfig{Vocab: 5, MaxLen: 12, Dim: 48, Heads: 4, Layers: 2, Hidden: 192, BlockOptions: BlockOptions{Bias: true}})
}

// BenchmarkDecoderStepNotes is the model the engine notes timed
// (B32/S32/D64/H4/FF256/V16).
func BenchmarkDecoderStepNotes(b *testing.B) {
	benchDecoderStep(b, tensor.Float32, 32, 32, StackConfig{Vocab: 16, MaxLen: 32, Dim: 64, Heads: 4, Layers: 2, Hidden: 256, BlockOptions: BlockOptions{Bias: true}})
}
