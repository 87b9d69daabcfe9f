package layers

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// StackConfig configures a stack of Transformer blocks over token and
// position embeddings: the decoder-only model and the encoder share it.
type StackConfig struct {
	// Vocab is the number of token ids; MaxLen the longest sequence.
	Vocab  int `json:"vocab"`
	MaxLen int `json:"max_len"`
	// Dim is the model width D, Heads the number of heads (D % Heads == 0),
	// Layers the number of blocks, Hidden the feed-forward width.
	Dim    int `json:"dim" flag:"dim" group:"model" help:"model width d_model"`
	Heads  int `json:"heads" flag:"heads" group:"model" help:"attention heads per block (must divide --dim)"`
	Layers int `json:"layers" flag:"layers" group:"model" help:"number of Transformer blocks"`
	Hidden int `json:"hidden" flag:"hidden" group:"model" help:"feed-forward width"`
	// BlockOptions are the options of every block (activation, positions,
	// norms, attention and its variants).
	BlockOptions
	// LayerKinds says what each block's self-attention is, as
	// ParseLayerKinds reads it, cycled over the blocks: "" every block
	// softmax, "linear" every block linear attention, "linear,window:64"
	// Based's hybrid of linear attention and a small sliding window.
	// Absent from config.json when "".
	LayerKinds string `json:"layer_kinds,omitempty" flag:"layer-kinds" group:"model" help:"what each block's self-attention is, cycled over the blocks: softmax, linear or window:W, comma-separated (linear,window:64 is Based's hybrid; default: all softmax)"`
	// CausalEncoder makes an Encoder's self-attention causal, as a
	// decoder's is: source position i reads positions j <= i only. A
	// bidirectional encoder (the default, Vaswani et al.'s) starts out
	// averaging every position into every other, so nothing ties a token to
	// its neighbour; a causal one starts out tying each position to the few
	// before it, the first ones most. Multi-query recall needs exactly that
	// tie (a value to its key) and is learned with it where a bidirectional
	// encoder stalls (README). A decoder is causal already and refuses it;
	// absent from config.json when false.
	CausalEncoder bool `json:"causal_encoder,omitempty" flag:"causal-encoder" group:"model" help:"with --arch encdec, a causal encoder: source position i reads positions up to i only (what multi-query recall needs to be learned; see README)"`
	// TieEmbeddings makes the decoder's head its token embedding table:
	// logits = x · tok_emb.tableᵀ, with no head.w and no head.b (GPT-2's
	// and nanoGPT's weight tying, wte.weight = lm_head.weight). The table
	// then learns from both ends, the lookup's gradient and the head's
	// adding up, and the model holds Vocab·Dim + Vocab fewer parameters.
	// The table keeps its role, graph.RoleEmbedding, so an optimizer that
	// decays RoleWeight only (qkv's AdamW) does not decay it, where
	// nanoGPT decays every 2-D tensor, the tied one included.
	// Only a decoder has a head to tie: an encoder refuses it (and an
	// EncDecConfig has no such field). Absent from config.json when false.
	TieEmbeddings bool `json:"tie_embeddings,omitempty" flag:"tie-embeddings" group:"model" help:"the head is the token embedding table: logits = x tok_emb.tableᵀ, no head.w or head.b (GPT-2's and nanoGPT's weight tying; decoder only)"`
	// Init is how the parameters are drawn: InitDefault ("", qkv's own,
	// unchanged) or InitGPT2 (N(0, 0.02²) weights and embeddings, the
	// residual output projections scaled by 1/sqrt(2·Layers); see
	// InitKind). Absent from config.json for the default.
	Init InitKind `json:"init,omitempty" flag:"init" group:"model" help:"initial weights: '' (qkv's default: U(±1/sqrt(in)) weights, N(0,1) embeddings) or gpt2 (N(0,0.02²), attention wo and feed-forward w2 at 0.02/sqrt(2·layers), as nanoGPT)"`
}

// stackKind is what sets the three stacks apart: the Decoder, the Encoder
// and the decoder half of an EncoderDecoder are one stack (embeddings,
// blocks, final norm) with or without causal self-attention,
// cross-attention and a head.
type stackKind struct {
	// name names the stack in errors: "decoder", "encoder", or a half of
	// an encoder–decoder when its configuration is validated.
	name string
	// decoder makes the self-attention causal and refuses
	// StackConfig.CausalEncoder; an encoder is causal with CausalEncoder.
	decoder bool
	// cross makes every block cross-attend to a memory (BlockConfig.Cross).
	cross bool
	// head is a (Dim, Vocab) projection to logits at "head" in the
	// stack's scope, as the Decoder has; the EncoderDecoder has its head at
	// its own scope's "head" and builds it itself.
	head bool
}

var (
	decoderKind = stackKind{name: "decoder", decoder: true, head: true}
	encoderKind = stackKind{name: "encoder"}
	// crossKind is an EncoderDecoder's decoder half.
	crossKind = stackKind{name: "decoder", decoder: true, cross: true}
)

// stack is the one stack of Transformer blocks over token and position
// embeddings, with a final norm (pre-LN) and a head when its kind has one:
// Decoder, Encoder and EncoderDecoder are made of it.
type stack struct {
	cfg      StackConfig
	kind     stackKind
	tok      *Embedding
	pos      *Positions
	blocks   []*Block
	lnf      *LayerNorm // nil for post-LN, whose blocks end normalised
	head     *Linear    // nil without a head
	s        *Scope
	dropouts []*graph.Dropout
}

// Validate checks everything NewDecoder and NewEncoder check, without
// allocating anything: Vocab, MaxLen, Layers, Dim, Heads and Hidden
// positive, Dim divisible by Heads, known Activation, Positions and Init,
// the rates in [0, 1), every weight tensor within graph.MaxElements, and
// the model's total parameter count (with the decoder's vocabulary head,
// none when TieEmbeddings) within graph.MaxElements too: parameters are
// allocated together, and the cap on
// the total is what keeps a huge Layers from building blocks for ever.
// Errors name the layer that is wrong as the constructors do
// ("blocks.0.attn"). Checking a configuration this way costs microseconds,
// where building a throwaway model costs its whole memory.
func (c StackConfig) Validate() error {
	// Not decoderKind: a configuration is checked alike for either
	// architecture, and an encoder–decoder's may set CausalEncoder.
	_, err := c.validate(stackKind{name: "model", head: true}, "")
	return err
}

// NumParams returns the number of learnable values a Decoder of c holds,
// as its Params add up (the head's included unless tied), or Validate's
// error. It is the count the constructors build to, taken from the same
// layer configurations, and allocates nothing.
func (c StackConfig) NumParams() (int, error) {
	return c.validate(stackKind{name: "model", head: true}, "")
}

// blockConfig is the configuration of a block of kind kind in a stack of
// kind k.
func (c StackConfig) blockConfig(k stackKind, kind LayerKind) BlockConfig {
	opts := c.BlockOptions
	opts.Positions = c.Positions.attention() // the embeddings' kinds are the stack's own
	if kind.Window > 0 {
		opts.Window = kind.Window
	}
	return BlockConfig{Dim: c.Dim, Heads: c.Heads, Hidden: c.Hidden, BlockOptions: opts,
		Causal: k.decoder || c.CausalEncoder, Cross: k.cross, Linear: kind.Linear, Init: c.Init.weights(c.Layers)}
}

// layerKinds returns the kinds of the stack's blocks, cycled: ParseLayerKinds
// of LayerKinds, checked by validate.
func (c StackConfig) layerKinds() []LayerKind {
	kinds, err := ParseLayerKinds(c.LayerKinds)
	if err != nil {
		return []LayerKind{{}}
	}
	return kinds
}

// validate checks c for a stack of kind k in the scope prefix, and returns
// its parameter count, the head's included when k has one.
func (c StackConfig) validate(k stackKind, prefix string) (int, error) {
	sub := (&Scope{prefix: prefix}).Name
	if c.Positions == "" {
		c.Positions = PositionsLearned
	}
	if err := checkPositive(size{"Vocab", "vocab", c.Vocab}, size{"MaxLen", "max_len", c.MaxLen}, size{"Layers", "layers", c.Layers}); err != nil {
		return 0, fmt.Errorf("layers: %s: %w", k.name, err)
	}
	if err := checkRate("Dropout", "dropout", c.Dropout); err != nil {
		return 0, fmt.Errorf("layers: %s: %w", k.name, err)
	}
	if c.CausalEncoder && k.decoder {
		return 0, layerErr(k.name, "", fieldErrorf("causal_encoder", nil, "CausalEncoder is set, but it is for encoders: a decoder is causal already"))
	}
	if !c.Init.valid() {
		return 0, layerErr(k.name, "", fieldErrorf("init", nil, "unknown Init %q, want %q (qkv's default) or %q", c.Init, InitDefault, InitGPT2))
	}
	if c.TieEmbeddings && !k.head {
		return 0, layerErr(k.name, "", fieldErrorf("tie_embeddings", nil, "TieEmbeddings is set, but the %s has no head of its own to tie to its token embedding", k.name))
	}
	emb := c.embeddingConfig()
	if err := emb.validate(sub("tok_emb")); err != nil {
		return 0, err
	}
	if err := c.positionsConfig().validate(sub("pos_emb")); err != nil {
		return 0, err
	}
	kinds, err := ParseLayerKinds(c.LayerKinds)
	if err != nil {
		return 0, layerKindsError(k.name, err)
	}
	// A block of each kind, as the first block of that kind would be named.
	per := make([]int, len(kinds))
	for i, kind := range kinds {
		block := c.blockConfig(k, kind)
		if err := block.validate(sub("blocks." + strconv.Itoa(i))); err != nil {
			return 0, err
		}
		per[i] = block.params()
	}
	ln := c.finalNormConfig()
	if err := ln.validate(sub("ln_f")); err != nil {
		return 0, err
	}
	out := c.headConfig()
	if k.head && !c.TieEmbeddings {
		if err := out.validate(sub("head")); err != nil {
			return 0, err
		}
	}
	// Each count below is at most MaxElements, so sums of a few cannot
	// overflow; each product with a number of blocks is checked before it
	// is taken.
	counts := []int{emb.Vocab * emb.Dim}
	for i, p := range per {
		blocks := (c.Layers - i + len(per) - 1) / len(per) // blocks i, i+len(per), ...
		if blocks > 0 && p > graph.MaxElements/blocks {
			return 0, layerErr(k.name, "", fieldErrorf("layers", []string{"dim", "hidden"}, "%d layers of %d parameters each exceed graph.MaxElements = %d", blocks, p, graph.MaxElements))
		}
		counts = append(counts, p*blocks)
	}
	if c.Positions == PositionsLearned {
		counts = append(counts, c.MaxLen*c.Dim)
	}
	if !c.PostLN {
		counts = append(counts, ln.params())
	}
	if k.head && !c.TieEmbeddings { // a tied head's weight is tok_emb.table, counted above
		counts = append(counts, out.params())
	}
	return addCounts(fmt.Sprintf("layers: %s", k.name), counts...)
}

// positionsConfig is the configuration of the stack's positional encoding.
func (c StackConfig) positionsConfig() PositionsConfig {
	return PositionsConfig{Kind: c.Positions, MaxLen: c.MaxLen, Dim: c.Dim, Std: c.Init.embeddingStd()}
}

// embeddingConfig is the configuration of the token embedding.
func (c StackConfig) embeddingConfig() EmbeddingConfig {
	return EmbeddingConfig{Vocab: c.Vocab, Dim: c.Dim, Std: c.Init.embeddingStd()}
}

// finalNormConfig is the configuration of ln_f.
func (c StackConfig) finalNormConfig() LayerNormConfig {
	return LayerNormConfig{Dim: c.Dim, NoBias: c.BiasFreeNorm}
}

// headConfig is the configuration of the projection to logits, when it is
// not tied to the token embedding. It has a bias whatever Bias says: Bias is
// the blocks' projections' (README's checkpoint layout).
func (c StackConfig) headConfig() LinearConfig {
	return LinearConfig{In: c.Dim, Out: c.Vocab, Bias: true, Std: c.Init.headStd()}
}

// newStack returns a stack of kind k in scope s.
func newStack(s *Scope, k stackKind, cfg StackConfig) (*stack, error) {
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("layers: %s: %w", k.name, err)
	}
	if _, err := cfg.validate(k, s.prefix); err != nil {
		return nil, err
	}
	if cfg.Positions == "" {
		cfg.Positions = PositionsLearned
	}
	kinds := cfg.layerKinds()
	st := &stack{cfg: cfg, kind: k, s: s}
	var err error
	if st.tok, err = NewEmbedding(s.Sub("tok_emb"), cfg.embeddingConfig()); err != nil {
		return nil, err
	}
	if st.pos, err = NewPositions(s.Sub("pos_emb"), cfg.positionsConfig()); err != nil {
		return nil, err
	}
	for i := 0; i < cfg.Layers; i++ {
		b, err := NewBlock(s.Sub("blocks").Sub(strconv.Itoa(i)), cfg.blockConfig(k, kindOf(kinds, i)))
		if err != nil {
			return nil, err
		}
		st.blocks = append(st.blocks, b)
	}
	if !cfg.PostLN {
		if st.lnf, err = NewLayerNorm(s.Sub("ln_f"), cfg.finalNormConfig()); err != nil {
			return nil, err
		}
	}
	if k.head && !cfg.TieEmbeddings {
		if st.head, err = NewLinear(s.Sub("head"), cfg.headConfig()); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// forward embeds ids (B, S), runs the blocks, the final norm and the head,
// if any, and returns the logits (B, S, Vocab), or without a head the
// hidden states (B, S, D), with every block's self-attention weights
// (B, H, S, S) and, when the blocks cross-attend to memory (B, Sm, D)
// under crossPad (nil or (B, S, Sm)), their cross-attention weights
// (B, H, S, Sm).
func (st *stack) forward(ids *graph.IDs, pad *graph.MaskNode, memory *G.Node, crossPad *graph.MaskNode) (out *G.Node, self, cross []*G.Node, err error) {
	name := st.kind.name
	if err := ids.Check(); err != nil {
		return nil, nil, nil, fmt.Errorf("layers: %s %q: %w", name, st.s.prefix, err)
	}
	if err := pad.Check(); err != nil {
		return nil, nil, nil, fmt.Errorf("layers: %s %q: padding mask: %w", name, st.s.prefix, err)
	}
	if ids.S > st.cfg.MaxLen {
		return nil, nil, nil, shapeErrorf("layers: %s %q: sequence length %d exceeds MaxLen %d", name, st.s.prefix, ids.S, st.cfg.MaxLen)
	}
	if pad != nil && (pad.B != ids.B || pad.Sq != ids.S || pad.Sk != ids.S) {
		return nil, nil, nil, shapeErrorf("layers: %s %q: padding mask is (B, Sq, Sk) = (%d, %d, %d), ids need (%d, %d, %d)", name, st.s.prefix, pad.B, pad.Sq, pad.Sk, ids.B, ids.S, ids.S)
	}
	if pad != nil && pad.Bias.Dtype() != st.s.dt {
		return nil, nil, nil, fmt.Errorf("layers: %s %q: padding mask is %v, the model is %v", name, st.s.prefix, pad.Bias.Dtype(), st.s.dt)
	}
	mask := pad                   // causal blocks hide the future themselves (graph.Causal)
	x, err := st.tok.Forward(ids) // (B, S, D)
	if err != nil {
		return nil, nil, nil, err
	}
	if x, err = st.pos.Forward(x); err != nil { // (B, S, D)
		return nil, nil, nil, err
	}
	drop, err := st.s.dropout("drop_emb", st.cfg.Dropout, x.Shape())
	if err != nil {
		return nil, nil, nil, err
	}
	if drop != nil {
		st.dropouts = append(st.dropouts, drop)
		if x, err = drop.Apply(x); err != nil {
			return nil, nil, nil, err
		}
	}
	self = make([]*G.Node, len(st.blocks))
	if st.kind.cross {
		cross = make([]*G.Node, len(st.blocks))
	}
	for i, b := range st.blocks {
		var w *G.Node
		// (B, S, D), (B, H, S, S), (B, H, S, Sm)
		if x, self[i], w, err = b.forward(x, mask, memory, crossPad); err != nil {
			return nil, nil, nil, err
		}
		if st.kind.cross {
			cross[i] = w
		}
	}
	if x, err = st.end(x); err != nil { // (B, S, Vocab) or (B, S, D)
		return nil, nil, nil, err
	}
	return x, self, cross, nil
}

// step runs the stack on one new token per row with a key/value cache, for
// generation (see MultiHeadAttention.Step): tok (B, 1) are the tokens and
// pos (B, 1) their positions; cacheK and cacheV hold one (B, L, D) cache
// per block; slot (B, L, 1) marks each row's position and mask (B, 1, L)
// the positions it may see. Blocks that cross-attend read crossK[i] and
// crossV[i] (B, Sm, D), the memory's projected keys and values, under
// crossMask (B, 1, Sm); the others take none. It returns the logits
// (B, 1, Vocab) and every block's caches with the new key and value
// written in. Dropout is not applied to the embeddings: a step is for
// inference.
func (st *stack) step(tok, pos *graph.IDs, cacheK, cacheV []*G.Node, slot *G.Node, mask *graph.MaskNode, crossK, crossV []*G.Node, crossMask *graph.MaskNode) (logits *G.Node, keys, values []*G.Node, err error) {
	name, n := st.kind.name, len(st.blocks)
	if err := tok.Check(); err != nil {
		return nil, nil, nil, fmt.Errorf("layers: %s: step: %w", name, err)
	}
	if err := pos.Check(); err != nil {
		return nil, nil, nil, fmt.Errorf("layers: %s: step: positions: %w", name, err)
	}
	if tok.S != 1 || pos.S != 1 || pos.B != tok.B || len(cacheK) != n || len(cacheV) != n {
		return nil, nil, nil, shapeErrorf("layers: %s: step: tokens (%d, %d), positions (%d, %d), %d and %d caches; want (B, 1), (B, 1) and %d of each",
			name, tok.B, tok.S, pos.B, pos.S, len(cacheK), len(cacheV), n)
	}
	crossed := 0
	if st.kind.cross {
		crossed = n
	}
	if len(crossK) != crossed || len(crossV) != crossed {
		return nil, nil, nil, shapeErrorf("layers: %s: step: %d cross keys and %d cross values; want %d of each", name, len(crossK), len(crossV), crossed)
	}
	x, err := st.tok.Forward(tok) // (B, 1, D)
	if err != nil {
		return nil, nil, nil, err
	}
	pe, err := st.pos.At(pos) // (B, 1, D), nil without positions
	if err != nil {
		return nil, nil, nil, err
	}
	if pe != nil {
		if x, err = graph.Add(x, pe); err != nil {
			return nil, nil, nil, fmt.Errorf("layers: %s: step: %w", name, err)
		}
	}
	keys, values = make([]*G.Node, n), make([]*G.Node, n)
	for i, b := range st.blocks {
		var ck, cv *G.Node
		if st.kind.cross {
			ck, cv = crossK[i], crossV[i]
		}
		if x, keys[i], values[i], err = b.step(x, pos, cacheK[i], cacheV[i], slot, mask, ck, cv, crossMask); err != nil { // (B, 1, D)
			return nil, nil, nil, err
		}
	}
	if logits, err = st.end(x); err != nil { // (B, 1, Vocab)
		return nil, nil, nil, err
	}
	return logits, keys, values, nil
}

// stepShapes returns, per block, the shapes of the caches a step of b rows
// over l positions reads and returns: a key and a value cache (b, l, KVDim)
// for a softmax block, the state S and z of a linear one
// (LinearAttention.StateShapes), whose size does not depend on l.
func (st *stack) stepShapes(b, l int) (k, v []tensor.Shape) {
	for _, blk := range st.blocks {
		if blk.lin != nil {
			s, z := blk.lin.StateShapes(b)
			k, v = append(k, s), append(v, z)
			continue
		}
		kv := tensor.Shape{b, l, st.cfg.KVDim()}
		k, v = append(k, kv), append(v, kv.Clone())
	}
	return k, v
}

// end applies the final norm and the head to the last block's output x, as
// far as the stack has them.
func (st *stack) end(x *G.Node) (*G.Node, error) {
	var err error
	if st.lnf != nil {
		if x, err = st.lnf.Forward(x); err != nil {
			return nil, err
		}
	}
	if st.head != nil {
		return st.head.Forward(x)
	}
	if st.tied() {
		// logits = x Eᵀ with E = tok_emb.table (Vocab, D), read transposed
		// inside the GEMM; E's gradient gets this product's and the
		// lookup's.
		logits, err := graph.LinearT(x, st.tok.table.Node, nil)
		if err != nil {
			return nil, fmt.Errorf("layers: %s %q: head tied to %q: %w", st.kind.name, st.s.prefix, st.tok.table.Name, err)
		}
		return logits, nil
	}
	return x, nil
}

// tied reports whether the stack's logits come from its token embedding
// table (StackConfig.TieEmbeddings on a kind with a head).
func (st *stack) tied() bool { return st.kind.head && st.cfg.TieEmbeddings }

// check returns an error unless st was made by newStack: a nil or zero-value
// Decoder or Encoder has no stack, or a stack without its layers.
func (st *stack) check(kind, constructor string) error {
	if st == nil || st.s.check() != nil || st.tok == nil || st.pos == nil || len(st.blocks) == 0 || (!st.cfg.PostLN && st.lnf == nil) {
		return fmt.Errorf("layers: %s: the model is nil or a zero value: make it with %s", kind, constructor)
	}
	for _, b := range st.blocks {
		if b.check() != nil || b.cfg.Cross != st.kind.cross {
			return fmt.Errorf("layers: %s %q: a block is nil or a zero value: make the model with %s", kind, st.s.prefix, constructor)
		}
	}
	return nil
}

// params lists the parameters of the embeddings, the blocks, the final norm
// and the head, in that order.
func (st *stack) params() []graph.Param {
	if st == nil {
		return nil
	}
	ps := concatParams(st.tok.Params(), st.pos.Params())
	for _, b := range st.blocks {
		ps = append(ps, b.Params()...)
	}
	return concatParams(ps, st.lnf.Params(), st.head.Params())
}

// dropoutList lists the embedding dropout and every block's.
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

// config, tokens, positions, blockList, finalNorm and headLayer are the
// getters of Decoder, Encoder and EncoderDecoder; each is safe on a nil
// stack.
func (st *stack) config() StackConfig { return orZero(st).cfg }

func (st *stack) tokens() *Embedding { return orZero(st).tok }

func (st *stack) positions() *Positions { return orZero(st).pos }

// blockList returns a copy of the block slice, so that a caller cannot
// replace the model's blocks.
func (st *stack) blockList() []*Block {
	if st == nil {
		return nil
	}
	return append([]*Block(nil), st.blocks...)
}

func (st *stack) finalNorm() *LayerNorm { return orZero(st).lnf }

func (st *stack) headLayer() *Linear { return orZero(st).head }

// Decoder is the decoder-only language model: token and position embeddings,
// Layers causal blocks, a final norm and a projection to vocabulary logits.
// Its configuration is fixed when it is built: Config returns a copy, and
// TokenEmbedding, Positions, Blocks, FinalNorm and Head return its layers.
type Decoder struct{ *stack }

// st is d's stack, nil for a nil Decoder.
func (d *Decoder) st() *stack { return orZero(d).stack }

// Config returns a copy of the configuration the model was built with,
// Positions filled in; the zero StackConfig for a nil Decoder.
func (d *Decoder) Config() StackConfig { return d.st().config() }

// TokenEmbedding returns the token embedding "tok_emb"; nil for a nil
// Decoder.
func (d *Decoder) TokenEmbedding() *Embedding { return d.st().tokens() }

// Positions returns the positional encoding "pos_emb"; nil for a nil
// Decoder.
func (d *Decoder) Positions() *Positions { return d.st().positions() }

// Blocks returns the blocks "blocks.<i>", in order, in a new slice.
func (d *Decoder) Blocks() []*Block { return d.st().blockList() }

// FinalNorm returns the final LayerNorm "ln_f", nil for post-LN models
// (whose blocks end normalised) and for a nil Decoder.
func (d *Decoder) FinalNorm() *LayerNorm { return d.st().finalNorm() }

// Head returns the projection "head" from Dim to vocabulary logits; nil for a
// nil Decoder and with StackConfig.TieEmbeddings, whose logits come from
// TokenEmbedding's table.
func (d *Decoder) Head() *Linear { return d.st().headLayer() }

// NewDecoder returns a decoder-only model in scope s.
func NewDecoder(s *Scope, cfg StackConfig) (*Decoder, error) {
	st, err := newStack(s, decoderKind, cfg)
	if err != nil {
		return nil, err
	}
	return &Decoder{st}, nil
}

// check returns an error unless d was made by NewDecoder.
func (d *Decoder) check() error {
	if err := d.st().check("decoder", "NewDecoder"); err != nil {
		return err
	}
	if d.head.check() != nil && !d.tied() {
		return errors.New("layers: decoder: the model has no head: make it with NewDecoder")
	}
	return nil
}

// Forward returns next-token logits (B, S, Vocab) for ids (B, S) and every
// block's attention weights (B, H, S, S). pad, if not nil, is a (B, S, S)
// key-padding mask joined with the causal mask.
func (d *Decoder) Forward(ids *graph.IDs, pad *graph.MaskNode) (logits *G.Node, weights []*G.Node, err error) {
	if err := d.check(); err != nil {
		return nil, nil, err
	}
	logits, weights, _, err = d.forward(ids, pad, nil, nil)
	return logits, weights, err
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
	if err := d.check(); err != nil {
		return nil, nil, nil, err
	}
	return d.step(tok, pos, cacheK, cacheV, slot, mask, nil, nil, nil)
}

// Params returns every learnable of the model with its hierarchical name:
// tok_emb.table, pos_emb.table, blocks.<i>.{ln1,attn,ln2,ff}.*, ln_f.*,
// head.* (none with TieEmbeddings; no ln *.bias with BiasFreeNorm).
func (d *Decoder) Params() []graph.Param { return d.st().params() }

// StepShapes returns the shapes of the caches Step reads and returns for b
// rows over l positions, one key and one value entry per block: (b, l,
// KVDim) each for a softmax block, the state S and z for a linear block
// (LinearAttention.StateShapes). nil for a nil Decoder.
func (d *Decoder) StepShapes(b, l int) (k, v []tensor.Shape) {
	if d.check() != nil {
		return nil, nil
	}
	return d.st().stepShapes(b, l)
}

// Dropouts returns every dropout mask, to be redrawn each training step.
func (d *Decoder) Dropouts() []*graph.Dropout { return d.st().dropoutList() }

// Encoder is a bidirectional stack: every position attends to every key that
// the padding mask allows; with StackConfig.CausalEncoder, to the allowed
// keys up to its own position.
//
// Its configuration is fixed when it is built: Config returns a copy, and
// TokenEmbedding, Positions, Blocks and FinalNorm return its layers.
type Encoder struct{ *stack }

// st is e's stack, nil for a nil Encoder.
func (e *Encoder) st() *stack { return orZero(e).stack }

// Config returns a copy of the configuration the encoder was built with,
// Positions filled in; the zero StackConfig for a nil Encoder.
func (e *Encoder) Config() StackConfig { return e.st().config() }

// TokenEmbedding returns the token embedding "tok_emb"; nil for a nil
// Encoder.
func (e *Encoder) TokenEmbedding() *Embedding { return e.st().tokens() }

// Positions returns the positional encoding "pos_emb"; nil for a nil
// Encoder.
func (e *Encoder) Positions() *Positions { return e.st().positions() }

// Blocks returns the blocks "blocks.<i>", in order, in a new slice.
func (e *Encoder) Blocks() []*Block { return e.st().blockList() }

// FinalNorm returns the final LayerNorm "ln_f", nil for post-LN encoders and
// for a nil Encoder.
func (e *Encoder) FinalNorm() *LayerNorm { return e.st().finalNorm() }

// NewEncoder returns an encoder in scope s.
func NewEncoder(s *Scope, cfg StackConfig) (*Encoder, error) {
	st, err := newStack(s, encoderKind, cfg)
	if err != nil {
		return nil, err
	}
	return &Encoder{st}, nil
}

// Forward returns hidden states (B, S, D) for ids (B, S) and every block's
// attention weights. pad, if not nil, is a (B, S, S) key-padding mask.
func (e *Encoder) Forward(ids *graph.IDs, pad *graph.MaskNode) (*G.Node, []*G.Node, error) {
	if err := e.st().check("encoder", "NewEncoder"); err != nil {
		return nil, nil, err
	}
	h, weights, _, err := e.forward(ids, pad, nil, nil)
	return h, weights, err
}

// Params returns every learnable with its hierarchical name; nothing for a
// nil Encoder.
func (e *Encoder) Params() []graph.Param { return e.st().params() }

// Dropouts returns every dropout mask, to be redrawn each training step.
func (e *Encoder) Dropouts() []*graph.Dropout { return e.st().dropoutList() }

// KVDim is the width of every attention's projected keys and values, and so
// of a key/value cache's rows: KVHeads·(Dim/Heads), or Dim without KVHeads.
func (c StackConfig) KVDim() int { return c.kvWidth(c.Dim, c.Heads) }
