package layers

import (
	"errors"
	"fmt"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
)

// BlockConfig configures one Transformer block: self-attention and a
// feed-forward layer, each wrapped in a residual connection and a LayerNorm.
type BlockConfig struct {
	Dim, Heads, Hidden int
	// Activation of the feed-forward layer; "" means ReLU.
	Activation Activation
	// Causal makes the self-attention causal (decoder blocks).
	Causal bool
	// PostLN normalises after each residual sum, as the original Transformer:
	// x = LN(x + f(x)). The default, pre-LN, normalises the sublayer input,
	// x = x + f(LN(x)), which trains without warm-up tricks at small scale.
	PostLN bool
	// Bias adds biases to the attention projections and feed-forward layers.
	Bias bool
	// Dropout is the rate of dropout on each sublayer's output before the
	// residual sum; AttnDropout that of the attention weights.
	Dropout, AttnDropout float64
	// Eps of the LayerNorms; 0 means 1e-5.
	Eps float64
	// Attention is how the self-attention is computed (fused for "").
	Attention AttentionImpl
	// AttnScale is the factor of the attention scores: 1/sqrt(dk) for ""
	// and ScaleDK (see AttentionScale).
	AttnScale AttentionScale
}

// Block is a Transformer block with parameters ln1, attn, ln2, ff in its scope.
// Its configuration is fixed when it is built: Config returns a copy, and
// LN1, Attention, LN2 and FeedForward return its sublayers.
type Block struct {
	cfg      BlockConfig
	ln1, ln2 *LayerNorm
	attn     *MultiHeadAttention
	ff       *FeedForward
	s        *Scope
	dropouts []*graph.Dropout
}

// Validate checks what NewBlock checks, without allocating anything: the
// rates in [0, 1) and the configurations of the two LayerNorms, the
// attention and the feed-forward layer.
func (c BlockConfig) Validate() error { return c.validate("") }

// parts returns the configurations of the block's sublayers.
func (c BlockConfig) parts() (LayerNormConfig, AttentionConfig, FeedForwardConfig) {
	return LayerNormConfig{Dim: c.Dim, Eps: c.Eps},
		AttentionConfig{Dim: c.Dim, Heads: c.Heads, Causal: c.Causal, Bias: c.Bias, Dropout: c.AttnDropout, Impl: c.Attention, Scale: c.AttnScale},
		FeedForwardConfig{Dim: c.Dim, Hidden: c.Hidden, Activation: c.Activation, Bias: c.Bias}
}

// validate checks the block at scope prefix name, naming the sublayer that is
// wrong ("blocks.0.attn") as NewBlock would.
func (c BlockConfig) validate(name string) error {
	if err := checkRate("Dropout", c.Dropout); err != nil {
		return layerErr("block", name, err)
	}
	sub := func(local string) string { return (&Scope{prefix: name}).Name(local) }
	ln, attn, ff := c.parts()
	if err := ln.validate(sub("ln1")); err != nil {
		return err
	}
	if err := attn.validate(sub("attn")); err != nil {
		return err
	}
	return ff.validate(sub("ff"))
}

// params is the number of learnable values of a valid configuration.
func (c BlockConfig) params() int {
	ln, attn, ff := c.parts()
	return 2*ln.params() + attn.params() + ff.params()
}

// NewBlock returns a block in scope s.
func NewBlock(s *Scope, cfg BlockConfig) (*Block, error) {
	if err := s.check(); err != nil {
		return nil, layerErr("block", s.path(), err)
	}
	if err := cfg.validate(s.path()); err != nil {
		return nil, err
	}
	ln1, err := NewLayerNorm(s.Sub("ln1"), LayerNormConfig{Dim: cfg.Dim, Eps: cfg.Eps})
	if err != nil {
		return nil, err
	}
	attn, err := NewMultiHeadAttention(s.Sub("attn"), AttentionConfig{
		Dim: cfg.Dim, Heads: cfg.Heads, Causal: cfg.Causal, Bias: cfg.Bias, Dropout: cfg.AttnDropout, Impl: cfg.Attention, Scale: cfg.AttnScale,
	})
	if err != nil {
		return nil, err
	}
	ln2, err := NewLayerNorm(s.Sub("ln2"), LayerNormConfig{Dim: cfg.Dim, Eps: cfg.Eps})
	if err != nil {
		return nil, err
	}
	ff, err := NewFeedForward(s.Sub("ff"), FeedForwardConfig{Dim: cfg.Dim, Hidden: cfg.Hidden, Activation: cfg.Activation, Bias: cfg.Bias})
	if err != nil {
		return nil, err
	}
	return &Block{cfg: cfg, ln1: ln1, ln2: ln2, attn: attn, ff: ff, s: s}, nil
}

// Config returns a copy of the configuration the block was built with; the
// zero BlockConfig for a nil Block.
func (b *Block) Config() BlockConfig {
	if b == nil {
		return BlockConfig{}
	}
	return b.cfg
}

// LN1 returns the LayerNorm of the attention sublayer (its input with pre-LN,
// its residual sum with post-LN); nil for a nil Block.
func (b *Block) LN1() *LayerNorm {
	if b == nil {
		return nil
	}
	return b.ln1
}

// Attention returns the block's self-attention; nil for a nil Block.
func (b *Block) Attention() *MultiHeadAttention {
	if b == nil {
		return nil
	}
	return b.attn
}

// LN2 returns the LayerNorm of the feed-forward sublayer; nil for a nil
// Block.
func (b *Block) LN2() *LayerNorm {
	if b == nil {
		return nil
	}
	return b.ln2
}

// FeedForward returns the block's feed-forward layer; nil for a nil Block.
func (b *Block) FeedForward() *FeedForward {
	if b == nil {
		return nil
	}
	return b.ff
}

// Forward maps x (B, S, D) to (B, S, D) and returns the attention weights
// (B, H, S, S). mask, if not nil, is (B, S, S).
func (b *Block) Forward(x *G.Node, mask *graph.MaskNode) (y, weights *G.Node, err error) {
	if err := b.check(); err != nil {
		return nil, nil, err
	}
	if err := graph.CheckNode(x, "input"); err != nil {
		return nil, nil, fmt.Errorf("layers: block %q: %w", b.s.prefix, err)
	}
	selfAttend := func(h *G.Node) (*G.Node, error) {
		out, w, err := b.attn.Forward(h, h, h, mask) // Q, K, V from one X
		weights = w
		return out, err
	}
	if y, err = b.residual(x, b.ln1, selfAttend, "drop_attn"); err != nil {
		return nil, nil, err
	}
	if y, err = b.residual(y, b.ln2, b.ff.Forward, "drop_ff"); err != nil {
		return nil, nil, err
	}
	return y, weights, nil
}

// Step is Forward for one new position per row with a key/value cache (see
// MultiHeadAttention.Step): x (B, 1, D) in, y (B, 1, D) out, and the block's
// caches with the new key and value written in.
func (b *Block) Step(x, cacheK, cacheV, slot *G.Node, mask *graph.MaskNode) (y, keys, values *G.Node, err error) {
	if err := b.check(); err != nil {
		return nil, nil, nil, err
	}
	if err := graph.CheckNode(x, "input"); err != nil {
		return nil, nil, nil, fmt.Errorf("layers: block %q: %w", b.s.prefix, err)
	}
	selfAttend := func(h *G.Node) (*G.Node, error) {
		out, k, v, err := b.attn.Step(h, cacheK, cacheV, slot, mask)
		keys, values = k, v
		return out, err
	}
	if y, err = b.residual(x, b.ln1, selfAttend, "drop_attn"); err != nil {
		return nil, nil, nil, err
	}
	if y, err = b.residual(y, b.ln2, b.ff.Forward, "drop_ff"); err != nil {
		return nil, nil, nil, err
	}
	return y, keys, values, nil
}

// check returns an error unless b was made by NewBlock.
func (b *Block) check() error {
	if b == nil || b.s.check() != nil || b.ln1 == nil || b.ln2 == nil || b.attn == nil || b.ff == nil {
		return errors.New("layers: block: the block is nil or a zero value: make it with NewBlock")
	}
	return nil
}

// residual returns b's sublayer f wrapped in its residual connection.
func (b *Block) residual(x *G.Node, ln *LayerNorm, f func(*G.Node) (*G.Node, error), dropName string) (*G.Node, error) {
	return residual("block", b.s, b.cfg, &b.dropouts, x, ln, f, dropName)
}

// residual returns x + f(LN(x)) (pre-LN) or LN(x + f(x)) (post-LN), with
// dropout at cfg.Dropout on f's output; the dropout mask, named dropName in
// s, is appended to drops so that the caller redraws it every step. kind
// names the block in errors.
func residual(kind string, s *Scope, cfg BlockConfig, drops *[]*graph.Dropout, x *G.Node, ln *LayerNorm, f func(*G.Node) (*G.Node, error), dropName string) (*G.Node, error) {
	in := x
	var err error
	if !cfg.PostLN {
		if in, err = ln.Forward(x); err != nil {
			return nil, err
		}
	}
	fx, err := f(in)
	if err != nil {
		return nil, err
	}
	drop, err := s.dropout(dropName, cfg.Dropout, fx.Shape())
	if err != nil {
		return nil, layerErr(kind, s.prefix, err)
	}
	if drop != nil {
		*drops = append(*drops, drop)
		if fx, err = drop.Apply(fx); err != nil {
			return nil, layerErr(kind, s.prefix, err)
		}
	}
	sum, err := G.Add(x, fx)
	if err != nil {
		return nil, layerErr(kind, s.prefix, fmt.Errorf("residual: %w", err))
	}
	if cfg.PostLN {
		return ln.Forward(sum)
	}
	return sum, nil
}

// Params returns ln1, attn, ln2 and ff parameters in that order.
func (b *Block) Params() []graph.Param {
	if b == nil {
		return nil
	}
	return concatParams(b.ln1.Params(), b.attn.Params(), b.ln2.Params(), b.ff.Params())
}

// Dropouts returns the dropout masks of the block, to be redrawn every step.
func (b *Block) Dropouts() []*graph.Dropout {
	if b == nil {
		return nil
	}
	return append(append([]*graph.Dropout(nil), b.attn.Dropouts()...), b.dropouts...)
}

func concatParams(lists ...[]graph.Param) []graph.Param {
	var out []graph.Param
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}
