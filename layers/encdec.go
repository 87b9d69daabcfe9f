package layers

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
)

// EncDecConfig configures an encoder–decoder Transformer (Vaswani et al.'s
// original architecture): an encoder reads the source sequence, a decoder
// writes the target sequence, and every decoder block attends to the
// encoder's output through cross-attention. Source and target have their own
// vocabularies and maximum lengths; the width, heads, feed-forward and the
// options below are shared by both halves.
type EncDecConfig struct {
	// SrcVocab and SrcMaxLen are the source (encoder) token ids and longest
	// source; TgtVocab and TgtMaxLen those of the target (decoder), whose
	// vocabulary is also that of the output logits.
	SrcVocab  int `json:"src_vocab"`
	SrcMaxLen int `json:"src_max_len"`
	TgtVocab  int `json:"tgt_vocab"`
	TgtMaxLen int `json:"tgt_max_len"`
	// Dim is the model width D of both halves, Heads the number of heads of
	// every attention (D % Heads == 0), Hidden the feed-forward width.
	Dim    int `json:"dim"`
	Heads  int `json:"heads"`
	Hidden int `json:"hidden"`
	// EncLayers and DecLayers are the numbers of encoder and decoder blocks.
	EncLayers int `json:"enc_layers"`
	DecLayers int `json:"dec_layers"`
	// Activation of the feed-forward layers; "" means ReLU.
	Activation Activation `json:"activation"`
	// Positions is PositionsLearned (the default for ""), PositionsSinusoidal
	// or PositionsNone, for both halves (each has its own table).
	Positions PositionsKind `json:"positions"`
	// PostLN selects post-LN blocks; the default is pre-LN with a final norm
	// at the end of each half.
	PostLN bool `json:"post_ln"`
	// Bias adds biases to attention and feed-forward projections.
	Bias bool `json:"bias"`
	// Dropout on embeddings and sublayer outputs; AttnDropout on the weights
	// of every attention, cross-attention included.
	Dropout     float64 `json:"dropout"`
	AttnDropout float64 `json:"attn_dropout"`
	// Attention is how every attention is computed: AttentionFused (the
	// default for ""), AttentionComposed or AttentionFlash. It changes no
	// parameter.
	Attention AttentionImpl `json:"attention,omitempty"`
	// AttnScale is the factor of every attention's scores, cross-attention
	// included: ScaleDK (the default for ""), ScaleDModel or ScaleNone.
	AttnScale AttentionScale `json:"attn_scale,omitempty"`
	// CausalEncoder makes the encoder's self-attention causal (see
	// StackConfig.CausalEncoder); the decoder's is causal either way, its
	// cross-attention never.
	CausalEncoder bool `json:"causal_encoder,omitempty"`
}

// encoderConfig is the configuration of the encoder half.
func (c EncDecConfig) encoderConfig() StackConfig {
	return StackConfig{
		Vocab: c.SrcVocab, MaxLen: c.SrcMaxLen, Dim: c.Dim, Heads: c.Heads, Layers: c.EncLayers, Hidden: c.Hidden,
		Activation: c.Activation, Positions: c.Positions, PostLN: c.PostLN, Bias: c.Bias,
		Dropout: c.Dropout, AttnDropout: c.AttnDropout, Attention: c.Attention, AttnScale: c.AttnScale,
		CausalEncoder: c.CausalEncoder,
	}
}

// decoderConfig is the decoder half seen as a stack (embeddings, blocks'
// self-attention and feed-forward, final norm); the cross-attention and
// third LayerNorm of its blocks are counted on top.
func (c EncDecConfig) decoderConfig() StackConfig {
	return StackConfig{
		Vocab: c.TgtVocab, MaxLen: c.TgtMaxLen, Dim: c.Dim, Heads: c.Heads, Layers: c.DecLayers, Hidden: c.Hidden,
		Activation: c.Activation, Positions: c.Positions, PostLN: c.PostLN, Bias: c.Bias,
		Dropout: c.Dropout, AttnDropout: c.AttnDropout, Attention: c.Attention, AttnScale: c.AttnScale,
	}
}

// Validate checks everything NewEncoderDecoder checks, without allocating
// anything: every size positive, Dim divisible by Heads, known Activation,
// Positions and Attention, the rates in [0, 1) (flash with no attention
// dropout), every tensor and the total parameter count within
// graph.MaxElements. Errors match ErrConfig and name the field or the layer
// ("dec.blocks.0.cross_attn").
func (c EncDecConfig) Validate() error {
	_, err := c.validate("")
	return err
}

// validate checks c for a model in scope prefix and returns its parameter
// count.
func (c EncDecConfig) validate(prefix string) (int, error) {
	sub := (&Scope{prefix: prefix}).Name
	if err := checkPositive(size{"SrcVocab", c.SrcVocab}, size{"SrcMaxLen", c.SrcMaxLen},
		size{"TgtVocab", c.TgtVocab}, size{"TgtMaxLen", c.TgtMaxLen},
		size{"EncLayers", c.EncLayers}, size{"DecLayers", c.DecLayers}); err != nil {
		return 0, layerErr("encoder-decoder", prefix, err)
	}
	// The halves' errors say which half: `encoder-decoder "enc"`.
	enc, err := c.encoderConfig().validate(fmt.Sprintf("encoder-decoder %q", sub("enc")), sub("enc"), false)
	if err != nil {
		return 0, err
	}
	dec, err := c.decoderConfig().validate(fmt.Sprintf("encoder-decoder %q", sub("dec")), sub("dec"), false)
	if err != nil {
		return 0, err
	}
	blk := c.blockConfig()
	if err := blk.validate(sub("dec.blocks.0")); err != nil {
		return 0, err
	}
	head := LinearConfig{In: c.Dim, Out: c.TgtVocab, Bias: true}
	if err := head.validate(sub("head")); err != nil {
		return 0, err
	}
	// The decoder stack counted each block's ln1, self-attention, ln2 and
	// feed-forward; the cross-attention and one more LayerNorm come on top.
	ln, attn, _ := blk.parts()
	extra := ln.params() + attn.params()
	if extra > graph.MaxElements/c.DecLayers {
		return 0, configErrorf("layers: encoder-decoder: %d decoder layers of %d cross-attention parameters each exceed graph.MaxElements = %d", c.DecLayers, extra, graph.MaxElements)
	}
	return addCounts("layers: encoder-decoder", enc, dec, extra*c.DecLayers, head.params())
}

// blockConfig is the configuration of every decoder block.
func (c EncDecConfig) blockConfig() BlockConfig {
	return c.decoderConfig().blockConfig(true)
}

// DecoderBlock is a Transformer decoder block with three sublayers, each in
// a residual connection with its LayerNorm:
//
//	x = x + SelfAttn(LN1(x))          queries, keys, values: the target
//	x = x + CrossAttn(LN2(x), memory) queries: the target; keys, values: memory
//	x = x + FF(LN3(x))
//
// (pre-LN; post-LN normalises each residual sum instead). memory is the
// encoder's output: cross-attention is where the decoder reads the source.
// Its parameters are ln1, self_attn, ln2, cross_attn, ln3, ff in its scope.
// Its configuration is fixed when it is built: Config returns a copy.
type DecoderBlock struct {
	cfg           BlockConfig
	ln1, ln2, ln3 *LayerNorm
	self, cross   *MultiHeadAttention
	ff            *FeedForward
	s             *Scope
	dropouts      []*graph.Dropout
}

// NewDecoderBlock returns a decoder block in scope s. cfg.Causal makes the
// self-attention causal (as an autoregressive decoder needs); the
// cross-attention is never causal: every target position may read every
// source position the mask allows.
func NewDecoderBlock(s *Scope, cfg BlockConfig) (*DecoderBlock, error) {
	if err := s.check(); err != nil {
		return nil, layerErr("decoder block", s.path(), err)
	}
	if err := cfg.validate(s.path()); err != nil {
		return nil, err
	}
	lnCfg, selfCfg, ffCfg := cfg.parts()
	crossCfg := selfCfg
	crossCfg.Causal = false
	b := &DecoderBlock{cfg: cfg, s: s}
	var err error
	for _, ln := range []struct {
		l    **LayerNorm
		name string
	}{{&b.ln1, "ln1"}, {&b.ln2, "ln2"}, {&b.ln3, "ln3"}} {
		if *ln.l, err = NewLayerNorm(s.Sub(ln.name), lnCfg); err != nil {
			return nil, err
		}
	}
	if b.self, err = NewMultiHeadAttention(s.Sub("self_attn"), selfCfg); err != nil {
		return nil, err
	}
	if b.cross, err = NewMultiHeadAttention(s.Sub("cross_attn"), crossCfg); err != nil {
		return nil, err
	}
	if b.ff, err = NewFeedForward(s.Sub("ff"), ffCfg); err != nil {
		return nil, err
	}
	return b, nil
}

// Config returns a copy of the configuration the block was built with; the
// zero BlockConfig for a nil DecoderBlock.
func (b *DecoderBlock) Config() BlockConfig {
	if b == nil {
		return BlockConfig{}
	}
	return b.cfg
}

// LN1 returns the LayerNorm of the self-attention sublayer; nil for a nil
// block.
func (b *DecoderBlock) LN1() *LayerNorm {
	if b == nil {
		return nil
	}
	return b.ln1
}

// SelfAttention returns the self-attention "self_attn"; nil for a nil block.
func (b *DecoderBlock) SelfAttention() *MultiHeadAttention {
	if b == nil {
		return nil
	}
	return b.self
}

// LN2 returns the LayerNorm of the cross-attention sublayer; nil for a nil
// block.
func (b *DecoderBlock) LN2() *LayerNorm {
	if b == nil {
		return nil
	}
	return b.ln2
}

// CrossAttention returns the cross-attention "cross_attn", whose wk and wv
// project the encoder output; nil for a nil block.
func (b *DecoderBlock) CrossAttention() *MultiHeadAttention {
	if b == nil {
		return nil
	}
	return b.cross
}

// LN3 returns the LayerNorm of the feed-forward sublayer; nil for a nil
// block.
func (b *DecoderBlock) LN3() *LayerNorm {
	if b == nil {
		return nil
	}
	return b.ln3
}

// FeedForward returns the feed-forward layer "ff"; nil for a nil block.
func (b *DecoderBlock) FeedForward() *FeedForward {
	if b == nil {
		return nil
	}
	return b.ff
}

// Forward maps the target states x (B, St, D) to (B, St, D), reading memory
// (B, Ss, D). selfMask, if not nil, is (B, St, St); crossMask, if not nil,
// (B, St, Ss), hides source padding from the cross-attention. It returns the
// self-attention weights (B, H, St, St) and the cross-attention weights
// (B, H, St, Ss), both nil with AttentionFlash.
func (b *DecoderBlock) Forward(x, memory *G.Node, selfMask, crossMask *graph.MaskNode) (y, selfWeights, crossWeights *G.Node, err error) {
	if err := b.check(); err != nil {
		return nil, nil, nil, err
	}
	if err := graph.CheckNode(x, "input"); err != nil {
		return nil, nil, nil, layerErr("decoder block", b.s.prefix, err)
	}
	if err := graph.CheckNode(memory, "memory"); err != nil {
		return nil, nil, nil, layerErr("decoder block", b.s.prefix, err)
	}
	selfAttend := func(h *G.Node) (*G.Node, error) {
		out, w, err := b.self.Forward(h, h, h, selfMask) // Q, K, V from the target
		selfWeights = w
		return out, err
	}
	crossAttend := func(h *G.Node) (*G.Node, error) {
		// Q from the target, K and V from the encoder: the one line that
		// makes this cross-attention rather than self-attention.
		out, w, err := b.cross.Forward(h, memory, memory, crossMask)
		crossWeights = w
		return out, err
	}
	if y, err = b.residual(x, b.ln1, selfAttend, "drop_self_attn"); err != nil {
		return nil, nil, nil, err
	}
	if y, err = b.residual(y, b.ln2, crossAttend, "drop_cross_attn"); err != nil {
		return nil, nil, nil, err
	}
	if y, err = b.residual(y, b.ln3, b.ff.Forward, "drop_ff"); err != nil {
		return nil, nil, nil, err
	}
	return y, selfWeights, crossWeights, nil
}

// Step is Forward for one new target position per row, for generation:
// the self-attention reads and extends a key/value cache (see
// MultiHeadAttention.Step: cacheK, cacheV (B, St, D), slot (B, St, 1),
// selfMask (B, 1, St)), and the cross-attention reads crossK and crossV
// (B, Ss, D), the encoder output's keys and values that
// EncoderDecoder.Encode projected once per prompt, under crossMask
// (B, 1, Ss). It returns y (B, 1, D) and the self-attention caches with the
// new row written in.
func (b *DecoderBlock) Step(x, cacheK, cacheV, slot *G.Node, selfMask *graph.MaskNode, crossK, crossV *G.Node, crossMask *graph.MaskNode) (y, keys, values *G.Node, err error) {
	if err := b.check(); err != nil {
		return nil, nil, nil, err
	}
	selfAttend := func(h *G.Node) (*G.Node, error) {
		out, k, v, err := b.self.Step(h, cacheK, cacheV, slot, selfMask)
		keys, values = k, v
		return out, err
	}
	crossAttend := func(h *G.Node) (*G.Node, error) { return b.cross.AttendProjected(h, crossK, crossV, crossMask) }
	if y, err = b.residual(x, b.ln1, selfAttend, "drop_self_attn"); err != nil {
		return nil, nil, nil, err
	}
	if y, err = b.residual(y, b.ln2, crossAttend, "drop_cross_attn"); err != nil {
		return nil, nil, nil, err
	}
	if y, err = b.residual(y, b.ln3, b.ff.Forward, "drop_ff"); err != nil {
		return nil, nil, nil, err
	}
	return y, keys, values, nil
}

// residual returns b's sublayer f wrapped in its residual connection, as
// Block's sublayers are.
func (b *DecoderBlock) residual(x *G.Node, ln *LayerNorm, f func(*G.Node) (*G.Node, error), dropName string) (*G.Node, error) {
	return residual("decoder block", b.s, b.cfg, &b.dropouts, x, ln, f, dropName)
}

// check returns an error unless b was made by NewDecoderBlock.
func (b *DecoderBlock) check() error {
	if b == nil || b.s.check() != nil || b.ln1 == nil || b.ln2 == nil || b.ln3 == nil || b.self == nil || b.cross == nil || b.ff == nil {
		return errors.New("layers: decoder block: the block is nil or a zero value: make it with NewDecoderBlock")
	}
	return nil
}

// Params returns ln1, self_attn, ln2, cross_attn, ln3 and ff parameters in
// that order; nothing for a nil block.
func (b *DecoderBlock) Params() []graph.Param {
	if b == nil {
		return nil
	}
	return concatParams(b.ln1.Params(), b.self.Params(), b.ln2.Params(), b.cross.Params(), b.ln3.Params(), b.ff.Params())
}

// Dropouts returns the dropout masks of the block, to be redrawn every step.
func (b *DecoderBlock) Dropouts() []*graph.Dropout {
	if b == nil {
		return nil
	}
	out := append([]*graph.Dropout(nil), b.self.Dropouts()...)
	out = append(out, b.cross.Dropouts()...)
	return append(out, b.dropouts...)
}

// EncDecWeights are the attention weights of one forward pass of an
// EncoderDecoder, one node per layer, in layer order. With AttentionFlash
// every entry is nil: flash never forms the weights.
type EncDecWeights struct {
	// Encoder holds each encoder block's self-attention (B, H, Ss, Ss).
	Encoder []*G.Node
	// DecoderSelf holds each decoder block's causal self-attention
	// (B, H, St, St).
	DecoderSelf []*G.Node
	// Cross holds each decoder block's cross-attention (B, H, St, Ss):
	// queries are target positions, keys source positions.
	Cross []*G.Node
}

// EncoderDecoder is the encoder–decoder Transformer: an Encoder over the
// source, a stack of DecoderBlocks over the target that cross-attend to the
// encoder output, a final norm (pre-LN) and a projection to target-vocabulary
// logits.
//
// Its parameters, as Params names them (in this order), are
//
//	enc.tok_emb.table                 (SrcVocab, D)  source token embedding
//	enc.pos_emb.table                 (SrcMaxLen, D) learned positions only
//	enc.blocks.<i>.ln1.{gain,bias}    (D)
//	enc.blocks.<i>.attn.{wq,wk,wv,wo} (D, D), with Bias {bq,bk,bv,bo} (D)
//	enc.blocks.<i>.ln2.{gain,bias}    (D)
//	enc.blocks.<i>.ff.w1 (D, Hidden), ff.w2 (Hidden, D), with Bias b1, b2
//	enc.ln_f.{gain,bias}              (D)            pre-LN only
//	dec.tok_emb.table                 (TgtVocab, D)  target token embedding
//	dec.pos_emb.table                 (TgtMaxLen, D) learned positions only
//	dec.blocks.<i>.ln1.{gain,bias}          before the self-attention
//	dec.blocks.<i>.self_attn.{wq,...,bo}    causal self-attention
//	dec.blocks.<i>.ln2.{gain,bias}          before the cross-attention
//	dec.blocks.<i>.cross_attn.{wq,...,bo}   wq reads the target, wk and wv the encoder output
//	dec.blocks.<i>.ln3.{gain,bias}          before the feed-forward
//	dec.blocks.<i>.ff.{w1,b1,w2,b2}
//	dec.ln_f.{gain,bias}              (D)            pre-LN only
//	head.w (D, TgtVocab), head.b (TgtVocab)
//
// prefixed by the scope's own prefix. Weights are (in, out): y = x W + b.
// With post-LN, ln1, ln2 (and ln3) normalise the residual sums and there is
// no ln_f. Its configuration is fixed when it is built: Config returns a
// copy, and Encoder, TargetEmbedding, TargetPositions, DecoderBlocks,
// FinalNorm and Head return its layers.
type EncoderDecoder struct {
	cfg      EncDecConfig
	enc      *Encoder
	tok      *Embedding
	pos      *Positions
	blocks   []*DecoderBlock
	lnf      *LayerNorm // nil for post-LN
	head     *Linear
	s        *Scope // the model's scope
	ds       *Scope // the decoder half's scope, "dec"
	dropouts []*graph.Dropout
}

// NewEncoderDecoder returns an encoder–decoder model in scope s, its
// parameters named as EncoderDecoder documents.
func NewEncoderDecoder(s *Scope, cfg EncDecConfig) (*EncoderDecoder, error) {
	if err := s.check(); err != nil {
		return nil, layerErr("encoder-decoder", s.path(), err)
	}
	if _, err := cfg.validate(s.path()); err != nil {
		return nil, err
	}
	if cfg.Positions == "" {
		cfg.Positions = PositionsLearned
	}
	m := &EncoderDecoder{cfg: cfg, s: s, ds: s.Sub("dec")}
	var err error
	if m.enc, err = NewEncoder(s.Sub("enc"), cfg.encoderConfig()); err != nil {
		return nil, err
	}
	dc := cfg.decoderConfig()
	if m.tok, err = NewEmbedding(m.ds.Sub("tok_emb"), EmbeddingConfig{Vocab: cfg.TgtVocab, Dim: cfg.Dim}); err != nil {
		return nil, err
	}
	if m.pos, err = NewPositions(m.ds.Sub("pos_emb"), dc.positionsConfig()); err != nil {
		return nil, err
	}
	for i := 0; i < cfg.DecLayers; i++ {
		b, err := NewDecoderBlock(m.ds.Sub("blocks").Sub(strconv.Itoa(i)), cfg.blockConfig())
		if err != nil {
			return nil, err
		}
		m.blocks = append(m.blocks, b)
	}
	if !cfg.PostLN {
		if m.lnf, err = NewLayerNorm(m.ds.Sub("ln_f"), LayerNormConfig{Dim: cfg.Dim}); err != nil {
			return nil, err
		}
	}
	if m.head, err = NewLinear(s.Sub("head"), LinearConfig{In: cfg.Dim, Out: cfg.TgtVocab, Bias: true}); err != nil {
		return nil, err
	}
	return m, nil
}

// Config returns a copy of the configuration the model was built with,
// Positions filled in; the zero EncDecConfig for a nil model.
func (m *EncoderDecoder) Config() EncDecConfig {
	if m == nil {
		return EncDecConfig{}
	}
	return m.cfg
}

// Encoder returns the encoder half "enc"; nil for a nil model.
func (m *EncoderDecoder) Encoder() *Encoder {
	if m == nil {
		return nil
	}
	return m.enc
}

// TargetEmbedding returns the target token embedding "dec.tok_emb"; nil for
// a nil model.
func (m *EncoderDecoder) TargetEmbedding() *Embedding {
	if m == nil {
		return nil
	}
	return m.tok
}

// TargetPositions returns the target positional encoding "dec.pos_emb"; nil
// for a nil model.
func (m *EncoderDecoder) TargetPositions() *Positions {
	if m == nil {
		return nil
	}
	return m.pos
}

// DecoderBlocks returns the decoder blocks "dec.blocks.<i>", in order, in a
// new slice.
func (m *EncoderDecoder) DecoderBlocks() []*DecoderBlock {
	if m == nil {
		return nil
	}
	return append([]*DecoderBlock(nil), m.blocks...)
}

// FinalNorm returns the decoder's final LayerNorm "dec.ln_f", nil for
// post-LN models and for a nil model. The encoder's is Encoder().FinalNorm().
func (m *EncoderDecoder) FinalNorm() *LayerNorm {
	if m == nil {
		return nil
	}
	return m.lnf
}

// Head returns the projection "head" from Dim to target-vocabulary logits;
// nil for a nil model.
func (m *EncoderDecoder) Head() *Linear {
	if m == nil {
		return nil
	}
	return m.head
}

// check returns an error unless m was made by NewEncoderDecoder.
func (m *EncoderDecoder) check() error {
	const msg = "layers: encoder-decoder: the model is nil or a zero value: make it with NewEncoderDecoder"
	if m == nil || m.s.check() != nil || m.ds.check() != nil || m.tok == nil || m.pos == nil || len(m.blocks) == 0 ||
		(!m.cfg.PostLN && m.lnf == nil) || m.head.check() != nil {
		return errors.New(msg)
	}
	if m.enc == nil || m.enc.stack.check("encoder", "NewEncoderDecoder") != nil {
		return errors.New(msg)
	}
	for _, b := range m.blocks {
		if b.check() != nil {
			return layerErr("encoder-decoder", m.s.prefix, errors.New("a decoder block is nil or a zero value: make the model with NewEncoderDecoder"))
		}
	}
	return nil
}

// Forward returns next-token logits (B, St, TgtVocab) for the source ids src
// (B, Ss) and the target ids tgt (B, St), with the attention weights of
// every layer. Ss and St may differ; each is at most its MaxLen.
//
// The three masks are all nil (no padding) or all given, for they describe
// the same padded batch:
//
//   - srcPad (B, Ss, Ss) hides source padding from the encoder's
//     self-attention: graph.KeyPadding(srcLengths, Ss, Ss);
//   - tgtPad (B, St, St) hides target padding from the decoder's
//     self-attention, joined here with the causal mask:
//     graph.KeyPadding(tgtLengths, St, St);
//   - crossPad (B, St, Ss) hides source padding from the cross-attention,
//     every target position seeing the same source keys:
//     graph.KeyPadding(srcLengths, St, Ss).
//
// crossPad is an input of its own, not derived from srcPad, because a mask
// node holds no lengths, only a (B, Ss, Ss) bias that could be anything;
// EncDecInputs makes all three from the lengths and binds them together.
// srcPad and crossPad must both be given or both be nil: a source padded in
// the encoder but not in the cross-attention would let the decoder read its
// padding. A nil tgtPad with padded sources is allowed: with right padding
// and a causal mask, no real target position can see a padded one.
//
// Errors name the layer and the input; wrong shapes match ErrShape.
func (m *EncoderDecoder) Forward(src *graph.IDs, srcPad *graph.MaskNode, tgt *graph.IDs, tgtPad, crossPad *graph.MaskNode) (logits *G.Node, attn EncDecWeights, err error) {
	if err := m.check(); err != nil {
		return nil, EncDecWeights{}, err
	}
	fail := func(err error) (*G.Node, EncDecWeights, error) {
		return nil, EncDecWeights{}, err
	}
	if err := m.checkInputs(src, srcPad, tgt, tgtPad, crossPad); err != nil {
		return fail(layerErr("encoder-decoder", m.s.prefix, err))
	}
	memory, encWeights, err := m.enc.Forward(src, srcPad) // (B, Ss, D), (B, H, Ss, Ss) each
	if err != nil {
		return fail(err)
	}
	// One causal mask for all decoder blocks, so that no block adds its own.
	selfMask, err := CausalMask(m.ds, tgt.B, tgt.S) // (B, St, St)
	if err != nil {
		return fail(err)
	}
	if tgtPad != nil {
		if selfMask, err = graph.CombineMasks(selfMask, tgtPad); err != nil {
			return fail(layerErr("encoder-decoder", m.s.prefix, fmt.Errorf("target padding mask: %w", err)))
		}
	}
	x, err := m.tok.Forward(tgt) // (B, St, D)
	if err != nil {
		return fail(err)
	}
	if x, err = m.pos.Forward(x); err != nil { // (B, St, D)
		return fail(err)
	}
	drop, err := m.ds.dropout("drop_emb", m.cfg.Dropout, x.Shape())
	if err != nil {
		return fail(layerErr("encoder-decoder", m.s.prefix, err))
	}
	if drop != nil {
		m.dropouts = append(m.dropouts, drop)
		if x, err = drop.Apply(x); err != nil {
			return fail(layerErr("encoder-decoder", m.s.prefix, err))
		}
	}
	attn = EncDecWeights{
		Encoder:     encWeights,
		DecoderSelf: make([]*G.Node, len(m.blocks)),
		Cross:       make([]*G.Node, len(m.blocks)),
	}
	for i, b := range m.blocks {
		// (B, St, D), (B, H, St, St), (B, H, St, Ss)
		if x, attn.DecoderSelf[i], attn.Cross[i], err = b.Forward(x, memory, selfMask, crossPad); err != nil {
			return fail(err)
		}
	}
	if m.lnf != nil {
		if x, err = m.lnf.Forward(x); err != nil {
			return fail(err)
		}
	}
	if logits, err = m.head.Forward(x); err != nil { // (B, St, TgtVocab)
		return fail(err)
	}
	return logits, attn, nil
}

// Encode runs the encoder on src (B, Ss) under srcPad (nil, or
// (B, Ss, Ss)) and returns, for each decoder block, the keys and values
// (B, Ss, D) its cross-attention reads: computed once per prompt, then
// given to every Step.
func (m *EncoderDecoder) Encode(src *graph.IDs, srcPad *graph.MaskNode) (crossK, crossV []*G.Node, err error) {
	if err := m.check(); err != nil {
		return nil, nil, err
	}
	memory, _, err := m.enc.Forward(src, srcPad) // (B, Ss, D)
	if err != nil {
		return nil, nil, err
	}
	for _, b := range m.blocks {
		k, v, err := b.cross.Project(memory) // (B, Ss, D) each
		if err != nil {
			return nil, nil, err
		}
		crossK, crossV = append(crossK, k), append(crossV, v)
	}
	return crossK, crossV, nil
}

// Step runs the decoder on one new target token per row, for generation
// with a key/value cache: tok and pos (B, 1) are the tokens and their
// positions; cacheK and cacheV hold each block's self-attention cache
// (B, St, D), slot (B, St, 1) marks each row's position and selfMask
// (B, 1, St) the positions it sees; crossK and crossV are Encode's, and
// crossMask (B, 1, Ss) hides source padding. It returns the logits
// (B, 1, TgtVocab) and the caches with the new row written in. Dropout is
// not applied: a step is for inference.
func (m *EncoderDecoder) Step(tok, pos *graph.IDs, cacheK, cacheV []*G.Node, slot *G.Node, selfMask *graph.MaskNode, crossK, crossV []*G.Node, crossMask *graph.MaskNode) (logits *G.Node, keys, values []*G.Node, err error) {
	if err := m.check(); err != nil {
		return nil, nil, nil, err
	}
	n := len(m.blocks)
	if len(cacheK) != n || len(cacheV) != n || len(crossK) != n || len(crossV) != n {
		return nil, nil, nil, layerErr("encoder-decoder", m.s.prefix, shapeErrorf("step: %d, %d self caches and %d, %d cross keys and values; want %d of each",
			len(cacheK), len(cacheV), len(crossK), len(crossV), n))
	}
	x, err := m.tok.Forward(tok) // (B, 1, D)
	if err != nil {
		return nil, nil, nil, err
	}
	pe, err := m.pos.At(pos) // (B, 1, D), nil without positions
	if err != nil {
		return nil, nil, nil, err
	}
	if pe != nil {
		if x, err = G.Add(x, pe); err != nil {
			return nil, nil, nil, layerErr("encoder-decoder", m.s.prefix, err)
		}
	}
	keys, values = make([]*G.Node, n), make([]*G.Node, n)
	for i, b := range m.blocks {
		if x, keys[i], values[i], err = b.Step(x, cacheK[i], cacheV[i], slot, selfMask, crossK[i], crossV[i], crossMask); err != nil {
			return nil, nil, nil, err
		}
	}
	if m.lnf != nil {
		if x, err = m.lnf.Forward(x); err != nil {
			return nil, nil, nil, err
		}
	}
	if logits, err = m.head.Forward(x); err != nil { // (B, 1, TgtVocab)
		return nil, nil, nil, err
	}
	return logits, keys, values, nil
}

// checkInputs checks the ids and masks of Forward against each other and the
// configuration, so that a mismatch is reported naming the input rather than
// by whichever layer first trips on it.
func (m *EncoderDecoder) checkInputs(src *graph.IDs, srcPad *graph.MaskNode, tgt *graph.IDs, tgtPad, crossPad *graph.MaskNode) error {
	if err := src.Check(); err != nil {
		return fmt.Errorf("source: %w", err)
	}
	if err := tgt.Check(); err != nil {
		return fmt.Errorf("target: %w", err)
	}
	if src.B != tgt.B {
		return shapeErrorf("source batch %d and target batch %d differ", src.B, tgt.B)
	}
	if src.S > m.cfg.SrcMaxLen {
		return shapeErrorf("source length %d exceeds SrcMaxLen %d", src.S, m.cfg.SrcMaxLen)
	}
	if tgt.S > m.cfg.TgtMaxLen {
		return shapeErrorf("target length %d exceeds TgtMaxLen %d", tgt.S, m.cfg.TgtMaxLen)
	}
	if src.Vocab > m.cfg.SrcVocab {
		return shapeErrorf("source ids range over %d tokens, SrcVocab is %d", src.Vocab, m.cfg.SrcVocab)
	}
	if tgt.Vocab > m.cfg.TgtVocab {
		return shapeErrorf("target ids range over %d tokens, TgtVocab is %d", tgt.Vocab, m.cfg.TgtVocab)
	}
	if (srcPad == nil) != (crossPad == nil) {
		return shapeErrorf("source padding mask given %t but cross-attention mask given %t: give both (graph.KeyPadding(srcLengths, Ss, Ss) and (srcLengths, St, Ss)) or neither", srcPad != nil, crossPad != nil)
	}
	b, ss, st := src.B, src.S, tgt.S
	for _, mk := range []struct {
		n      *graph.MaskNode
		name   string
		sq, sk int
	}{{srcPad, "source padding mask", ss, ss}, {tgtPad, "target padding mask", st, st}, {crossPad, "cross-attention mask", st, ss}} {
		if mk.n == nil {
			continue
		}
		if err := mk.n.Check(); err != nil {
			return fmt.Errorf("%s: %w", mk.name, err)
		}
		if mk.n.B != b || mk.n.Sq != mk.sq || mk.n.Sk != mk.sk {
			return shapeErrorf("%s is (B, Sq, Sk) = (%d, %d, %d), want (%d, %d, %d) for %d sources of %d and targets of %d tokens",
				mk.name, mk.n.B, mk.n.Sq, mk.n.Sk, b, mk.sq, mk.sk, b, ss, st)
		}
		if mk.n.Bias.Dtype() != m.s.dt {
			return fmt.Errorf("%s is %v, the model is %v", mk.name, mk.n.Bias.Dtype(), m.s.dt)
		}
	}
	return nil
}

// Params returns every learnable with its hierarchical name, in the order
// EncoderDecoder documents: the encoder's, the decoder's, then the head's;
// nothing for a nil model.
func (m *EncoderDecoder) Params() []graph.Param {
	if m == nil {
		return nil
	}
	ps := concatParams(m.enc.Params(), m.tok.Params(), m.pos.Params())
	for _, b := range m.blocks {
		ps = append(ps, b.Params()...)
	}
	if m.lnf != nil {
		ps = append(ps, m.lnf.Params()...)
	}
	return append(ps, m.head.Params()...)
}

// Dropouts returns every dropout mask of both halves, to be redrawn each
// training step.
func (m *EncoderDecoder) Dropouts() []*graph.Dropout {
	if m == nil {
		return nil
	}
	out := append(m.enc.Dropouts(), m.dropouts...)
	for _, b := range m.blocks {
		out = append(out, b.Dropouts()...)
	}
	return out
}

// EncDecInputs are the inputs of one encoder–decoder batch shape: source and
// target ids and the three padding masks Forward takes, made together so that
// Set binds them consistently from the sequence lengths.
type EncDecInputs struct {
	// Src (B, Ss) and Tgt (B, St) are the token ids.
	Src, Tgt *graph.IDs
	// SrcPad (B, Ss, Ss), TgtPad (B, St, St) and CrossPad (B, St, Ss) are
	// the key-padding masks, as Forward documents.
	SrcPad, TgtPad, CrossPad *graph.MaskNode
}

// NewEncDecInputs returns the inputs of a batch of b source sequences of at
// most ss tokens and b target sequences of at most st tokens for the model
// cfg, in the graph and dtype of s. Their names are "src", "tgt", "src_pad",
// "tgt_pad" and "cross_pad" within s.
func NewEncDecInputs(s *Scope, cfg EncDecConfig, b, ss, st int) (*EncDecInputs, error) {
	if err := s.check(); err != nil {
		return nil, layerErr("encoder-decoder inputs", s.path(), err)
	}
	in := &EncDecInputs{}
	var err error
	if in.Src, err = graph.NewIDs(s.g, b, ss, cfg.SrcVocab, s.Name("src")); err != nil {
		return nil, layerErr("encoder-decoder inputs", s.path(), err)
	}
	if in.Tgt, err = graph.NewIDs(s.g, b, st, cfg.TgtVocab, s.Name("tgt")); err != nil {
		return nil, layerErr("encoder-decoder inputs", s.path(), err)
	}
	for _, mk := range []struct {
		n      **graph.MaskNode
		sq, sk int
		name   string
	}{{&in.SrcPad, ss, ss, "src_pad"}, {&in.TgtPad, st, st, "tgt_pad"}, {&in.CrossPad, st, ss, "cross_pad"}} {
		if *mk.n, err = graph.NewMaskInput(s.g, s.dt, b, mk.sq, mk.sk, s.Name(mk.name)); err != nil {
			return nil, layerErr("encoder-decoder inputs", s.path(), err)
		}
	}
	return in, nil
}

// Set binds a batch: src (B*Ss) and tgt (B*St) row-major ids, and the
// number of real (non-padding) tokens of each source and target sequence,
// from which it makes the three key-padding masks. Padding must be at the
// end of each sequence; the ids there are ignored by the model but must
// still be valid ids.
func (in *EncDecInputs) Set(src, srcLengths, tgt, tgtLengths []int) error {
	if in == nil || in.Src == nil || in.Tgt == nil || in.SrcPad == nil || in.TgtPad == nil || in.CrossPad == nil {
		return errors.New("layers: encoder-decoder inputs: nil or a zero value: make them with NewEncDecInputs")
	}
	if err := in.Src.Set(src); err != nil {
		return fmt.Errorf("layers: encoder-decoder inputs: source: %w", err)
	}
	if err := in.Tgt.Set(tgt); err != nil {
		return fmt.Errorf("layers: encoder-decoder inputs: target: %w", err)
	}
	b, ss, st := in.Src.B, in.Src.S, in.Tgt.S
	if len(srcLengths) != b || len(tgtLengths) != b {
		return shapeErrorf("layers: encoder-decoder inputs: %d source and %d target lengths for a batch of %d", len(srcLengths), len(tgtLengths), b)
	}
	for _, mk := range []struct {
		n       *graph.MaskNode
		lengths []int
		sq, sk  int
		name    string
	}{{in.SrcPad, srcLengths, ss, ss, "source padding"}, {in.TgtPad, tgtLengths, st, st, "target padding"}, {in.CrossPad, srcLengths, st, ss, "cross-attention padding"}} {
		m, err := graph.KeyPadding(mk.lengths, mk.sq, mk.sk)
		if err != nil {
			return fmt.Errorf("layers: encoder-decoder inputs: %s: %w", mk.name, err)
		}
		if err := mk.n.Set(m); err != nil {
			return fmt.Errorf("layers: encoder-decoder inputs: %s: %w", mk.name, err)
		}
	}
	return nil
}
