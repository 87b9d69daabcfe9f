package layers

import (
	"errors"
	"fmt"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
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
	// BlockOptions are the options of every block of both halves; learned
	// positions give each half its own table.
	BlockOptions
	// LayerKinds are the kinds of the self-attentions of both halves, each
	// cycled over its own blocks (see StackConfig.LayerKinds); every
	// cross-attention is softmax attention.
	LayerKinds string `json:"layer_kinds,omitempty"`
	// CausalEncoder makes the encoder's self-attention causal (see
	// StackConfig.CausalEncoder); the decoder's is causal either way, its
	// cross-attention never.
	CausalEncoder bool `json:"causal_encoder,omitempty"`
	// Init is how both halves and the head draw their parameters (see
	// StackConfig.Init); with InitGPT2 each half scales its residual output
	// projections by its own depth, 1/sqrt(2·EncLayers) and
	// 1/sqrt(2·DecLayers).
	Init InitKind `json:"init,omitempty"`
	// There is no TieEmbeddings: the head's vocabulary is the target's, and
	// qkv ties nothing across the halves; config.Config refuses
	// tie_embeddings with arch encdec.
}

// encoderConfig is the configuration of the encoder half.
func (c EncDecConfig) encoderConfig() StackConfig {
	enc := c.half(c.SrcVocab, c.SrcMaxLen, c.EncLayers)
	enc.CausalEncoder = c.CausalEncoder
	return enc
}

// decoderConfig is the configuration of the decoder half, a stack whose
// blocks cross-attend to the encoder output (crossKind); its Vocab is also
// that of the head.
func (c EncDecConfig) decoderConfig() StackConfig {
	return c.half(c.TgtVocab, c.TgtMaxLen, c.DecLayers)
}

// half is the configuration of a half of the model with the given
// vocabulary, longest sequence and number of blocks: the rest the halves
// share.
func (c EncDecConfig) half(vocab, maxLen, layers int) StackConfig {
	return StackConfig{Vocab: vocab, MaxLen: maxLen, Dim: c.Dim, Heads: c.Heads, Layers: layers, Hidden: c.Hidden, BlockOptions: c.BlockOptions, LayerKinds: c.LayerKinds, Init: c.Init}
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
	if err := checkPositive(size{"SrcVocab", "src_vocab", c.SrcVocab}, size{"SrcMaxLen", "src_max_len", c.SrcMaxLen},
		size{"TgtVocab", "tgt_vocab", c.TgtVocab}, size{"TgtMaxLen", "tgt_max_len", c.TgtMaxLen},
		size{"EncLayers", "enc_layers", c.EncLayers}, size{"DecLayers", "dec_layers", c.DecLayers}); err != nil {
		return 0, layerErr("encoder-decoder", prefix, err)
	}
	// The halves' errors say which half: `encoder-decoder "enc"`.
	encKind, decKind := encoderKind, crossKind
	encKind.name = fmt.Sprintf("encoder-decoder %q", sub("enc"))
	decKind.name = fmt.Sprintf("encoder-decoder %q", sub("dec"))
	enc, err := c.encoderConfig().validate(encKind, sub("enc"))
	if err != nil {
		return 0, halfField(err, "src_", "enc_")
	}
	dec, err := c.decoderConfig().validate(decKind, sub("dec"))
	if err != nil {
		return 0, halfField(err, "tgt_", "dec_")
	}
	head := c.decoderConfig().headConfig()
	if err := head.validate(sub("head")); err != nil {
		return 0, err
	}
	return addCounts("layers: encoder-decoder", enc, dec, head.params())
}

// NumParams returns the number of learnable values an EncoderDecoder of c
// holds, as its Params add up, or Validate's error; it allocates nothing.
func (c EncDecConfig) NumParams() (int, error) { return c.validate("") }

// halfField renames the keys a half's FieldError names to the
// EncDecConfig's own: the half's vocab and max_len are the config's
// src_/tgt_ ones (seq), its layers the enc_/dec_ ones (depth).
func halfField(err error, seq, depth string) error {
	var fe *FieldError
	if !errors.As(err, &fe) {
		return err
	}
	rename := func(k string) string {
		switch k {
		case "vocab", "max_len":
			return seq + k
		case "layers":
			return depth + k
		}
		return k
	}
	fe.Field = rename(fe.Field)
	for i, w := range fe.With {
		fe.With[i] = rename(w)
	}
	return err
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
// source and, over the target, the stack a Decoder is made of, its causal
// blocks built with cross-attention (BlockConfig.Cross) to read the encoder
// output, a final norm (pre-LN) and a projection to target-vocabulary
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
// prefixed by the scope's own prefix, without the LayerNorms' bias with
// BiasFreeNorm. Weights are (in, out): y = x W + b.
// With post-LN, ln1, ln2 (and ln3) normalise the residual sums and there is
// no ln_f. Its configuration is fixed when it is built: Config returns a
// copy, and Encoder, TargetEmbedding, TargetPositions, DecoderBlocks,
// FinalNorm and Head return its layers.
type EncoderDecoder struct {
	cfg EncDecConfig
	enc *Encoder
	// dec is the decoder half "dec": causal blocks that cross-attend to
	// the encoder output, a final norm (pre-LN), and the head, whose name
	// "head" is in the model's scope, not in "dec".
	dec *stack
	s   *Scope // the model's scope
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
	m := &EncoderDecoder{cfg: cfg, s: s}
	var err error
	if m.enc, err = NewEncoder(s.Sub("enc"), cfg.encoderConfig()); err != nil {
		return nil, err
	}
	dc := cfg.decoderConfig()
	if m.dec, err = newStack(s.Sub("dec"), crossKind, dc); err != nil {
		return nil, err
	}
	if m.dec.head, err = NewLinear(s.Sub("head"), dc.headConfig()); err != nil {
		return nil, err
	}
	return m, nil
}

// Config returns a copy of the configuration the model was built with,
// Positions filled in; the zero EncDecConfig for a nil model.
func (m *EncoderDecoder) Config() EncDecConfig { return orZero(m).cfg }

// Encoder returns the encoder half "enc"; nil for a nil model.
func (m *EncoderDecoder) Encoder() *Encoder { return orZero(m).enc }

// decoder is m's decoder half, nil for a nil model.
func (m *EncoderDecoder) decoder() *stack { return orZero(m).dec }

// TargetEmbedding returns the target token embedding "dec.tok_emb"; nil for
// a nil model.
func (m *EncoderDecoder) TargetEmbedding() *Embedding { return m.decoder().tokens() }

// TargetPositions returns the target positional encoding "dec.pos_emb"; nil
// for a nil model.
func (m *EncoderDecoder) TargetPositions() *Positions { return m.decoder().positions() }

// DecoderBlocks returns the decoder blocks "dec.blocks.<i>", blocks with
// cross-attention, in order, in a new slice.
func (m *EncoderDecoder) DecoderBlocks() []*DecoderBlock { return m.decoder().blockList() }

// FinalNorm returns the decoder's final LayerNorm "dec.ln_f", nil for
// post-LN models and for a nil model. The encoder's is Encoder().FinalNorm().
func (m *EncoderDecoder) FinalNorm() *LayerNorm { return m.decoder().finalNorm() }

// Head returns the projection "head" from Dim to target-vocabulary logits;
// nil for a nil model.
func (m *EncoderDecoder) Head() *Linear { return m.decoder().headLayer() }

// check returns an error unless m was made by NewEncoderDecoder.
func (m *EncoderDecoder) check() error {
	const msg = "layers: encoder-decoder: the model is nil or a zero value: make it with NewEncoderDecoder"
	if m == nil || m.s.check() != nil || m.enc.st().check("encoder", "NewEncoderDecoder") != nil {
		return errors.New(msg)
	}
	if err := m.dec.check("encoder-decoder", "NewEncoderDecoder"); err != nil {
		return err
	}
	if m.dec.head.check() != nil {
		return errors.New(msg)
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
	if err := m.checkInputs(src, srcPad, tgt, tgtPad, crossPad); err != nil {
		return nil, EncDecWeights{}, layerErr("encoder-decoder", m.s.prefix, err)
	}
	memory, encWeights, err := m.enc.Forward(src, srcPad) // (B, Ss, D), (B, H, Ss, Ss) each
	if err != nil {
		return nil, EncDecWeights{}, err
	}
	// (B, St, TgtVocab), (B, H, St, St) and (B, H, St, Ss) each
	logits, self, cross, err := m.dec.forward(tgt, tgtPad, memory, crossPad)
	if err != nil {
		return nil, EncDecWeights{}, err
	}
	return logits, EncDecWeights{Encoder: encWeights, DecoderSelf: self, Cross: cross}, nil
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
	for _, b := range m.dec.blocks {
		k, v, err := b.cross.Project(memory) // (B, Ss, D) each
		if err != nil {
			return nil, nil, err
		}
		crossK, crossV = append(crossK, k), append(crossV, v)
	}
	return crossK, crossV, nil
}

// Step runs the decoder on one new target token per row, for generation
// with a key/value cache, as Decoder.Step does: tok and pos (B, 1) are the
// tokens and their positions; cacheK and cacheV hold each block's
// self-attention cache (B, St, D), slot (B, St, 1) marks each row's
// position and selfMask (B, 1, St) the positions it sees; crossK and crossV
// are Encode's, and crossMask (B, 1, Ss) hides source padding. It returns
// the logits (B, 1, TgtVocab) and the caches with the new row written in.
// Dropout is not applied: a step is for inference.
func (m *EncoderDecoder) Step(tok, pos *graph.IDs, cacheK, cacheV []*G.Node, slot *G.Node, selfMask *graph.MaskNode, crossK, crossV []*G.Node, crossMask *graph.MaskNode) (logits *G.Node, keys, values []*G.Node, err error) {
	if err := m.check(); err != nil {
		return nil, nil, nil, err
	}
	return m.dec.step(tok, pos, cacheK, cacheV, slot, selfMask, crossK, crossV, crossMask)
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

// StepShapes returns the shapes of the self-attention caches Step reads and
// returns for b rows over l target positions, per decoder block (see
// Decoder.StepShapes); nil for a nil or zero-value model.
func (m *EncoderDecoder) StepShapes(b, l int) (k, v []tensor.Shape) {
	if m.check() != nil {
		return nil, nil
	}
	return m.dec.stepShapes(b, l)
}

// Params returns every learnable with its hierarchical name, in the order
// EncoderDecoder documents: the encoder's, the decoder's, then the head's;
// nothing for a nil model.
func (m *EncoderDecoder) Params() []graph.Param {
	if m == nil {
		return nil
	}
	return append(m.enc.Params(), m.dec.params()...)
}

// Dropouts returns every dropout mask of both halves, to be redrawn each
// training step.
func (m *EncoderDecoder) Dropouts() []*graph.Dropout {
	if m == nil {
		return nil
	}
	return append(m.enc.Dropouts(), m.dec.dropoutList()...)
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
	b := in.Src.B
	if len(srcLengths) != b || len(tgtLengths) != b {
		return shapeErrorf("layers: encoder-decoder inputs: %d source and %d target lengths for a batch of %d", len(srcLengths), len(tgtLengths), b)
	}
	for _, mk := range []struct {
		n       *graph.MaskNode
		lengths []int
		name    string
	}{{in.SrcPad, srcLengths, "source padding"}, {in.TgtPad, tgtLengths, "target padding"}, {in.CrossPad, srcLengths, "cross-attention padding"}} {
		if err := mk.n.SetKeyLengths(mk.lengths); err != nil {
			return fmt.Errorf("layers: encoder-decoder inputs: %s: %w", mk.name, err)
		}
	}
	return nil
}

// KVDim is the width of every attention's projected keys and values, and so
// of a key/value cache's rows: KVHeads·(Dim/Heads), or Dim without KVHeads.
func (c EncDecConfig) KVDim() int { return c.kvWidth(c.Dim, c.Heads) }
