package layers

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
)

// StackConfig configures a stack of Transformer blocks over token and
// position embeddings: the decoder-only model and the encoder share it.
type StackConfig struct {
	// Vocab is the number of token ids; MaxLen the longest sequence.
	Vocab  int `json:"vocab"`
	MaxLen int `json:"max_len"`
	// Dim is the model width D, Heads the number of heads (D % Heads == 0),
	// Layers the number of blocks, Hidden the feed-forward width.
	Dim    int `json:"dim"`
	Heads  int `json:"heads"`
	Layers int `json:"layers"`
	Hidden int `json:"hidden"`
	// Activation of the feed-forward layers; "" means ReLU.
	Activation Activation `json:"activation"`
	// Positions is PositionsLearned (the default for ""), PositionsSinusoidal
	// or PositionsNone.
	Positions PositionsKind `json:"positions"`
	// PostLN selects post-LN blocks; the default is pre-LN with a final norm.
	PostLN bool `json:"post_ln"`
	// Bias adds biases to attention and feed-forward projections.
	Bias bool `json:"bias"`
	// Dropout on embeddings and sublayer outputs; AttnDropout on weights.
	Dropout     float64 `json:"dropout"`
	AttnDropout float64 `json:"attn_dropout"`
	// Attention is how every block computes attention: AttentionFused (the
	// default for ""), AttentionComposed or AttentionFlash. It changes no
	// parameter, so a checkpoint runs under any of them.
	Attention AttentionImpl `json:"attention,omitempty"`
	// AttnScale is the factor of every attention's scores: ScaleDK (the
	// default for "", 1/sqrt(Dim/Heads)), ScaleDModel (1/sqrt(Dim)) or
	// ScaleNone (1). Unlike Attention it changes the function the
	// parameters compute. Absent from config.json for the default.
	AttnScale AttentionScale `json:"attn_scale,omitempty"`
	// CausalEncoder makes an Encoder's self-attention causal, as a
	// decoder's is: source position i reads positions j <= i only. A
	// bidirectional encoder (the default, Vaswani et al.'s) starts out
	// averaging every position into every other, so nothing ties a token to
	// its neighbour; a causal one starts out tying each position to the few
	// before it, the first ones most. Multi-query recall needs exactly that
	// tie (a value to its key) and is learned with it where a bidirectional
	// encoder stalls (README). A decoder is causal already and refuses it;
	// absent from config.json when false.
	CausalEncoder bool `json:"causal_encoder,omitempty"`
}

// stack is what Decoder and Encoder share: embeddings, blocks, final norm.
type stack struct {
	cfg      StackConfig
	tok      *Embedding
	pos      *Positions
	blocks   []*Block
	lnf      *LayerNorm // nil for post-LN, whose blocks end normalised
	s        *Scope
	dropouts []*graph.Dropout
	causal   bool
	kind     string // "decoder" or "encoder", for error messages
}

// Validate checks everything NewDecoder and NewEncoder check, without
// allocating anything: Vocab, MaxLen, Layers, Dim, Heads and Hidden
// positive, Dim divisible by Heads, known Activation and Positions, the rates
// in [0, 1), every weight tensor within graph.MaxElements, and the model's
// total parameter count (with the decoder's vocabulary head) within
// graph.MaxElements too: parameters are allocated together, and the cap on
// the total is what keeps a huge Layers from building blocks for ever.
// Errors name the layer that is wrong as the constructors do
// ("blocks.0.attn"). Checking a configuration this way costs microseconds,
// where building a throwaway model costs its whole memory.
func (c StackConfig) Validate() error {
	_, err := c.validate("model", "", true)
	return err
}

// blockConfig is the configuration of every block of the stack.
func (c StackConfig) blockConfig(causal bool) BlockConfig {
	return BlockConfig{
		Dim: c.Dim, Heads: c.Heads, Hidden: c.Hidden, Activation: c.Activation,
		Causal: causal, PostLN: c.PostLN, Bias: c.Bias,
		Dropout: c.Dropout, AttnDropout: c.AttnDropout, Attention: c.Attention, AttnScale: c.AttnScale,
	}
}

// validate checks c for a stack of the given kind ("decoder", "encoder") in
// the scope prefix, and returns its parameter count; head says whether a
// (Dim, Vocab) output projection follows, as in the decoder.
func (c StackConfig) validate(kind, prefix string, head bool) (int, error) {
	sub := (&Scope{prefix: prefix}).Name
	if c.Positions == "" {
		c.Positions = PositionsLearned
	}
	if err := checkPositive(size{"Vocab", c.Vocab}, size{"MaxLen", c.MaxLen}, size{"Layers", c.Layers}); err != nil {
		return 0, fmt.Errorf("layers: %s: %w", kind, err)
	}
	if err := checkRate("Dropout", c.Dropout); err != nil {
		return 0, fmt.Errorf("layers: %s: %w", kind, err)
	}
	if c.CausalEncoder && kind == "decoder" {
		return 0, configErrorf("layers: decoder: CausalEncoder is set, but it is for encoders: a decoder is causal already")
	}
	emb := EmbeddingConfig{Vocab: c.Vocab, Dim: c.Dim}
	if err := emb.validate(sub("tok_emb")); err != nil {
		return 0, err
	}
	if err := c.positionsConfig().validate(sub("pos_emb")); err != nil {
		return 0, err
	}
	block := c.blockConfig(false)
	if err := block.validate(sub("blocks.0")); err != nil {
		return 0, err
	}
	ln := LayerNormConfig{Dim: c.Dim}
	if err := ln.validate(sub("ln_f")); err != nil {
		return 0, err
	}
	out := LinearConfig{In: c.Dim, Out: c.Vocab, Bias: true}
	if head {
		if err := out.validate(sub("head")); err != nil {
			return 0, err
		}
	}
	// Each count below is at most MaxElements, so sums of a few cannot
	// overflow; the product with Layers is checked before it is taken.
	per := block.params()
	if per > graph.MaxElements/c.Layers {
		return 0, configErrorf("layers: %s: %d layers of %d parameters each exceed graph.MaxElements = %d", kind, c.Layers, per, graph.MaxElements)
	}
	counts := []int{emb.Vocab * emb.Dim, per * c.Layers}
	if c.Positions == PositionsLearned {
		counts = append(counts, c.MaxLen*c.Dim)
	}
	if !c.PostLN {
		counts = append(counts, ln.params())
	}
	if head {
		counts = append(counts, out.params())
	}
	total, err := addCounts(fmt.Sprintf("layers: %s", kind), counts...)
	if err != nil {
		return 0, err
	}
	return total, nil
}

// positionsConfig is the configuration of the stack's positional encoding.
func (c StackConfig) positionsConfig() PositionsConfig {
	return PositionsConfig{Kind: c.Positions, MaxLen: c.MaxLen, Dim: c.Dim}
}

func newStack(s *Scope, kind string, cfg StackConfig, causal bool) (*stack, error) {
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("layers: %s: %w", kind, err)
	}
	if _, err := cfg.validate(kind, s.prefix, kind == "decoder"); err != nil {
		return nil, err
	}
	if cfg.Positions == "" {
		cfg.Positions = PositionsLearned
	}
	st := &stack{cfg: cfg, s: s, causal: causal, kind: kind}
	var err error
	if st.tok, err = NewEmbedding(s.Sub("tok_emb"), EmbeddingConfig{Vocab: cfg.Vocab, Dim: cfg.Dim}); err != nil {
		return nil, err
	}
	if st.pos, err = NewPositions(s.Sub("pos_emb"), cfg.positionsConfig()); err != nil {
		return nil, err
	}
	for i := 0; i < cfg.Layers; i++ {
		b, err := NewBlock(s.Sub("blocks").Sub(strconv.Itoa(i)), cfg.blockConfig(causal))
		if err != nil {
			return nil, err
		}
		st.blocks = append(st.blocks, b)
	}
	if !cfg.PostLN {
		if st.lnf, err = NewLayerNorm(s.Sub("ln_f"), LayerNormConfig{Dim: cfg.Dim}); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// forward embeds ids (B, S), runs the blocks and the final norm, and returns
// the hidden states (B, S, D) and every block's attention weights.
func (st *stack) forward(ids *graph.IDs, pad *graph.MaskNode) (*G.Node, []*G.Node, error) {
	if err := ids.Check(); err != nil {
		return nil, nil, fmt.Errorf("layers: %s %q: %w", st.kind, st.s.prefix, err)
	}
	if err := pad.Check(); err != nil {
		return nil, nil, fmt.Errorf("layers: %s %q: padding mask: %w", st.kind, st.s.prefix, err)
	}
	if ids.S > st.cfg.MaxLen {
		return nil, nil, shapeErrorf("layers: %s %q: sequence length %d exceeds MaxLen %d", st.kind, st.s.prefix, ids.S, st.cfg.MaxLen)
	}
	mask := pad
	if st.causal {
		// One causal mask for all blocks, so that no block adds its own.
		causal, err := CausalMask(st.s, ids.B, ids.S)
		if err != nil {
			return nil, nil, err
		}
		mask = causal
		if pad != nil {
			if mask, err = graph.CombineMasks(causal, pad); err != nil {
				return nil, nil, fmt.Errorf("layers: %s %q: padding mask: %w", st.kind, st.s.prefix, err)
			}
		}
	}
	x, err := st.tok.Forward(ids) // (B, S, D)
	if err != nil {
		return nil, nil, err
	}
	if x, err = st.pos.Forward(x); err != nil { // (B, S, D)
		return nil, nil, err
	}
	drop, err := st.s.dropout("drop_emb", st.cfg.Dropout, x.Shape())
	if err != nil {
		return nil, nil, err
	}
	if drop != nil {
		st.dropouts = append(st.dropouts, drop)
		if x, err = drop.Apply(x); err != nil {
			return nil, nil, err
		}
	}
	weights := make([]*G.Node, len(st.blocks))
	for i, b := range st.blocks {
		if x, weights[i], err = b.Forward(x, mask); err != nil { // (B, S, D), (B, H, S, S)
			return nil, nil, err
		}
	}
	if st.lnf != nil {
		if x, err = st.lnf.Forward(x); err != nil {
			return nil, nil, err
		}
	}
	return x, weights, nil
}

// check returns an error unless st was made by newStack: a nil or zero-value
// Decoder or Encoder has no stack, or a stack without its layers.
func (st *stack) check(kind, constructor string) error {
	if st == nil || st.s.check() != nil || st.tok == nil || st.pos == nil || len(st.blocks) == 0 || (!st.cfg.PostLN && st.lnf == nil) {
		return fmt.Errorf("layers: %s: the model is nil or a zero value: make it with %s", kind, constructor)
	}
	for _, b := range st.blocks {
		if b.check() != nil {
			return fmt.Errorf("layers: %s %q: a block is nil or a zero value: make the model with %s", kind, st.s.prefix, constructor)
		}
	}
	return nil
}

func (st *stack) params() []graph.Param {
	if st == nil {
		return nil
	}
	ps := concatParams(st.tok.Params(), st.pos.Params())
	for _, b := range st.blocks {
		ps = append(ps, b.Params()...)
	}
	if st.lnf != nil {
		ps = append(ps, st.lnf.Params()...)
	}
	return ps
}

func (st *stack) dropoutList() []*graph.Dropout {
	if st == nil {
		return nil
	}
	out := append([]*graph.Dropout(nil), st.dropouts...)
	for _, b := range st.blocks {
		out = append(out, b.Dropouts()...)
	}
	return out
}

// config, tokens, positions, blockList and finalNorm are the getters Decoder
// and Encoder share; each is safe on a nil stack.
func (st *stack) config() StackConfig {
	if st == nil {
		return StackConfig{}
	}
	return st.cfg
}

func (st *stack) tokens() *Embedding {
	if st == nil {
		return nil
	}
	return st.tok
}

func (st *stack) positions() *Positions {
	if st == nil {
		return nil
	}
	return st.pos
}

// blockList returns a copy of the block slice, so that a caller cannot
// replace the model's blocks.
func (st *stack) blockList() []*Block {
	if st == nil {
		return nil
	}
	return append([]*Block(nil), st.blocks...)
}

func (st *stack) finalNorm() *LayerNorm {
	if st == nil {
		return nil
	}
	return st.lnf
}

// Decoder is the decoder-only language model: token and position embeddings,
// Layers causal blocks, a final norm and a projection to vocabulary logits.
// Its configuration is fixed when it is built: Config returns a copy, and
// TokenEmbedding, Positions, Blocks, FinalNorm and Head return its layers.
type Decoder struct {
	*stack
	head *Linear
}

// Config returns a copy of the configuration the model was built with,
// Positions filled in; the zero StackConfig for a nil Decoder.
func (d *Decoder) Config() StackConfig {
	if d == nil {
		return StackConfig{}
	}
	return d.config()
}

// TokenEmbedding returns the token embedding "tok_emb"; nil for a nil
// Decoder.
func (d *Decoder) TokenEmbedding() *Embedding {
	if d == nil {
		return nil
	}
	return d.tokens()
}

// Positions returns the positional encoding "pos_emb"; nil for a nil
// Decoder.
func (d *Decoder) Positions() *Positions {
	if d == nil {
		return nil
	}
	return d.positions()
}

// Blocks returns the blocks "blocks.<i>", in order, in a new slice.
func (d *Decoder) Blocks() []*Block {
	if d == nil {
		return nil
	}
	return d.blockList()
}

// FinalNorm returns the final LayerNorm "ln_f", nil for post-LN models
// (whose blocks end normalised) and for a nil Decoder.
func (d *Decoder) FinalNorm() *LayerNorm {
	if d == nil {
		return nil
	}
	return d.finalNorm()
}

// Head returns the projection "head" from Dim to vocabulary logits; nil for a
// nil Decoder.
func (d *Decoder) Head() *Linear {
	if d == nil {
		return nil
	}
	return d.head
}

// NewDecoder returns a decoder-only model in scope s.
func NewDecoder(s *Scope, cfg StackConfig) (*Decoder, error) {
	st, err := newStack(s, "decoder", cfg, true)
	if err != nil {
		return nil, err
	}
	head, err := NewLinear(s.Sub("head"), LinearConfig{In: cfg.Dim, Out: cfg.Vocab, Bias: true})
	if err != nil {
		return nil, err
	}
	return &Decoder{stack: st, head: head}, nil
}

// Forward returns next-token logits (B, S, Vocab) for ids (B, S) and every
// block's attention weights (B, H, S, S). pad, if not nil, is a (B, S, S)
// key-padding mask joined with the causal mask.
func (d *Decoder) Forward(ids *graph.IDs, pad *graph.MaskNode) (logits *G.Node, weights []*G.Node, err error) {
	if d == nil {
		return nil, nil, errors.New("layers: decoder: the model is nil: make it with NewDecoder")
	}
	if err := d.stack.check("decoder", "NewDecoder"); err != nil {
		return nil, nil, err
	}
	if d.head.check() != nil {
		return nil, nil, errors.New("layers: decoder: the model has no head: make it with NewDecoder")
	}
	h, weights, err := d.forward(ids, pad)
	if err != nil {
		return nil, nil, err
	}
	if logits, err = d.head.Forward(h); err != nil { // (B, S, Vocab)
		return nil, nil, err
	}
	return logits, weights, nil
}

// Step runs the decoder on one new token per row with a key/value cache,
// for generation (see MultiHeadAttention.Step): tok (B, 1) are the tokens
// and pos (B, 1) their positions; cacheK and cacheV hold one (B, L, D)
// cache per block; slot (B, L, 1) marks each row's position and mask
// (B, 1, L) the positions it may see. It returns the logits (B, 1, Vocab)
// of the token that follows and every block's caches with the new key and
// value written in, to bind at the next step. Dropout is not applied: a
// step is for inference.
func (d *Decoder) Step(tok, pos *graph.IDs, cacheK, cacheV []*G.Node, slot *G.Node, mask *graph.MaskNode) (logits *G.Node, keys, values []*G.Node, err error) {
	if d == nil {
		return nil, nil, nil, errors.New("layers: decoder: the model is nil: make it with NewDecoder")
	}
	if err := d.stack.check("decoder", "NewDecoder"); err != nil {
		return nil, nil, nil, err
	}
	if err := tok.Check(); err != nil {
		return nil, nil, nil, fmt.Errorf("layers: decoder: step: %w", err)
	}
	if err := pos.Check(); err != nil {
		return nil, nil, nil, fmt.Errorf("layers: decoder: step: positions: %w", err)
	}
	if tok.S != 1 || pos.S != 1 || pos.B != tok.B || len(cacheK) != len(d.blocks) || len(cacheV) != len(d.blocks) {
		return nil, nil, nil, shapeErrorf("layers: decoder: step: tokens (%d, %d), positions (%d, %d), %d and %d caches; want (B, 1), (B, 1) and %d of each",
			tok.B, tok.S, pos.B, pos.S, len(cacheK), len(cacheV), len(d.blocks))
	}
	x, err := d.tok.Forward(tok) // (B, 1, D)
	if err != nil {
		return nil, nil, nil, err
	}
	pe, err := d.pos.At(pos) // (B, 1, D), nil without positions
	if err != nil {
		return nil, nil, nil, err
	}
	if pe != nil {
		if x, err = G.Add(x, pe); err != nil {
			return nil, nil, nil, fmt.Errorf("layers: decoder: step: %w", err)
		}
	}
	keys, values = make([]*G.Node, len(d.blocks)), make([]*G.Node, len(d.blocks))
	for i, b := range d.blocks {
		if x, keys[i], values[i], err = b.Step(x, cacheK[i], cacheV[i], slot, mask); err != nil { // (B, 1, D)
			return nil, nil, nil, err
		}
	}
	if d.lnf != nil {
		if x, err = d.lnf.Forward(x); err != nil {
			return nil, nil, nil, err
		}
	}
	if logits, err = d.head.Forward(x); err != nil { // (B, 1, Vocab)
		return nil, nil, nil, err
	}
	return logits, keys, values, nil
}

// Params returns every learnable of the model with its hierarchical name:
// tok_emb.table, pos_emb.table, blocks.<i>.{ln1,attn,ln2,ff}.*, ln_f.*, head.*.
func (d *Decoder) Params() []graph.Param {
	if d == nil {
		return nil
	}
	return append(d.params(), d.head.Params()...)
}

// Dropouts returns every dropout mask, to be redrawn each training step.
func (d *Decoder) Dropouts() []*graph.Dropout {
	if d == nil {
		return nil
	}
	return d.dropoutList()
}

// Encoder is a bidirectional stack: every position attends to every key that
// the padding mask allows; with StackConfig.CausalEncoder, to the allowed
// keys up to its own position.
//
// Its configuration is fixed when it is built: Config returns a copy, and
// TokenEmbedding, Positions, Blocks and FinalNorm return its layers.
type Encoder struct{ *stack }

// Config returns a copy of the configuration the encoder was built with,
// Positions filled in; the zero StackConfig for a nil Encoder.
func (e *Encoder) Config() StackConfig {
	if e == nil {
		return StackConfig{}
	}
	return e.config()
}

// TokenEmbedding returns the token embedding "tok_emb"; nil for a nil
// Encoder.
func (e *Encoder) TokenEmbedding() *Embedding {
	if e == nil {
		return nil
	}
	return e.tokens()
}

// Positions returns the positional encoding "pos_emb"; nil for a nil
// Encoder.
func (e *Encoder) Positions() *Positions {
	if e == nil {
		return nil
	}
	return e.positions()
}

// Blocks returns the blocks "blocks.<i>", in order, in a new slice.
func (e *Encoder) Blocks() []*Block {
	if e == nil {
		return nil
	}
	return e.blockList()
}

// FinalNorm returns the final LayerNorm "ln_f", nil for post-LN encoders and
// for a nil Encoder.
func (e *Encoder) FinalNorm() *LayerNorm {
	if e == nil {
		return nil
	}
	return e.finalNorm()
}

// NewEncoder returns an encoder in scope s.
func NewEncoder(s *Scope, cfg StackConfig) (*Encoder, error) {
	st, err := newStack(s, "encoder", cfg, cfg.CausalEncoder)
	if err != nil {
		return nil, err
	}
	return &Encoder{st}, nil
}

// Forward returns hidden states (B, S, D) for ids (B, S) and every block's
// attention weights. pad, if not nil, is a (B, S, S) key-padding mask.
func (e *Encoder) Forward(ids *graph.IDs, pad *graph.MaskNode) (*G.Node, []*G.Node, error) {
	if e == nil {
		return nil, nil, errors.New("layers: encoder: the model is nil: make it with NewEncoder")
	}
	if err := e.stack.check("encoder", "NewEncoder"); err != nil {
		return nil, nil, err
	}
	return e.forward(ids, pad)
}

// Params returns every learnable with its hierarchical name; nothing for a
// nil Encoder.
func (e *Encoder) Params() []graph.Param {
	if e == nil {
		return nil
	}
	return e.params()
}

// Dropouts returns every dropout mask, to be redrawn each training step.
func (e *Encoder) Dropouts() []*graph.Dropout {
	if e == nil {
		return nil
	}
	return e.dropoutList()
}
