package layers

import (
	"fmt"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
)

// BlockConfig configures one Transformer block: self-attention and a
// feed-forward layer, each wrapped in a residual connection and a LayerNorm.
type BlockConfig struct {
	Dim, Heads, Hidden int
	// Activation of the feed-forward layer; "" means ReLU.
	Activation string
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
}

// Block is a Transformer block with parameters ln1, attn, ln2, ff in its scope.
type Block struct {
	Config   BlockConfig
	ln1, ln2 *LayerNorm
	attn     *MultiHeadAttention
	ff       *FeedForward
	s        *Scope
	dropouts []*graph.Dropout
}

// NewBlock returns a block in scope s.
func NewBlock(s *Scope, cfg BlockConfig) (*Block, error) {
	if cfg.Dropout < 0 || cfg.Dropout >= 1 {
		return nil, fmt.Errorf("layers: block %q: Dropout %v is outside [0, 1)", s.prefix, cfg.Dropout)
	}
	ln1, err := NewLayerNorm(s.Sub("ln1"), LayerNormConfig{Dim: cfg.Dim, Eps: cfg.Eps})
	if err != nil {
		return nil, err
	}
	attn, err := NewMultiHeadAttention(s.Sub("attn"), AttentionConfig{
		Dim: cfg.Dim, Heads: cfg.Heads, Causal: cfg.Causal, Bias: cfg.Bias, Dropout: cfg.AttnDropout,
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
	return &Block{Config: cfg, ln1: ln1, ln2: ln2, attn: attn, ff: ff, s: s}, nil
}

// Forward maps x (B, S, D) to (B, S, D) and returns the attention weights
// (B, H, S, S). mask, if not nil, is (B, S, S).
func (b *Block) Forward(x *G.Node, mask *graph.MaskNode) (y, weights *G.Node, err error) {
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

// residual returns x + f(LN(x)) (pre-LN) or LN(x + f(x)) (post-LN), with
// dropout on f's output.
func (b *Block) residual(x *G.Node, ln *LayerNorm, f func(*G.Node) (*G.Node, error), dropName string) (*G.Node, error) {
	in := x
	var err error
	if !b.Config.PostLN {
		if in, err = ln.Forward(x); err != nil {
			return nil, err
		}
	}
	fx, err := f(in)
	if err != nil {
		return nil, err
	}
	drop, err := b.s.dropout(dropName, b.Config.Dropout, fx.Shape())
	if err != nil {
		return nil, fmt.Errorf("layers: block %q: %w", b.s.prefix, err)
	}
	if drop != nil {
		b.dropouts = append(b.dropouts, drop)
		if fx, err = drop.Apply(fx); err != nil {
			return nil, fmt.Errorf("layers: block %q: %w", b.s.prefix, err)
		}
	}
	sum, err := G.Add(x, fx)
	if err != nil {
		return nil, fmt.Errorf("layers: block %q: residual: %w", b.s.prefix, err)
	}
	if b.Config.PostLN {
		return ln.Forward(sum)
	}
	return sum, nil
}

// Params returns ln1, attn, ln2 and ff parameters in that order.
func (b *Block) Params() []graph.Param {
	return concatParams(b.ln1.Params(), b.attn.Params(), b.ln2.Params(), b.ff.Params())
}

// Dropouts returns the dropout masks of the block, to be redrawn every step.
func (b *Block) Dropouts() []*graph.Dropout {
	return append(append([]*graph.Dropout(nil), b.attn.Dropouts()...), b.dropouts...)
}

func concatParams(lists ...[]graph.Param) []graph.Param {
	var out []graph.Param
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}
