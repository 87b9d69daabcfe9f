package layers

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Gradient checks in float64: gorgonia's symbolic gradient of a scalar cost
// against central finite differences (graph.GradCheck), for every parameter
// of every layer, after every parameter has been perturbed to random values
// (zero biases and unit gains would hide wrong gradients). Layers whose output
// is not a scalar are checked through cost = sum(output ⊙ C) for a fixed
// random C; inputs that must pass gradients through are learnable nodes.

const gradTol = 1e-6

// gradFloor is the smallest gradient norm GradCheck divides by. The key bias
// bk has a true gradient of exactly 0 (softmax is shift-invariant), so its
// "relative" error is the finite-difference noise, eps_mach |cost| / eps, a few
// 1e-9 here, over the floor: 1e-2 keeps that under gradTol. Every other
// parameter is required below to have a gradient norm above the floor, so its
// error is relative to its own norm, as if there were no floor.
const gradFloor = 1e-2

type gradCase struct {
	name string
	// build makes the layer in s, returns the scalar cost and the parameters
	// to check (the layer's own and any learnable inputs).
	build func(t *testing.T, s *Scope, rng *rand.Rand) (cost *G.Node, params []graph.Param)
	// names must each appear in the report.
	names []string
	// keyBiasMoves says the key bias bk reaches the cost: true once a sink,
	// a softcap, QK-norm or RoPE (which turns bk differently at each
	// position) breaks the shift-invariance that otherwise makes its
	// gradient exactly 0; ALiBi and a window keep it.
	keyBiasMoves bool
}

// selfAttention builds attention over one learnable x (B, S, D) passed as
// query, key and value.
func selfAttention(cfg AttentionConfig, b, seqLen int, mask func(t *testing.T, s *Scope) *graph.MaskNode) func(*testing.T, *Scope, *rand.Rand) (*G.Node, []graph.Param) {
	return func(t *testing.T, s *Scope, rng *rand.Rand) (*G.Node, []graph.Param) {
		a, err := NewMultiHeadAttention(s.Sub("attn"), cfg)
		if err != nil {
			t.Fatal(err)
		}
		x := inputParam(s.Graph(), rng, tensor.Shape{b, seqLen, cfg.Dim}, "x")
		var m *graph.MaskNode
		if mask != nil {
			m = mask(t, s)
		}
		out, _, err := a.Forward(x.Node, x.Node, x.Node, m)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range a.Dropouts() {
			if err := d.Resample(3); err != nil {
				t.Fatal(err)
			}
		}
		cost, _ := weightedSum(t, out, rng)
		return cost, append(a.Params(), x)
	}
}

// padMask returns a mask builder for key padding with the given lengths,
// optionally hiding every key from query (1, 1) as well.
func padMask(lengths []int, seqLen int, blankRow bool) func(*testing.T, *Scope) *graph.MaskNode {
	return func(t *testing.T, s *Scope) *graph.MaskNode {
		m, err := graph.KeyPadding(lengths, seqLen, seqLen)
		if err != nil {
			t.Fatal(err)
		}
		if blankRow {
			for j := 0; j < seqLen; j++ {
				m.Allow[(1*seqLen+1)*seqLen+j] = false
			}
		}
		return maskInput(t, s, m, "pad")
	}
}

func blockCase(cfg BlockConfig, b, seqLen int, mask func(*testing.T, *Scope) *graph.MaskNode) func(*testing.T, *Scope, *rand.Rand) (*G.Node, []graph.Param) {
	return func(t *testing.T, s *Scope, rng *rand.Rand) (*G.Node, []graph.Param) {
		blk, err := NewBlock(s.Sub("blocks").Sub("0"), cfg)
		if err != nil {
			t.Fatal(err)
		}
		x := inputParam(s.Graph(), rng, tensor.Shape{b, seqLen, cfg.Dim}, "x")
		var m *graph.MaskNode
		if mask != nil {
			m = mask(t, s)
		}
		out, _, err := blk.Forward(x.Node, m)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range blk.Dropouts() {
			if err := d.Resample(5); err != nil {
				t.Fatal(err)
			}
		}
		cost, _ := weightedSum(t, out, rng)
		return cost, append(blk.Params(), x)
	}
}

var attnNames = []string{"attn.wq", "attn.bq", "attn.wk", "attn.bk", "attn.wv", "attn.bv", "attn.wo", "attn.bo", "x"}

// allVariants is every AttentionVariants at once; allVariantNames the
// parameters an attention with them has.
var (
	allVariants     = AttentionVariants{KVHeads: 1, Softcap: 1.5, Sinks: true, QKNorm: true, HeadTemperature: true}
	allVariantNames = append([]string{"attn.sinks", "attn.q_norm.gain", "attn.k_norm.gain", "attn.temperature"}, attnNames...)
)

// variantAttn is a 4-head attention of width 8 with biases, the variants v,
// the implementation impl and the positions pos.
func variantAttn(v AttentionVariants, impl AttentionImpl, pos PositionsKind) AttentionConfig {
	return AttentionConfig{Dim: 8, Heads: 4, Bias: true, Impl: impl, Positions: pos, AttentionVariants: v}
}

// withCausal is c, causal.
func withCausal(c AttentionConfig) AttentionConfig {
	c.Causal = true
	return c
}

var gradCases = []gradCase{
	{name: "linear/bias", names: []string{"lin.w", "lin.b", "x"}, build: func(t *testing.T, s *Scope, rng *rand.Rand) (*G.Node, []graph.Param) {
		l, err := NewLinear(s.Sub("lin"), LinearConfig{In: 5, Out: 4, Bias: true})
		if err != nil {
			t.Fatal(err)
		}
		x := inputParam(s.Graph(), rng, tensor.Shape{2, 3, 5}, "x")
		out, err := l.Forward(x.Node)
		if err != nil {
			t.Fatal(err)
		}
		cost, _ := weightedSum(t, out, rng)
		return cost, append(l.Params(), x)
	}},
	{name: "linear/no bias 2-D", names: []string{"lin.w", "x"}, build: func(t *testing.T, s *Scope, rng *rand.Rand) (*G.Node, []graph.Param) {
		l, err := NewLinear(s.Sub("lin"), LinearConfig{In: 5, Out: 3})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Params()) != 1 {
			t.Errorf("linear without bias has %d parameters", len(l.Params()))
		}
		x := inputParam(s.Graph(), rng, tensor.Shape{6, 5}, "x")
		out, err := l.Forward(x.Node)
		if err != nil {
			t.Fatal(err)
		}
		cost, _ := weightedSum(t, out, rng)
		return cost, append(l.Params(), x)
	}},
	{name: "embedding/repeated ids", names: []string{"emb.table"}, build: func(t *testing.T, s *Scope, rng *rand.Rand) (*G.Node, []graph.Param) {
		e, err := NewEmbedding(s.Sub("emb"), EmbeddingConfig{Vocab: 6, Dim: 8})
		if err != nil {
			t.Fatal(err)
		}
		ids, err := graph.NewIDs(s.Graph(), 2, 4, 6, "ids")
		if err != nil {
			t.Fatal(err)
		}
		if err := ids.Set([]int{1, 4, 1, 0, 5, 5, 1, 2}); err != nil { // 3 never used, 1 three times
			t.Fatal(err)
		}
		out, err := e.Forward(ids)
		if err != nil {
			t.Fatal(err)
		}
		cost, _ := weightedSum(t, out, rng)
		return cost, e.Params()
	}},
	{name: "positions/learned", names: []string{"pos.table", "x"}, build: positionsGrad(PositionsLearned, 5, 3)},
	{name: "positions/learned S=MaxLen", names: []string{"pos.table", "x"}, build: positionsGrad(PositionsLearned, 4, 4)},
	{name: "positions/sinusoidal", names: []string{"x"}, build: positionsGrad(PositionsSinusoidal, 5, 3)},
	{name: "positions/none", names: []string{"x"}, build: positionsGrad(PositionsNone, 5, 3)},
	{name: "layernorm", names: []string{"ln.gain", "ln.bias", "x"}, build: func(t *testing.T, s *Scope, rng *rand.Rand) (*G.Node, []graph.Param) {
		ln, err := NewLayerNorm(s.Sub("ln"), LayerNormConfig{Dim: 8})
		if err != nil {
			t.Fatal(err)
		}
		x := inputParam(s.Graph(), rng, tensor.Shape{2, 3, 8}, "x")
		out, err := ln.Forward(x.Node)
		if err != nil {
			t.Fatal(err)
		}
		cost, _ := weightedSum(t, out, rng)
		return cost, append(ln.Params(), x)
	}},
	{name: "feedforward/relu", names: []string{"ff.w1", "ff.b1", "ff.w2", "ff.b2", "x"}, build: ffGrad(FeedForwardConfig{Dim: 8, Hidden: 16, Bias: true})},
	{name: "feedforward/gelu", names: []string{"ff.w1", "ff.b1", "ff.w2", "ff.b2", "x"}, build: ffGrad(FeedForwardConfig{Dim: 8, Hidden: 16, Activation: ActivationGELU, Bias: true})},
	{name: "feedforward/relu no bias", names: []string{"ff.w1", "ff.w2", "x"}, build: ffGrad(FeedForwardConfig{Dim: 8, Hidden: 16})},
	{name: "attention/self", names: attnNames, build: selfAttention(AttentionConfig{Dim: 8, Heads: 2, Bias: true}, 2, 4, nil)},
	{name: "attention/self causal", names: attnNames, build: selfAttention(AttentionConfig{Dim: 8, Heads: 2, Bias: true, Causal: true}, 2, 4, nil)},
	{name: "attention/self padding mask + blank row", names: attnNames, build: selfAttention(AttentionConfig{Dim: 8, Heads: 2, Bias: true}, 2, 4, padMask([]int{4, 2}, 4, true))},
	{name: "attention/self causal+padding", names: attnNames, build: selfAttention(AttentionConfig{Dim: 8, Heads: 2, Bias: true, Causal: true}, 2, 4, padMask([]int{3, 4}, 4, false))},
	{name: "attention/self 4 heads no bias", names: []string{"attn.wq", "attn.wk", "attn.wv", "attn.wo", "x"}, build: selfAttention(AttentionConfig{Dim: 8, Heads: 4}, 2, 3, nil)},
	{name: "attention/self dropout", names: attnNames, build: selfAttention(AttentionConfig{Dim: 8, Heads: 2, Bias: true, Dropout: 0.3}, 2, 4, nil)},
	{name: "attention/self GQA 4 heads over 2", names: attnNames, build: selfAttention(variantAttn(AttentionVariants{KVHeads: 2}, "", ""), 2, 4, nil)},
	{name: "attention/self MQA causal", names: attnNames, build: selfAttention(withCausal(variantAttn(AttentionVariants{KVHeads: 1}, "", "")), 2, 4, nil)},
	{name: "attention/self softcap 0.5", keyBiasMoves: true, names: attnNames, build: selfAttention(variantAttn(AttentionVariants{Softcap: 0.5}, "", ""), 2, 4, nil)},
	{name: "attention/self sinks + padding + blank row", keyBiasMoves: true, names: append([]string{"attn.sinks"}, attnNames...), build: selfAttention(variantAttn(AttentionVariants{Sinks: true}, "", ""), 2, 4, padMask([]int{4, 2}, 4, true))},
	{name: "attention/self QK-norm", keyBiasMoves: true, names: append([]string{"attn.q_norm.gain", "attn.k_norm.gain"}, attnNames...), build: selfAttention(variantAttn(AttentionVariants{QKNorm: true}, "", ""), 2, 4, nil)},
	{name: "attention/self RoPE causal", keyBiasMoves: true, names: attnNames, build: selfAttention(withCausal(AttentionConfig{Dim: 8, Heads: 2, Bias: true, Positions: PositionsRoPE}), 2, 4, nil)},
	{name: "attention/self RoPE interleaved, padding", keyBiasMoves: true, names: attnNames, build: selfAttention(AttentionConfig{Dim: 8, Heads: 2, Bias: true, Positions: PositionsRoPEInterleaved, AttentionVariants: AttentionVariants{RoPEBase: 50}}, 2, 4, padMask([]int{4, 2}, 4, false))},
	{name: "attention/self ALiBi causal", names: attnNames, build: selfAttention(withCausal(variantAttn(AttentionVariants{}, "", PositionsALiBi)), 2, 4, nil)},
	{name: "attention/self bidirectional ALiBi + band 2", names: attnNames, build: selfAttention(variantAttn(AttentionVariants{Window: 2}, "", PositionsALiBi), 2, 5, nil)},
	{name: "attention/self window 2 causal", names: attnNames, build: selfAttention(withCausal(variantAttn(AttentionVariants{Window: 2}, "", "")), 2, 5, nil)},
	{name: "attention/self all variants, RoPE, window 3, flash", keyBiasMoves: true, names: allVariantNames, build: selfAttention(withCausal(variantAttn(withWindow(allVariants, 3), AttentionFlash, PositionsRoPE)), 2, 5, padMask([]int{3, 5}, 5, false))},
	{name: "attention/self all variants fused", keyBiasMoves: true, names: allVariantNames, build: selfAttention(withCausal(variantAttn(allVariants, AttentionFused, "")), 2, 4, padMask([]int{3, 4}, 4, false))},
	{name: "attention/self all variants composed", keyBiasMoves: true, names: allVariantNames, build: selfAttention(withCausal(variantAttn(allVariants, AttentionComposed, "")), 2, 4, padMask([]int{3, 4}, 4, false))},
	{name: "attention/self all variants flash", keyBiasMoves: true, names: allVariantNames, build: selfAttention(withCausal(variantAttn(allVariants, AttentionFlash, "")), 2, 4, padMask([]int{3, 4}, 4, false))},
	{name: "attention/cross", names: []string{"attn.wq", "attn.bq", "attn.wk", "attn.bk", "attn.wv", "attn.bv", "attn.wo", "attn.bo", "q", "k", "v"}, build: func(t *testing.T, s *Scope, rng *rand.Rand) (*G.Node, []graph.Param) {
		const b, sq, sk = 2, 3, 5
		cfg := AttentionConfig{Dim: 8, Heads: 2, KeyDim: 6, ValueDim: 4, Bias: true}
		a, err := NewMultiHeadAttention(s.Sub("attn"), cfg)
		if err != nil {
			t.Fatal(err)
		}
		g := s.Graph()
		q := inputParam(g, rng, tensor.Shape{b, sq, 8}, "q")
		k := inputParam(g, rng, tensor.Shape{b, sk, 6}, "k")
		v := inputParam(g, rng, tensor.Shape{b, sk, 4}, "v")
		m, err := graph.KeyPadding([]int{5, 3}, sq, sk)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := a.Forward(q.Node, k.Node, v.Node, maskInput(t, s, m, "pad"))
		if err != nil {
			t.Fatal(err)
		}
		cost, _ := weightedSum(t, out, rng)
		return cost, append(a.Params(), q, k, v)
	}},
	{name: "block/pre-LN causal relu", build: blockCase(BlockConfig{Dim: 8, Heads: 2, Hidden: 16, Causal: true, BlockOptions: BlockOptions{Bias: true}}, 2, 4, nil)},
	{name: "block/pre-LN padding gelu dropout", build: blockCase(BlockConfig{Dim: 8, Heads: 2, Hidden: 16, BlockOptions: BlockOptions{Activation: ActivationGELU, Bias: true, Dropout: 0.2, AttnDropout: 0.25}}, 2, 4, padMask([]int{4, 2}, 4, false))},
	{name: "block/post-LN padding gelu", build: blockCase(BlockConfig{Dim: 8, Heads: 2, Hidden: 16, BlockOptions: BlockOptions{Activation: ActivationGELU, PostLN: true, Bias: true}}, 2, 4, padMask([]int{2, 4}, 4, false))},
	{name: "block/post-LN causal relu no bias", build: blockCase(BlockConfig{Dim: 8, Heads: 2, Hidden: 16, Causal: true, BlockOptions: BlockOptions{PostLN: true}}, 2, 4, nil)},
	{name: "encoder/key padding", names: []string{"tok_emb.table", "pos_emb.table", "blocks.0.attn.wq", "blocks.0.ff.w2", "ln_f.gain"}, build: func(t *testing.T, s *Scope, rng *rand.Rand) (*G.Node, []graph.Param) {
		cfg := StackConfig{Vocab: 6, MaxLen: 5, Dim: 8, Heads: 2, Layers: 1, Hidden: 16, BlockOptions: BlockOptions{Bias: true}}
		e, err := NewEncoder(s, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := graph.NewIDs(s.Graph(), 2, 4, cfg.Vocab, "ids")
		if err != nil {
			t.Fatal(err)
		}
		if err := ids.Set([]int{1, 2, 3, 0, 5, 4, 4, 0}); err != nil {
			t.Fatal(err)
		}
		_, pad := paddingMask(t, s, []int{4, 3}, 4, 4, "pad")
		out, _, err := e.Forward(ids, pad)
		if err != nil {
			t.Fatal(err)
		}
		cost, _ := weightedSum(t, out, rng)
		return cost, e.Params()
	}},
	{name: "decoder/cross-entropy", names: []string{"tok_emb.table", "pos_emb.table", "blocks.0.ln1.gain", "blocks.0.attn.wq", "blocks.0.attn.wk", "blocks.0.attn.wv", "blocks.0.attn.wo", "blocks.0.ff.w1", "ln_f.bias", "head.w", "head.b"},
		build: decoderCE(StackConfig{Vocab: 6, MaxLen: 5, Dim: 8, Heads: 2, Layers: 1, Hidden: 16, BlockOptions: BlockOptions{Bias: true}})},
	// A tied head: tok_emb.table's gradient is the lookup's plus the head's
	// (logits = x Eᵀ), checked as one against finite differences of the
	// whole cost; there is no head.w or head.b (TestTiedDecoderParams).
	{name: "decoder/tied", names: []string{"tok_emb.table", "pos_emb.table", "blocks.0.attn.wo", "ln_f.gain", "ln_f.bias"},
		build: decoderCE(StackConfig{Vocab: 6, MaxLen: 5, Dim: 8, Heads: 2, Layers: 1, Hidden: 16, TieEmbeddings: true, BlockOptions: BlockOptions{Bias: true}})},
	{name: "decoder/bias-free-norm", names: []string{"blocks.0.ln1.gain", "blocks.0.ln2.gain", "ln_f.gain", "head.w", "head.b"},
		build: decoderCE(StackConfig{Vocab: 6, MaxLen: 5, Dim: 8, Heads: 2, Layers: 1, Hidden: 16, BlockOptions: BlockOptions{Bias: true, BiasFreeNorm: true}})},
	// nanoGPT's bias=False model: tied, no ln biases, no projection biases,
	// GPT-2's init (which perturb overwrites, but which must build).
	{name: "decoder/nanogpt", names: []string{"tok_emb.table", "pos_emb.table", "blocks.0.ln1.gain", "blocks.1.ff.w2", "ln_f.gain"},
		build: decoderCE(StackConfig{Vocab: 6, MaxLen: 5, Dim: 8, Heads: 2, Layers: 2, Hidden: 16, TieEmbeddings: true, Init: InitGPT2, BlockOptions: BlockOptions{Activation: ActivationGELU, BiasFreeNorm: true}})},
	{name: "attention/self head temperature causal", names: append([]string{"attn.temperature"}, attnNames...), build: selfAttention(withCausal(variantAttn(AttentionVariants{HeadTemperature: true}, "", "")), 2, 4, nil)},
	// Linear attention: every feature map, causal and not, with and without
	// its denominator, padded, and the composed (quadratic) form; a block
	// and a hybrid decoder of linear, windowed and softmax blocks.
	{name: "linear/taylor causal", keyBiasMoves: true, names: linNames, build: linearGrad(LinearAttentionConfig{Dim: 8, Heads: 2, Causal: true, Bias: true}, nil)},
	{name: "linear/elu1 causal padded", keyBiasMoves: true, names: linNames, build: linearGrad(LinearAttentionConfig{Dim: 8, Heads: 2, Causal: true, Bias: true, LinearOptions: LinearOptions{FeatureMap: graph.FeatureELU1, LinearChunk: 3}}, []int{5, 2})},
	{name: "linear/relu bidirectional padded", keyBiasMoves: true, names: linNames, build: linearGrad(LinearAttentionConfig{Dim: 8, Heads: 2, Bias: true, LinearOptions: LinearOptions{FeatureMap: graph.FeatureReLU}}, []int{5, 3})},
	{name: "linear/identity unnormalized", keyBiasMoves: true, names: linNames, build: linearGrad(LinearAttentionConfig{Dim: 8, Heads: 2, Causal: true, Bias: true, LinearOptions: LinearOptions{FeatureMap: graph.FeatureIdentity, LinearNorm: LinearNormNone, LinearChunk: 2}}, nil)},
	{name: "linear/taylor feature dim 3 composed", keyBiasMoves: true, names: linNames, build: linearGrad(LinearAttentionConfig{Dim: 8, Heads: 2, Causal: true, Bias: true, Impl: AttentionComposed, LinearOptions: LinearOptions{FeatureDim: 3}}, []int{5, 4})},
	{name: "block/linear causal", keyBiasMoves: true, names: []string{"blocks.0.attn.wq", "blocks.0.attn.bk", "blocks.0.ff.w1", "x"}, build: blockCase(BlockConfig{Dim: 8, Heads: 2, Hidden: 16, Causal: true, Linear: true, BlockOptions: BlockOptions{Activation: ActivationGELU, Bias: true}}, 2, 4, nil)},
	// Without projection biases: the softmax blocks' bk would get exactly 0
	// and the linear block's would not.
	{name: "decoder/hybrid linear,window:2,softmax", names: []string{"blocks.0.attn.wq", "blocks.1.attn.wq", "blocks.2.attn.wk", "head.w"},
		build: decoderCE(StackConfig{Vocab: 6, MaxLen: 5, Dim: 8, Heads: 2, Layers: 3, Hidden: 16, LayerKinds: "linear,window:2,softmax", BlockOptions: BlockOptions{Activation: ActivationGELU, LinearOptions: LinearOptions{FeatureDim: 2}}})},
}

// linNames are the parameters of a linear attention with biases.
var linNames = []string{"attn.wq", "attn.bq", "attn.wk", "attn.bk", "attn.wv", "attn.bv", "attn.wo", "attn.bo", "x"}

// linearGrad builds linear attention over one learnable x (2, 5, D), with
// key-padding lengths if not nil.
func linearGrad(cfg LinearAttentionConfig, lengths []int) func(*testing.T, *Scope, *rand.Rand) (*G.Node, []graph.Param) {
	return func(t *testing.T, s *Scope, rng *rand.Rand) (*G.Node, []graph.Param) {
		a, err := NewLinearAttention(s.Sub("attn"), cfg)
		if err != nil {
			t.Fatal(err)
		}
		const b, seqLen = 2, 5
		x := inputParam(s.Graph(), rng, tensor.Shape{b, seqLen, cfg.Dim}, "x")
		var m *graph.MaskNode
		if lengths != nil {
			m = padMask(lengths, seqLen, false)(t, s)
		}
		out, err := a.Forward(x.Node, m)
		if err != nil {
			t.Fatal(err)
		}
		cost, _ := weightedSum(t, out, rng)
		return cost, append(a.Params(), x)
	}
}

func positionsGrad(kind PositionsKind, maxLen, seqLen int) func(*testing.T, *Scope, *rand.Rand) (*G.Node, []graph.Param) {
	return func(t *testing.T, s *Scope, rng *rand.Rand) (*G.Node, []graph.Param) {
		p, err := NewPositions(s.Sub("pos"), PositionsConfig{Kind: kind, MaxLen: maxLen, Dim: 8})
		if err != nil {
			t.Fatal(err)
		}
		x := inputParam(s.Graph(), rng, tensor.Shape{2, seqLen, 8}, "x")
		out, err := p.Forward(x.Node)
		if err != nil {
			t.Fatal(err)
		}
		cost, _ := weightedSum(t, out, rng)
		return cost, append(p.Params(), x)
	}
}

func ffGrad(cfg FeedForwardConfig) func(*testing.T, *Scope, *rand.Rand) (*G.Node, []graph.Param) {
	return func(t *testing.T, s *Scope, rng *rand.Rand) (*G.Node, []graph.Param) {
		f, err := NewFeedForward(s.Sub("ff"), cfg)
		if err != nil {
			t.Fatal(err)
		}
		x := inputParam(s.Graph(), rng, tensor.Shape{2, 3, cfg.Dim}, "x")
		out, err := f.Forward(x.Node)
		if err != nil {
			t.Fatal(err)
		}
		cost, _ := weightedSum(t, out, rng)
		return cost, append(f.Params(), x)
	}
}

func TestGradients(t *testing.T) {
	worst := map[string]float64{}      // over every parameter
	worstNotBK := map[string]float64{} // without the zero-gradient key bias
	for i, tc := range gradCases {
		t.Run(tc.name, func(t *testing.T) {
			rng := newRand(500 + uint64(i))
			s := newScope(t, tensor.Float64, 21)
			cost, params := tc.build(t, s, rng)
			perturb(t, params, rng)
			report, err := graph.GradCheck(cost, params, nil, graph.GradCheckConfig{Floor: gradFloor})
			if err != nil {
				t.Fatal(err)
			}
			if len(report) != len(params) {
				t.Fatalf("report has %d entries for %d parameters:\n%v", len(report), len(params), report)
			}
			named := map[string]bool{}
			for _, e := range report {
				named[e.Name] = true
				if !(e.Rel < gradTol) {
					t.Errorf("%s: relative gradient error %.3g >= %g", e.Name, e.Rel, gradTol)
				}
				// The key bias shifts every score of a query by the same
				// q·bk, which softmax ignores: its gradient is exactly zero.
				// Every other parameter must get a gradient, or the check
				// above would compare zero with zero.
				if strings.HasSuffix(e.Name, ".bk") && !tc.keyBiasMoves {
					if e.Norm > 1e-6 {
						t.Errorf("%s: gradient norm %.3g, want 0 (softmax is shift-invariant)", e.Name, e.Norm)
					}
				} else if e.Norm < gradFloor {
					t.Errorf("%s: gradient norm %.3g is below the floor %g: the parameter barely reaches the cost", e.Name, e.Norm, gradFloor)
				}
			}
			for _, n := range tc.names {
				if !named[n] {
					t.Errorf("the report does not name %q", n)
				}
			}
			if t.Failed() {
				t.Logf("gradient check report:\n%v", report)
			}
			w := report.Worst()
			t.Logf("worst relative error %.2e (%s)", w.Rel, w.Name)
			layer := strings.SplitN(tc.name, "/", 2)[0]
			worst[layer] = math.Max(worst[layer], w.Rel)
			for _, e := range report {
				if !strings.HasSuffix(e.Name, ".bk") {
					worstNotBK[layer] = math.Max(worstNotBK[layer], e.Rel)
				}
			}
		})
	}
	t.Logf("worst relative gradient error per layer: %v", worst)
	t.Logf("the same without the key bias bk: %v", worstNotBK)
}

// decoderCE builds a decoder of configuration cfg and returns its masked,
// weighted cross-entropy on two padded sequences of 4, and its parameters.
func decoderCE(cfg StackConfig) func(*testing.T, *Scope, *rand.Rand) (*G.Node, []graph.Param) {
	return func(t *testing.T, s *Scope, _ *rand.Rand) (*G.Node, []graph.Param) {
		d, err := NewDecoder(s, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return decoderCost(t, s, d), d.Params()
	}
}

// decoderCost returns d's masked, weighted cross-entropy on two padded
// sequences of 4 in scope s.
func decoderCost(t *testing.T, s *Scope, d *Decoder) *G.Node {
	t.Helper()
	const b, seqLen = 2, 4
	cfg := d.Config()
	ids, err := graph.NewIDs(s.Graph(), b, seqLen, cfg.Vocab, "ids")
	if err != nil {
		t.Fatal(err)
	}
	if err := ids.Set([]int{1, 2, 3, 4, 5, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	_, pad := paddingMask(t, s, []int{4, 2}, seqLen, seqLen, "pad")
	logits, _, err := d.Forward(ids, pad)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := graph.NewTargets(s.Graph(), tensor.Float64, b*seqLen, cfg.Vocab, "targets")
	if err != nil {
		t.Fatal(err)
	}
	// Position 0 (a prompt) and the padding of sequence 1 are weighted 0.
	if err := tg.Set([]int{2, 3, 4, 0, 0, 1, 0, 0}, []float64{0, 1, 2, 1, 1, 0.5, 0, 0}); err != nil {
		t.Fatal(err)
	}
	cost, err := graph.CrossEntropy(logits, tg)
	if err != nil {
		t.Fatal(err)
	}
	return cost
}
