package layers

import (
	"errors"
	"fmt"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
)

// BlockConfig configures one Transformer block: self-attention, with Cross
// a cross-attention, and a feed-forward layer, each wrapped in a residual
// connection and a LayerNorm.
type BlockConfig struct {
	// Dim is the model width D, Heads the number of heads of every
	// attention (D % Heads == 0), Hidden the feed-forward width.
	Dim, Heads, Hidden int
	// BlockOptions are the options every block of a model shares; of
	// Positions the block reads only RoPE and ALiBi, which its
	// self-attention applies.
	BlockOptions
	// Causal makes the self-attention causal (decoder blocks).
	Causal bool
	// Cross adds a cross-attention between the self-attention and the
	// feed-forward layer, whose queries come from the block's input and
	// keys and values from a memory (an encoder's output): the decoder
	// block of an encoder–decoder. It is never causal: every position may
	// read every memory position its mask allows.
	Cross bool
	// Linear makes the self-attention linear attention (LinearAttention,
	// with the LinearOptions) instead of softmax attention, which then
	// takes none of the softmax variants; a cross-attention stays softmax.
	Linear bool
	// Eps of the LayerNorms; 0 means 1e-5.
	Eps float64
	// Init draws every attention's and the feed-forward's weights (see
	// WeightInit); the zero value is U(±1/sqrt(in)).
	Init WeightInit
}

// Block is a Transformer block. Without cross-attention its sublayers are
//
//	x = x + SelfAttn(LN1(x))
//	x = x + FF(LN2(x))
//
// and its parameters ln1, attn, ln2, ff in its scope; with Cross
//
//	x = x + SelfAttn(LN1(x))          queries, keys, values: x
//	x = x + CrossAttn(LN2(x), memory) queries: x; keys, values: memory
//	x = x + FF(LN3(x))
//
// and its parameters ln1, self_attn, ln2, cross_attn, ln3, ff (pre-LN as
// shown; post-LN normalises each residual sum instead). The names differ
// because checkpoints and the PyTorch reference know them so. Forward and
// Step run a block without cross-attention, ForwardCross and StepCross one
// with: all four apply the same sublayers and differ only in what the
// attentions read.
//
// Its configuration is fixed when it is built: Config returns a copy, and
// LN1, Attention, LN2, CrossAttention, LN3 and FeedForward return its
// sublayers.
type Block struct {
	cfg           BlockConfig
	ln1, ln2, ln3 *LayerNorm          // ln3 only with Cross
	attn, cross   *MultiHeadAttention // attn nil with Linear, cross only with Cross
	lin           *LinearAttention    // with Linear only
	ff            *FeedForward
	s             *Scope
	dropouts      []*graph.Dropout
}

// DecoderBlock is a Block with cross-attention (BlockConfig.Cross), the
// decoder block of an EncoderDecoder, as NewDecoderBlock makes it.
type DecoderBlock = Block

// Validate checks what NewBlock checks, without allocating anything: the
// rates in [0, 1) and the configurations of the LayerNorms, the attentions
// and the feed-forward layer.
func (c BlockConfig) Validate() error { return c.validate("") }

// kind names the block in errors.
func (c BlockConfig) kind() string {
	if c.Cross {
		return "decoder block"
	}
	return "block"
}

// selfAttn is the scope name of the self-attention and of the dropout on
// its output: a block with cross-attention tells its two attentions apart.
func (c BlockConfig) selfAttn() (name, drop string) {
	if c.Cross {
		return "self_attn", "drop_self_attn"
	}
	return "attn", "drop_attn"
}

// parts returns the configurations of the block's sublayers; cross is that
// of the cross-attention, used only with Cross.
func (c BlockConfig) parts() (ln LayerNormConfig, self, cross AttentionConfig, ff FeedForwardConfig) {
	self = AttentionConfig{Dim: c.Dim, Heads: c.Heads, Causal: c.Causal, Bias: c.Bias, Dropout: c.AttnDropout, Impl: c.Attention, Scale: c.AttnScale,
		Positions: c.Positions.attention(), AttentionVariants: c.AttentionVariants, Init: c.Init}
	// Cross-attention relates two sequences: no causality, and none of the
	// positional variants, which measure within one.
	cross = self
	cross.Causal, cross.Positions, cross.Window, cross.RoPEBase, cross.Mask, cross.Score = false, "", 0, 0, nil, nil
	cross.GlobalTokens, cross.BlockLocal = 0, 0
	return LayerNormConfig{Dim: c.Dim, Eps: c.Eps, NoBias: c.BiasFreeNorm}, self, cross,
		FeedForwardConfig{Dim: c.Dim, Hidden: c.Hidden, Activation: c.Activation, Bias: c.Bias, Init: c.Init}
}

// linear is the configuration of the self-attention of a Linear block.
func (c BlockConfig) linear() LinearAttentionConfig {
	return LinearAttentionConfig{Dim: c.Dim, Heads: c.Heads, Causal: c.Causal, Bias: c.Bias, LinearOptions: c.LinearOptions, Impl: c.Attention, Init: c.Init}
}

// validate checks the block at scope prefix name, naming the sublayer that is
// wrong ("blocks.0.attn") as NewBlock would.
func (c BlockConfig) validate(name string) error {
	if err := checkRate("Dropout", "dropout", c.Dropout); err != nil {
		return layerErr(c.kind(), name, err)
	}
	sub := (&Scope{prefix: name}).Name
	ln, self, cross, ff := c.parts()
	selfName, _ := c.selfAttn()
	if err := ln.validate(sub("ln1")); err != nil {
		return err
	}
	if c.Linear {
		if err := c.linear().validate(sub(selfName)); err != nil {
			return err
		}
	} else if err := self.validate(sub(selfName)); err != nil {
		return err
	}
	if c.Cross {
		if err := cross.validate(sub("cross_attn")); err != nil {
			return err
		}
	}
	return ff.validate(sub("ff"))
}

// params is the number of learnable values of a valid configuration.
func (c BlockConfig) params() int {
	ln, self, cross, ff := c.parts()
	n := 2*ln.params() + ff.params()
	if c.Linear {
		n += c.linear().params()
	} else {
		n += self.params()
	}
	if c.Cross {
		n += ln.params() + cross.params()
	}
	return n
}

// NewBlock returns a block in scope s, with cross-attention if cfg.Cross.
func NewBlock(s *Scope, cfg BlockConfig) (*Block, error) {
	if err := s.checkLayer(cfg.kind(), cfg.validate); err != nil {
		return nil, err
	}
	lnCfg, selfCfg, crossCfg, ffCfg := cfg.parts()
	selfName, _ := cfg.selfAttn()
	b := &Block{cfg: cfg, s: s}
	var err error
	// The LayerNorms draw nothing from the scope's random source; the
	// attentions and the feed-forward layer draw in this order.
	if b.ln1, err = NewLayerNorm(s.Sub("ln1"), lnCfg); err != nil {
		return nil, err
	}
	if cfg.Linear {
		if b.lin, err = NewLinearAttention(s.Sub(selfName), cfg.linear()); err != nil {
			return nil, err
		}
	} else if b.attn, err = NewMultiHeadAttention(s.Sub(selfName), selfCfg); err != nil {
		return nil, err
	}
	if b.ln2, err = NewLayerNorm(s.Sub("ln2"), lnCfg); err != nil {
		return nil, err
	}
	if cfg.Cross {
		if b.cross, err = NewMultiHeadAttention(s.Sub("cross_attn"), crossCfg); err != nil {
			return nil, err
		}
		if b.ln3, err = NewLayerNorm(s.Sub("ln3"), lnCfg); err != nil {
			return nil, err
		}
	}
	if b.ff, err = NewFeedForward(s.Sub("ff"), ffCfg); err != nil {
		return nil, err
	}
	return b, nil
}

// NewDecoderBlock returns a block with cross-attention in scope s: NewBlock
// with cfg.Cross set. cfg.Causal makes the self-attention causal (as an
// autoregressive decoder needs).
func NewDecoderBlock(s *Scope, cfg BlockConfig) (*DecoderBlock, error) {
	cfg.Cross = true
	return NewBlock(s, cfg)
}

// Config returns a copy of the configuration the block was built with; the
// zero BlockConfig for a nil Block.
func (b *Block) Config() BlockConfig { return orZero(b).cfg }

// LN1 returns the LayerNorm of the self-attention sublayer (its input with
// pre-LN, its residual sum with post-LN); nil for a nil Block.
func (b *Block) LN1() *LayerNorm { return orZero(b).ln1 }

// Attention returns the block's self-attention, "attn" ("self_attn" with
// Cross); nil for a Linear block (see LinearAttention) and a nil Block.
func (b *Block) Attention() *MultiHeadAttention { return orZero(b).attn }

// LinearAttention returns the self-attention of a Linear block, at the
// names Attention's would have; nil for a softmax block and a nil Block.
func (b *Block) LinearAttention() *LinearAttention { return orZero(b).lin }

// SelfAttention is Attention, by the name that sets it apart from the
// cross-attention.
func (b *Block) SelfAttention() *MultiHeadAttention { return b.Attention() }

// LN2 returns the LayerNorm of the second sublayer: the feed-forward's, or
// with Cross the cross-attention's; nil for a nil Block.
func (b *Block) LN2() *LayerNorm { return orZero(b).ln2 }

// CrossAttention returns the cross-attention "cross_attn", whose wk and wv
// project the memory; nil without Cross and for a nil Block.
func (b *Block) CrossAttention() *MultiHeadAttention { return orZero(b).cross }

// LN3 returns the LayerNorm of the feed-forward sublayer of a block with
// Cross; nil without Cross and for a nil Block.
func (b *Block) LN3() *LayerNorm { return orZero(b).ln3 }

// FeedForward returns the block's feed-forward layer; nil for a nil Block.
func (b *Block) FeedForward() *FeedForward { return orZero(b).ff }

// Forward maps x (B, S, D) to (B, S, D) and returns the attention weights
// (B, H, S, S), nil with AttentionFlash. mask, if not nil, is (B, S, S). A
// block with Cross runs with ForwardCross.
func (b *Block) Forward(x *G.Node, mask *graph.MaskNode) (y, weights *G.Node, err error) {
	if err := b.checkCross(false, "Forward", "ForwardCross"); err != nil {
		return nil, nil, err
	}
	y, weights, _, err = b.forward(x, mask, nil, nil)
	return y, weights, err
}

// ForwardCross maps the states x (B, St, D) of a block with Cross to
// (B, St, D), reading memory (B, Ss, D). selfMask, if not nil, is
// (B, St, St); crossMask, if not nil, (B, St, Ss), hides memory padding
// from the cross-attention. It returns the self-attention weights
// (B, H, St, St) and the cross-attention weights (B, H, St, Ss), both nil
// with AttentionFlash.
func (b *Block) ForwardCross(x, memory *G.Node, selfMask, crossMask *graph.MaskNode) (y, selfWeights, crossWeights *G.Node, err error) {
	if err := b.checkCross(true, "ForwardCross", "Forward"); err != nil {
		return nil, nil, nil, err
	}
	if err := graph.CheckNode(memory, "memory"); err != nil {
		return nil, nil, nil, layerErr(b.cfg.kind(), b.s.prefix, err)
	}
	return b.forward(x, selfMask, memory, crossMask)
}

// Step is Forward for one new position per row with a key/value cache (see
// MultiHeadAttention.Step): x (B, 1, D) at positions pos (B, 1) in (pos may
// be nil without RoPE, ALiBi or a window), y (B, 1, D) out, and the
// block's caches with the new key and value written in.
func (b *Block) Step(x *G.Node, pos *graph.IDs, cacheK, cacheV, slot *G.Node, mask *graph.MaskNode) (y, keys, values *G.Node, err error) {
	if err := b.checkCross(false, "Step", "StepCross"); err != nil {
		return nil, nil, nil, err
	}
	return b.step(x, pos, cacheK, cacheV, slot, mask, nil, nil, nil)
}

// StepCross is ForwardCross for one new position per row, for generation:
// the self-attention reads and extends a key/value cache as Step's does
// (cacheK, cacheV (B, St, D), slot (B, St, 1), selfMask (B, 1, St)), and
// the cross-attention reads crossK and crossV (B, Ss, D), the memory's keys
// and values projected once per prompt (see EncoderDecoder.Encode), under
// crossMask (B, 1, Ss). It returns y (B, 1, D) and the self-attention
// caches with the new row written in.
func (b *Block) StepCross(x *G.Node, pos *graph.IDs, cacheK, cacheV, slot *G.Node, selfMask *graph.MaskNode, crossK, crossV *G.Node, crossMask *graph.MaskNode) (y, keys, values *G.Node, err error) {
	if err := b.checkCross(true, "StepCross", "Step"); err != nil {
		return nil, nil, nil, err
	}
	return b.step(x, pos, cacheK, cacheV, slot, selfMask, crossK, crossV, crossMask)
}

// forward is Forward and ForwardCross: the attentions attend to x and, with
// Cross, to memory.
func (b *Block) forward(x *G.Node, selfMask *graph.MaskNode, memory *G.Node, crossMask *graph.MaskNode) (y, selfWeights, crossWeights *G.Node, err error) {
	selfAttend := func(h *G.Node) (*G.Node, error) {
		if b.lin != nil {
			return b.lin.Forward(h, selfMask) // no (S, S) weights to return
		}
		out, w, err := b.attn.Forward(h, h, h, selfMask) // Q, K, V from one X
		selfWeights = w
		return out, err
	}
	crossAttend := func(h *G.Node) (*G.Node, error) {
		// Q from x, K and V from the memory: the one line that makes this
		// cross-attention rather than self-attention.
		out, w, err := b.cross.Forward(h, memory, memory, crossMask)
		crossWeights = w
		return out, err
	}
	if y, err = b.apply(x, selfAttend, crossAttend); err != nil {
		return nil, nil, nil, err
	}
	return y, selfWeights, crossWeights, nil
}

// step is Step and StepCross: the self-attention extends its cache, the
// cross-attention (with Cross) reads the memory's projected keys and values.
func (b *Block) step(x *G.Node, pos *graph.IDs, cacheK, cacheV, slot *G.Node, selfMask *graph.MaskNode, crossK, crossV *G.Node, crossMask *graph.MaskNode) (y, keys, values *G.Node, err error) {
	selfAttend := func(h *G.Node) (*G.Node, error) {
		if b.lin != nil { // the state S and z in place of the key and value caches
			out, s, z, err := b.lin.Step(h, cacheK, cacheV)
			keys, values = s, z
			return out, err
		}
		out, k, v, err := b.attn.Step(h, pos, cacheK, cacheV, slot, selfMask)
		keys, values = k, v
		return out, err
	}
	crossAttend := func(h *G.Node) (*G.Node, error) { return b.cross.AttendProjected(h, crossK, crossV, crossMask) }
	if y, err = b.apply(x, selfAttend, crossAttend); err != nil {
		return nil, nil, nil, err
	}
	return y, keys, values, nil
}

// apply runs the block's sublayers on x, each in its residual connection:
// the self-attention selfAttend, with Cross the cross-attention
// crossAttend, then the feed-forward layer. The attentions are all that
// Forward and Step, with or without Cross, do differently.
func (b *Block) apply(x *G.Node, selfAttend, crossAttend func(*G.Node) (*G.Node, error)) (*G.Node, error) {
	if err := graph.CheckNode(x, "input"); err != nil {
		return nil, layerErr(b.cfg.kind(), b.s.prefix, err)
	}
	_, selfDrop := b.cfg.selfAttn()
	y, err := b.residual(x, b.ln1, selfAttend, selfDrop)
	if err != nil {
		return nil, err
	}
	ffNorm := b.ln2
	if b.cfg.Cross {
		if y, err = b.residual(y, b.ln2, crossAttend, "drop_cross_attn"); err != nil {
			return nil, err
		}
		ffNorm = b.ln3
	}
	return b.residual(y, ffNorm, b.ff.Forward, "drop_ff")
}

// checkCross returns an error unless b was made by NewBlock, with
// cross-attention if cross: method is the one called, other the one a
// block of the other kind runs with.
func (b *Block) checkCross(cross bool, method, other string) error {
	if err := b.check(); err != nil {
		return err
	}
	if b.cfg.Cross != cross {
		return layerErr(b.cfg.kind(), b.s.prefix, fmt.Errorf("%s on a block whose BlockConfig.Cross is %t: call %s", method, b.cfg.Cross, other))
	}
	return nil
}

// check returns an error unless b was made by NewBlock.
func (b *Block) check() error {
	if b == nil || b.s.check() != nil || b.ln1 == nil || b.ln2 == nil || (b.attn == nil) == (b.lin == nil) || b.ff == nil ||
		(b.cfg.Cross && (b.cross == nil || b.ln3 == nil)) {
		return errors.New("layers: block: the block is nil or a zero value: make it with NewBlock")
	}
	return nil
}

// residual returns x + f(LN(x)) (pre-LN) or LN(x + f(x)) (post-LN), with
// dropout at the block's Dropout on f's output; the dropout mask, named
// dropName in the block's scope, is kept for Dropouts, so that the caller
// redraws it every step.
func (b *Block) residual(x *G.Node, ln *LayerNorm, f func(*G.Node) (*G.Node, error), dropName string) (*G.Node, error) {
	kind := b.cfg.kind()
	in := x
	var err error
	if !b.cfg.PostLN {
		if in, err = ln.Forward(x); err != nil {
			return nil, err
		}
	}
	fx, err := f(in)
	if err != nil {
		return nil, err
	}
	drop, err := b.s.dropout(dropName, b.cfg.Dropout, fx.Shape())
	if err != nil {
		return nil, layerErr(kind, b.s.prefix, err)
	}
	if drop != nil {
		b.dropouts = append(b.dropouts, drop)
		if fx, err = drop.Apply(fx); err != nil {
			return nil, layerErr(kind, b.s.prefix, err)
		}
	}
	sum, err := graph.Add(x, fx)
	if err != nil {
		return nil, layerErr(kind, b.s.prefix, fmt.Errorf("residual: %w", err))
	}
	if b.cfg.PostLN {
		return ln.Forward(sum)
	}
	return sum, nil
}

// Params returns the parameters of ln1, attn, ln2 and ff in that order; with
// Cross those of ln1, self_attn, ln2, cross_attn, ln3 and ff.
func (b *Block) Params() []graph.Param {
	if b == nil {
		return nil
	}
	return concatParams(b.ln1.Params(), b.attn.Params(), b.lin.Params(), b.ln2.Params(), b.cross.Params(), b.ln3.Params(), b.ff.Params())
}

// Dropouts returns the dropout masks of the block, to be redrawn every step.
func (b *Block) Dropouts() []*graph.Dropout {
	if b == nil {
		return nil
	}
	out := append([]*graph.Dropout(nil), b.attn.Dropouts()...)
	out = append(out, b.cross.Dropouts()...)
	return append(out, b.dropouts...)
}

func concatParams(lists ...[]graph.Param) []graph.Param {
	var out []graph.Param
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// learned returns those of ps that hold a node (a layer's parameters
// without the ones its configuration leaves out), in order; nil for none.
func learned(ps ...graph.Param) []graph.Param {
	var out []graph.Param
	for _, p := range ps {
		if p.Node != nil {
			out = append(out, p)
		}
	}
	return out
}
