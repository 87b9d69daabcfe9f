package layers

import (
	"errors"
	"fmt"
	"math"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// AttentionConfig configures multi-head scaled dot-product attention.
type AttentionConfig struct {
	// Dim is the model width D; queries come in and outputs go out at D.
	Dim int
	// Heads is H; each head attends in dk = D/H dimensions, so D % H == 0.
	Heads int
	// KeyDim and ValueDim are the widths of the key and value inputs when
	// they differ from Dim (cross-attention to an encoder of another width);
	// 0 means Dim.
	KeyDim, ValueDim int
	// Causal hides every key j > i from query i.
	Causal bool
	// Bias adds bq, bk, bv, bo to the projections.
	Bias bool
	// Dropout is the rate at which attention weights are dropped in training.
	Dropout float64
	// Impl is how attention is computed: AttentionFused (the default for
	// ""), AttentionComposed or AttentionFlash. The parameters are the same
	// whatever it is.
	Impl AttentionImpl
	// Scale is the factor of the scores Q_h K_h^T: ScaleDK (the default for
	// ""), 1/sqrt(dk) with dk = Dim/Heads; ScaleDModel, 1/sqrt(Dim); or
	// ScaleNone, 1. It changes no parameter, but it changes the function
	// the parameters compute: a model trained with one scale is another
	// model under another.
	Scale AttentionScale
	// Positions, when PositionsRoPE, PositionsRoPEInterleaved or
	// PositionsALiBi, is applied by this layer to its scores (the other
	// kinds are added to the embeddings, not here). Queries and keys are at
	// positions 0, 1, ... of their sequences in Forward, and at the given
	// position in Step.
	Positions PositionsKind
	// AttentionVariants are the changes to the formula recent models make;
	// the zero value is the 2017 formula.
	AttentionVariants
	// Init draws wq, wk and wv with Init.Std and wo, which writes into the
	// residual stream, with Init.OutStd; the zero value is U(±1/sqrt(in))
	// for all four.
	Init WeightInit
}

// AttentionVariants are the ways the attention of recent models differs
// from the 2017 formula that a layer may take, each written once, in the
// kernels' graph.Mods or in the layer's projections. They are one struct so
// that a block, a stack and an encoder-decoder carry them to every
// attention alike, and config.json holds them under "model".
type AttentionVariants struct {
	// KVHeads is the number G of key/value heads of grouped-query attention
	// (Llama 2 70B, Mistral, Gemma 2): 0 means Heads (multi-head attention);
	// otherwise it divides Heads, wk and wv project to G·dk, and query head
	// h reads key/value head h / (Heads/G) (repeat_interleave's map). 1 is
	// multi-query attention. A key/value cache then holds G heads, not H.
	KVHeads int `json:"kv_heads,omitempty" flag:"kv-heads" group:"attention" help:"key/value heads of grouped-query attention, dividing --heads (0: as many as --heads; 1: multi-query); the KV cache holds this many"`
	// Softcap, if positive, caps every score s at c·tanh(s/c) before the
	// mask and the softmax (Gemma 2: c = 50); 0 means no cap.
	Softcap float64 `json:"softcap,omitempty" flag:"softcap" group:"attention" help:"cap every attention score s at c*tanh(s/c) (Gemma 2 uses 50; 0: no cap)"`
	// Sinks adds "sinks" (Heads), one learnable logit per head that joins
	// every row's softmax and is then dropped, so that a query may attend to
	// nothing (gpt-oss). They start at 0.
	Sinks bool `json:"sinks,omitempty" flag:"sinks" group:"attention" help:"a learnable sink logit per head in every softmax, dropped after it (gpt-oss)"`
	// QKNorm normalises each head's queries and keys by RMSNorm over its dk
	// features (eps 1e-6) with the gains "q_norm.gain" and "k_norm.gain"
	// (dk), shared by the heads and starting at 1, before the scores
	// (Qwen3, OLMo 2, Gemma 3).
	QKNorm bool `json:"qk_norm,omitempty" flag:"qk-norm" group:"attention" help:"RMSNorm of each head's queries and keys before the scores (Qwen3)"`
	// Window, if positive, lets query i see only keys i-w < j <= i, w keys
	// counting itself (Mistral, Gemma 2/3, gpt-oss; graph.Window), or
	// |i-j| < w in a bidirectional encoder (graph.Band); flash attention
	// then skips the tiles outside the band. 0 means no window.
	// Cross-attention has none.
	Window int `json:"window,omitempty" flag:"window" group:"attention" help:"sliding window: query i sees keys i-w < j <= i (|i-j| < w in an encoder); 0: none"`
	// GlobalTokens, with a Window, makes the first GlobalTokens positions
	// global (Longformer's and BigBird's pattern): every query sees them
	// beside its window and, in an encoder, they see every key
	// (graph.GlobalWindow). 0 means none.
	GlobalTokens int `json:"global_tokens,omitempty" flag:"global-tokens" group:"attention" help:"with --window, the first N positions are global: every query sees them (and, in an encoder, they see every key); Longformer/BigBird"`
	// BlockLocal, if positive, lets each query see only the keys of its
	// own block of BlockLocal positions (graph.BlockLocal): block-local
	// attention. It excludes Window.
	BlockLocal int `json:"block_local,omitempty" flag:"block-local" group:"attention" help:"block-local attention: each query sees only the keys of its own block of N positions (0: none)"`
	// RoPEBase is the base of RoPE's frequencies, base^(-2m/dk); 0 means
	// graph.DefaultRoPEBase, 10000. It needs positions "rope" or
	// "rope-interleaved".
	RoPEBase float64 `json:"rope_base,omitempty" flag:"rope-base" group:"model" zero:"10000" help:"base of RoPE's frequencies, with --positions rope or rope-interleaved"`
	// HeadTemperature adds "temperature" (Heads), one learnable factor per
	// head that multiplies the head's scores before any score modifier,
	// s_ij = t_h q_i·k_j / sqrt(dk) (a softcap then caps the tempered score),
	// so that each head learns how sharp its softmax is. They start at 1,
	// the 2017 formula. qkv applies it to the queries (graph.HeadScale),
	// which gives the same scores in every implementation and in a cached
	// step. Cross-attention takes it too.
	HeadTemperature bool `json:"head_temperature,omitempty" flag:"head-temperature" group:"attention" help:"a learnable temperature per head multiplying its attention scores, starting at 1"`
	// Mask and Score are modifiers of your own (a document mask, a prefix
	// LM, a bias of your design): Mask hides keys besides what the built-in
	// ones hide (graph.And), Score changes the scores after them
	// (graph.Chain), in all three implementations and in a cached step,
	// with no kernel of qkv's changed. Cross-attention takes neither.
	// config.json cannot hold Go code, so they are not saved: a checkpoint
	// trained with them needs the same ones again when it is loaded.
	Mask  graph.MaskMod  `json:"-"`
	Score graph.ScoreMod `json:"-"`
}

// kvWidth is the width of projected keys and values of an attention of
// width dim and heads heads: KVHeads·dk, or dim without KVHeads.
func (v AttentionVariants) kvWidth(dim, heads int) int {
	if v.KVHeads == 0 || heads <= 0 {
		return dim
	}
	return v.KVHeads * (dim / heads)
}

// kvHeads is the number of key/value heads, KVHeads or Heads for 0.
func (c AttentionConfig) kvHeads() int {
	if c.KVHeads == 0 {
		return c.Heads
	}
	return c.KVHeads
}

// kvDim is the width of the projected keys and values, kvHeads·dk.
func (c AttentionConfig) kvDim() int { return c.kvWidth(c.Dim, c.Heads) }

// MultiHeadAttention computes
//
//	Q = query Wq, K = key Wk, V = value Wv
//	head_h = softmax(Q_h K_h^T / sqrt(dk) + bias_h + mask) V_h
//	out = Concat(head_1..head_H) Wo
//
// and, as configured, the variants of recent models: fewer key/value heads
// than query heads (KVHeads), capped scores (Softcap), a sink logit per head
// in each softmax (Sinks) and RMSNorm of each head's Q and K (QKNorm); they
// enter the kernels through graph.Mods, the same in all three
// implementations.
//
// with dk = D/H (Scale may replace 1/sqrt(dk) by 1/sqrt(D) or 1: see
// AttentionScale), where mask is 0 where query i may see key j and -Inf where it may not
// (hidden keys get weight exactly 0, a query that sees nothing gets zeros),
// and bias_h is an optional finite bias of the scores given to
// ForwardWithBias (ALiBi, relative positions); Forward adds none.
//
// Self-attention passes one X as query, key and value; cross-attention takes
// the query from one sequence and key and value from another, possibly of a
// different length and width.
//
// Its configuration is fixed when it is built: Config returns a copy, and
// the getters (WQ, BQ, ...) return its parameters by role.
type MultiHeadAttention struct {
	cfg            AttentionConfig
	wq, wk, wv, wo *Linear
	sinks          graph.Param // (H), with Sinks
	qNorm, kNorm   graph.Param // (dk), with QKNorm
	temperature    graph.Param // (H), with HeadTemperature
	s              *Scope
	dropouts       []*graph.Dropout
}

// Validate checks what NewMultiHeadAttention checks, without allocating
// anything: Dim, Heads, KeyDim and ValueDim positive (0 KeyDim or ValueDim
// means Dim), Dim divisible by Heads, Dropout in [0, 1), a known Impl and
// Scale, and every weight within graph.MaxElements.
func (c AttentionConfig) Validate() error { return c.validate("") }

// withDefaults fills KeyDim and ValueDim.
func (c AttentionConfig) withDefaults() AttentionConfig {
	if c.KeyDim == 0 {
		c.KeyDim = c.Dim
	}
	if c.ValueDim == 0 {
		c.ValueDim = c.Dim
	}
	return c
}

func (c AttentionConfig) validate(name string) error {
	c = c.withDefaults()
	if err := checkPositive(size{"Dim", "dim", c.Dim}, size{"Heads", "heads", c.Heads}, size{"KeyDim", "dim", c.KeyDim}, size{"ValueDim", "dim", c.ValueDim}); err != nil {
		return layerErr("attention", name, err)
	}
	if c.Dim%c.Heads != 0 {
		return layerErr("attention", name, fieldErrorf("heads", []string{"dim"}, "Dim %d is not divisible by Heads %d", c.Dim, c.Heads))
	}
	if c.KVHeads < 0 || c.KVHeads > 0 && c.Heads%c.KVHeads != 0 {
		return layerErr("attention", name, fieldErrorf("kv_heads", []string{"heads"}, "KVHeads %d does not divide Heads %d: each key/value head serves Heads/KVHeads query heads (0 means Heads)", c.KVHeads, c.Heads))
	}
	if math.IsNaN(c.Softcap) || math.IsInf(c.Softcap, 0) || c.Softcap < 0 {
		return layerErr("attention", name, fieldErrorf("softcap", nil, "Softcap %v must be a finite number > 0, or 0 for no cap", c.Softcap))
	}
	if c.Window < 0 {
		return layerErr("attention", name, fieldErrorf("window", nil, "Window %d must be at least 1 (query i sees keys i-w < j <= i), or 0 for none", c.Window))
	}
	if c.GlobalTokens < 0 || c.GlobalTokens > 0 && c.Window == 0 {
		return layerErr("attention", name, fieldErrorf("global_tokens", []string{"window"}, "GlobalTokens %d needs a Window (the global tokens join a sliding window) and must not be negative", c.GlobalTokens))
	}
	if c.BlockLocal < 0 || c.BlockLocal > 0 && c.Window > 0 {
		return layerErr("attention", name, fieldErrorf("block_local", []string{"window"}, "BlockLocal %d must not be negative, and excludes Window %d: a block is its own window", c.BlockLocal, c.Window))
	}
	if !c.Positions.valid() {
		return layerErr("attention", name, fieldErrorf("positions", nil, "unknown Positions %q, want one of %v", c.Positions, positionsKinds))
	}
	if c.Positions.rope() && (c.Dim/c.Heads)%2 != 0 {
		return layerErr("attention", name, fieldErrorf("positions", []string{"dim", "heads"}, "RoPE needs an even head dimension, got dk = Dim/Heads = %d/%d = %d", c.Dim, c.Heads, c.Dim/c.Heads))
	}
	if c.RoPEBase != 0 && (!c.Positions.rope() || math.IsNaN(c.RoPEBase) || math.IsInf(c.RoPEBase, 0) || c.RoPEBase <= 1) {
		return layerErr("attention", name, fieldErrorf("rope_base", []string{"positions"}, "RoPEBase %v needs RoPE positions (got %q) and a finite base > 1", c.RoPEBase, c.Positions))
	}
	if err := checkRate("Dropout", "attn_dropout", c.Dropout); err != nil {
		return layerErr("attention", name, err)
	}
	if err := c.Init.validate(); err != nil {
		return layerErr("attention", name, err)
	}
	if !c.Impl.Valid() {
		return layerErr("attention", name, fieldErrorf("attention", nil, "unknown Impl %q, want %q, %q or %q", c.Impl, AttentionComposed, AttentionFused, AttentionFlash))
	}
	if !c.Scale.valid() {
		return layerErr("attention", name, fieldErrorf("attn_scale", nil, "unknown Scale %q, want %q (1/sqrt(dk), the default), %q (1/sqrt(Dim)) or %q (1)", c.Scale, ScaleDK, ScaleDModel, ScaleNone))
	}
	if c.Impl == AttentionFlash && c.Dropout > 0 {
		return layerErr("attention", name, fieldErrorf("attn_dropout", []string{"attention"}, "flash attention takes no attention dropout (Dropout %v): it never forms the weights a dropout mask would drop; use %q or %q", c.Dropout, AttentionFused, AttentionComposed))
	}
	for _, w := range []struct {
		name string
		in   int
		out  int
	}{{"wq (Dim, Dim)", c.Dim, c.Dim}, {"wk (KeyDim, KVHeads·dk)", c.KeyDim, c.kvDim()}, {"wv (ValueDim, KVHeads·dk)", c.ValueDim, c.kvDim()}} {
		if err := checkTensor("weight "+w.name, "dim", nil, w.in, w.out); err != nil {
			return layerErr("attention", name, err)
		}
	}
	return nil
}

// params is the number of learnable values of a valid configuration.
func (c AttentionConfig) params() int {
	c = c.withDefaults()
	n := 2 * LinearConfig{In: c.Dim, Out: c.Dim, Bias: c.Bias}.params() // wq, wo
	for _, in := range []int{c.KeyDim, c.ValueDim} {
		n += LinearConfig{In: in, Out: c.kvDim(), Bias: c.Bias}.params()
	}
	if c.Sinks {
		n += c.Heads
	}
	if c.QKNorm {
		n += 2 * (c.Dim / c.Heads)
	}
	if c.HeadTemperature {
		n += c.Heads
	}
	return n
}

// NewMultiHeadAttention returns an attention layer whose parameters are wq
// (D, D), wk (KeyDim, G·dk), wv (ValueDim, G·dk), wo (D, D) and, with Bias,
// bq, bo (D), bk, bv (G·dk), in scope s, where G is KVHeads (Heads for 0);
// then, with Sinks, sinks (H), with QKNorm, q_norm.gain and k_norm.gain
// (dk), and with HeadTemperature, temperature (H).
func NewMultiHeadAttention(s *Scope, cfg AttentionConfig) (*MultiHeadAttention, error) {
	if err := s.check(); err != nil {
		return nil, layerErr("attention", s.path(), err)
	}
	if err := cfg.validate(s.path()); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	a := &MultiHeadAttention{cfg: cfg, s: s}
	for _, p := range []struct {
		l    **Linear
		in   int
		w, b string
		out  int
		std  float64
	}{{&a.wq, cfg.Dim, "wq", "bq", cfg.Dim, cfg.Init.Std}, {&a.wk, cfg.KeyDim, "wk", "bk", cfg.kvDim(), cfg.Init.Std},
		{&a.wv, cfg.ValueDim, "wv", "bv", cfg.kvDim(), cfg.Init.Std}, {&a.wo, cfg.Dim, "wo", "bo", cfg.Dim, cfg.Init.OutStd}} {
		var err error
		if *p.l, err = NewLinear(s, LinearConfig{In: p.in, Out: p.out, Bias: cfg.Bias, WeightName: p.w, BiasName: p.b, Std: p.std}); err != nil {
			return nil, err
		}
	}
	var err error
	if cfg.Sinks {
		// Bias, not weight: a logit, which weight decay should not pull to 0.
		if a.sinks, err = s.param("sinks", graph.RoleBias, constant(0), cfg.Heads); err != nil {
			return nil, layerErr("attention", s.path(), err)
		}
	}
	if cfg.QKNorm {
		dk := cfg.Dim / cfg.Heads
		if a.qNorm, err = s.Sub("q_norm").param("gain", graph.RoleGain, constant(1), dk); err != nil {
			return nil, layerErr("attention", s.path(), err)
		}
		if a.kNorm, err = s.Sub("k_norm").param("gain", graph.RoleGain, constant(1), dk); err != nil {
			return nil, layerErr("attention", s.path(), err)
		}
	}
	if cfg.HeadTemperature {
		// A gain: a factor that starts at 1 and that weight decay should
		// not pull to 0.
		if a.temperature, err = s.param("temperature", graph.RoleGain, constant(1), cfg.Heads); err != nil {
			return nil, layerErr("attention", s.path(), err)
		}
	}
	return a, nil
}

// Config returns a copy of the configuration the layer was built with,
// KeyDim and ValueDim filled in; the zero AttentionConfig for a nil layer.
func (a *MultiHeadAttention) Config() AttentionConfig {
	if a == nil {
		return AttentionConfig{}
	}
	return a.cfg
}

// projection returns the Linear of wq (i = 0), wk, wv or wo; nil for a nil
// layer, whose getters then return the zero Param.
func (a *MultiHeadAttention) projection(i int) *Linear {
	if a == nil {
		return nil
	}
	return [4]*Linear{a.wq, a.wk, a.wv, a.wo}[i]
}

// WQ returns the query projection wq (Dim, Dim), role graph.RoleWeight.
func (a *MultiHeadAttention) WQ() graph.Param { return a.projection(0).Weight() }

// WK returns the key projection wk (KeyDim, KVHeads·dk), role
// graph.RoleWeight.
func (a *MultiHeadAttention) WK() graph.Param { return a.projection(1).Weight() }

// WV returns the value projection wv (ValueDim, KVHeads·dk), role
// graph.RoleWeight.
func (a *MultiHeadAttention) WV() graph.Param { return a.projection(2).Weight() }

// WO returns the output projection wo (Dim, Dim), role graph.RoleWeight.
func (a *MultiHeadAttention) WO() graph.Param { return a.projection(3).Weight() }

// BQ returns the query bias bq (Dim), role graph.RoleBias; the zero Param
// without Bias. BK, BV and BO are the other three.
func (a *MultiHeadAttention) BQ() graph.Param { return a.projection(0).Bias() }

// BK returns the key bias bk (Dim); the zero Param without Bias.
func (a *MultiHeadAttention) BK() graph.Param { return a.projection(1).Bias() }

// BV returns the value bias bv (Dim); the zero Param without Bias.
func (a *MultiHeadAttention) BV() graph.Param { return a.projection(2).Bias() }

// BO returns the output bias bo (Dim); the zero Param without Bias.
func (a *MultiHeadAttention) BO() graph.Param { return a.projection(3).Bias() }

// Sinks returns the sink logits "sinks" (H); the zero Param without Sinks
// and for a nil layer.
func (a *MultiHeadAttention) Sinks() graph.Param {
	if a == nil {
		return graph.Param{}
	}
	return a.sinks
}

// Temperature returns the temperatures of the heads, "temperature" (H);
// the zero Param without HeadTemperature and for a nil layer.
func (a *MultiHeadAttention) Temperature() graph.Param {
	if a == nil {
		return graph.Param{}
	}
	return a.temperature
}

// QKNorm returns the RMSNorm gains of the queries and keys, "q_norm.gain"
// and "k_norm.gain" (dk); zero Params without QKNorm and for a nil layer.
func (a *MultiHeadAttention) QKNorm() (q, k graph.Param) {
	if a == nil {
		return graph.Param{}, graph.Param{}
	}
	return a.qNorm, a.kNorm
}

// Forward attends from query (B, Sq, D) to key (B, Sk, KeyDim) and value
// (B, Sk, ValueDim). mask, if not nil, is (B, Sq, Sk) and says which keys each
// query may see; with Causal the layer also hides the future itself. It
// returns the output (B, Sq, D) and the attention weights (B, H, Sq, Sk),
// which are nil with AttentionFlash: it never forms them.
// Shape mismatches are found here, while the graph is built. Forward is
// ForwardWithBias without a bias.
func (a *MultiHeadAttention) Forward(query, key, value *G.Node, mask *graph.MaskNode) (out, weights *G.Node, err error) {
	return a.ForwardWithBias(query, key, value, mask, nil)
}

// ForwardWithBias is Forward with bias, a finite additive bias of the scores
// of the layer's dtype: (H, Sq, Sk), one block per head shared by the batch
// (ALiBi, relative positions), or (B, H, Sq, Sk); nil adds nothing. It is
// added before the softmax, beside the mask, which alone decides what is
// hidden: a hidden key gets weight exactly 0 whatever its bias. The bias may
// be a constant input or computed from learnable parameters: G.Grad
// differentiates it (see graph.AttentionWithBias).
func (a *MultiHeadAttention) ForwardWithBias(query, key, value *G.Node, mask *graph.MaskNode, bias *G.Node) (out, weights *G.Node, err error) {
	if err := a.check(); err != nil {
		return nil, nil, err
	}
	name := a.s.prefix
	b, sq, sk, err := a.checkShapes(query, key, value, mask)
	if err != nil {
		return nil, nil, fmt.Errorf("layers: attention %q: %w", name, err)
	}
	if err := a.checkBias(bias, b, sq, sk); err != nil {
		return nil, nil, fmt.Errorf("layers: attention %q: %w", name, err)
	}
	if a.cfg.Impl == AttentionFlash && bias != nil {
		return nil, nil, fmt.Errorf("layers: attention %q: %w", name, configErrorf("flash attention takes no score bias: use %q or %q", AttentionFused, AttentionComposed))
	}
	// RoPE rotates each query and key by its position in its sequence.
	var qPos, kPos *graph.IDs
	if a.cfg.Positions.rope() {
		if qPos, err = a.sequence(b, sq); err != nil {
			return nil, nil, fmt.Errorf("layers: attention %q: %w", name, err)
		}
		kPos = qPos // self-attention: the keys are the queries' positions
		if sk != sq {
			if kPos, err = a.sequence(b, sk); err != nil {
				return nil, nil, fmt.Errorf("layers: attention %q: %w", name, err)
			}
		}
	}
	q, err := a.queries(query, qPos) // (B, Sq, D) = query Wq
	if err != nil {
		return nil, nil, err
	}
	k, v, err := a.keysValues(key, value, kPos) // (B, Sk, G·dk) = key Wk, value Wv
	if err != nil {
		return nil, nil, err
	}
	var keep *G.Node // attention dropout, in training only
	if drop, err := a.s.dropout(fmt.Sprintf("drop%d", len(a.dropouts)), a.cfg.Dropout, tensor.Shape{b, a.cfg.Heads, sq, sk}); err != nil {
		return nil, nil, fmt.Errorf("layers: attention %q: %w", name, err)
	} else if drop != nil {
		a.dropouts = append(a.dropouts, drop)
		keep = drop.Keep()
	}
	// Per head h, on columns [h*dk, (h+1)*dk) of q, k, v:
	//   P_h = softmax(Q_h K_h^T / sqrt(dk) + bias_h + mask)  (B, H, Sq, Sk)
	//   y   = Concat(P_1 V_1, ..., P_H V_H)                   (B, Sq, D)
	// The scale is 1/sqrt(dk), the per-head width, not 1/sqrt(D): it keeps
	// the dot products of dk unit-variance terms at unit variance. (Another
	// Scale came in above, through q: see scaleQuery.) The variants enter
	// here, in one graph.Spec: causality and a window hide keys, K_h and
	// V_h are those of key/value head h / (H/G), a softcap and ALiBi change
	// the scores, a sink joins the softmax.
	spec := a.spec(nil)
	spec.Mask, spec.Bias, spec.Keep = mask, bias, keep
	y, weights, err := graph.Attend(q, k, v, spec) // weights nil with flash, which never forms them
	if err != nil {
		return nil, nil, fmt.Errorf("layers: attention %q: %w", name, err)
	}
	if out, err = a.wo.Forward(y); err != nil { // (B, Sq, D) = y Wo
		return nil, nil, err
	}
	return out, weights, nil
}

// Step is one step of self-attention with a key/value cache, for
// generating one token at a time. x (B, 1, D) is the input at each row's
// newest position p, which pos (B, 1) gives (RoPE rotates by it, ALiBi and
// a window measure from it; it may be nil for a layer with none of them); cacheK and cacheV (B, L, D) hold the keys and values
// (x Wk and x Wv) of the positions before p, with zeros from row p on; slot
// (B, L, 1) is 1 at row p and 0 elsewhere; mask (B, 1, L) lets each row see
// its positions 0..p. The caches are G·dk wide (D without KVHeads): a
// grouped-query layer caches G heads, not H. Only the new position's query,
// key and value are computed, and the new key and value are written into
// row p:
//
//	keys = cacheK + slot ⊗ (x Wk),  values = cacheV + slot ⊗ (x Wv)  (B, L, G·dk)
//	out  = Attention(x Wq, keys, values) Wo                          (B, 1, D)
//
// It returns out and the caches to bind at the next step. A step costs
// O(L·D) for attention and O(D²) for the projections, where recomputing
// the prefix costs O(p·D²) and O(p²·D).
func (a *MultiHeadAttention) Step(x *G.Node, pos *graph.IDs, cacheK, cacheV, slot *G.Node, mask *graph.MaskNode) (out, keys, values *G.Node, err error) {
	if err := a.check(); err != nil {
		return nil, nil, nil, err
	}
	name := a.s.prefix
	if err := checkStep(x, cacheK, cacheV, slot, mask, a.cfg.Dim, a.cfg.kvDim()); err != nil {
		return nil, nil, nil, fmt.Errorf("layers: attention %q: step: %w", name, err)
	}
	if a.positional() {
		if err := pos.Check(); err != nil {
			return nil, nil, nil, fmt.Errorf("layers: attention %q: step: positions (%s, window %d): %w", name, a.cfg.Positions, a.cfg.Window, err)
		}
		if xs := x.Shape(); pos.B != xs[0] || pos.S != 1 {
			return nil, nil, nil, shapeErrorf("layers: attention %q: step: positions (%d, %d), want (%d, 1)", name, pos.B, pos.S, xs[0])
		}
	}
	var ropePos *graph.IDs
	if a.cfg.Positions.rope() {
		ropePos = pos
	}
	q, err := a.queries(x, ropePos) // (B, 1, D)
	if err != nil {
		return nil, nil, nil, err
	}
	k, v, err := a.keysValues(x, x, ropePos) // (B, 1, G·dk), cached rotated
	if err != nil {
		return nil, nil, nil, err
	}
	if keys, err = graph.WriteSlot(cacheK, slot, k); err != nil { // (B, L, G·dk)
		return nil, nil, nil, fmt.Errorf("layers: attention %q: step: %w", name, err)
	}
	if values, err = graph.WriteSlot(cacheV, slot, v); err != nil { // (B, L, G·dk)
		return nil, nil, nil, fmt.Errorf("layers: attention %q: step: %w", name, err)
	}
	// The query is at pos; the cache's row j holds position j.
	y, err := a.attendInference(q, keys, values, mask, pos.Values()) // (B, 1, D)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("layers: attention %q: step: %w", name, err)
	}
	if out, err = a.wo.Forward(y); err != nil { // (B, 1, D)
		return nil, nil, nil, err
	}
	return out, keys, values, nil
}

// Project returns memory's keys and values, memory Wk and memory Wv
// (B, Sk, G·dk), keys normalised with QKNorm: what cross-attention reads of
// an encoder's output, computed once per prompt when generating (see
// AttendProjected).
func (a *MultiHeadAttention) Project(memory *G.Node) (keys, values *G.Node, err error) {
	if err := a.check(); err != nil {
		return nil, nil, err
	}
	return a.keysValues(memory, memory, nil) // (B, Sk, G·dk)
}

// AttendProjected is Forward with keys and values already projected (by
// Project): the query x (B, Sq, D) attends to keys and values (B, Sk, G·dk)
// under mask (B, Sq, Sk), and the output (B, Sq, D) is what Forward would
// give for the memory they were projected from.
func (a *MultiHeadAttention) AttendProjected(x, keys, values *G.Node, mask *graph.MaskNode) (*G.Node, error) {
	if err := a.check(); err != nil {
		return nil, err
	}
	q, err := a.queries(x, nil) // (B, Sq, D)
	if err != nil {
		return nil, err
	}
	y, err := a.attendInference(q, keys, values, mask, nil) // (B, Sq, D)
	if err != nil {
		return nil, fmt.Errorf("layers: attention %q: %w", a.s.prefix, err)
	}
	return a.wo.Forward(y) // (B, Sq, D)
}

// attendInference returns the heads of q attending to keys and values under
// mask, concatenated (B, Sq, D), as Forward's kernels do when nothing is
// trained: flash tiles, and the composed and fused attentions both take the
// fused op, whose output equals the composed graph's (within 9e-16 in
// float64 and 3e-7 in float32: go test ./graph -run Composed -v) and which
// builds one node where the composed graph builds many.
func (a *MultiHeadAttention) attendInference(q, keys, values *G.Node, mask *graph.MaskNode, qPos []int) (*G.Node, error) {
	spec := a.spec(qPos)
	if spec.Impl == AttentionComposed {
		spec.Impl = AttentionFused
	}
	spec.Mask = mask
	y, _, err := graph.Attend(q, keys, values, spec)
	return y, err
}

// queries returns x Wq (B, S, D), each head RMS-normalised with QKNorm,
// rotated to the positions pos with RoPE (pos nil: no rotation), scaled
// for Scale (scaleQuery) and each head by its temperature with
// HeadTemperature: the queries every path attends with.
func (a *MultiHeadAttention) queries(x *G.Node, pos *graph.IDs) (*G.Node, error) {
	q, err := a.wq.Forward(x) // (B, S, D)
	if err != nil {
		return nil, err
	}
	if a.cfg.QKNorm {
		if q, err = graph.HeadRMSNorm(q, a.qNorm.Node, a.cfg.Heads, 0); err != nil { // each head over its dk
			return nil, fmt.Errorf("layers: attention %q: q_norm: %w", a.s.prefix, err)
		}
	}
	if pos != nil {
		if q, err = graph.RoPE(q, a.cfg.Heads, pos, a.rope()); err != nil { // after the norm, as Qwen3
			return nil, fmt.Errorf("layers: attention %q: RoPE of the queries: %w", a.s.prefix, err)
		}
	}
	if q, err = a.scaleQuery(q); err != nil {
		return nil, fmt.Errorf("layers: attention %q: %w", a.s.prefix, err)
	}
	if a.cfg.HeadTemperature { // (t_h q_i) · k_j = t_h (q_i · k_j): the head's scores tempered
		if q, err = graph.HeadScale(q, a.temperature.Node, a.cfg.Heads); err != nil {
			return nil, fmt.Errorf("layers: attention %q: temperature: %w", a.s.prefix, err)
		}
	}
	return q, nil
}

// keysValues returns key Wk and value Wv (B, S, G·dk), each key head
// RMS-normalised with QKNorm and rotated to the positions pos with RoPE
// (pos nil: no rotation).
func (a *MultiHeadAttention) keysValues(key, value *G.Node, pos *graph.IDs) (k, v *G.Node, err error) {
	if k, err = a.wk.Forward(key); err != nil { // (B, S, G·dk)
		return nil, nil, err
	}
	if a.cfg.QKNorm {
		if k, err = graph.HeadRMSNorm(k, a.kNorm.Node, a.cfg.kvHeads(), 0); err != nil {
			return nil, nil, fmt.Errorf("layers: attention %q: k_norm: %w", a.s.prefix, err)
		}
	}
	if pos != nil {
		if k, err = graph.RoPE(k, a.cfg.kvHeads(), pos, a.rope()); err != nil {
			return nil, nil, fmt.Errorf("layers: attention %q: RoPE of the keys: %w", a.s.prefix, err)
		}
	}
	if v, err = a.wv.Forward(value); err != nil { // (B, S, G·dk)
		return nil, nil, err
	}
	return k, v, nil
}

// spec returns the layer's attention as graph.Attend takes it, without
// the tensors a call brings (mask, bias, dropout): heads, implementation,
// causality and the variants, none of them when none is configured (the
// 2017 formula). qPos, if not nil, are the queries' positions (a cached
// step's); the keys are at 0, 1, ...
func (a *MultiHeadAttention) spec(qPos []int) graph.Spec {
	c := a.cfg
	s := graph.Spec{Heads: c.Heads, Impl: c.Impl}
	if c.KVHeads != 0 && c.KVHeads != c.Heads {
		s.KVHeads = c.KVHeads
	}
	// Validated sizes: the constructors below cannot fail.
	var softcap, alibi graph.ScoreMod
	if c.Softcap > 0 {
		softcap, _ = graph.Softcap(c.Softcap)
	}
	if c.Positions == PositionsALiBi {
		if c.Causal {
			alibi, _ = graph.ALiBi(c.Heads)
		} else {
			alibi, _ = graph.BidirectionalALiBi(c.Heads)
		}
	}
	s.ScoreMod = graph.Chain(softcap, alibi, c.Score) // the cap, then the bias (Gemma 2's order), then yours
	var hide graph.MaskMod                            // what the layer's own rules hide: the future, keys beyond the window or block
	switch {
	case c.GlobalTokens > 0:
		hide, _ = graph.GlobalWindow(c.GlobalTokens, c.Window, c.Causal) // causal itself when causal
	case c.BlockLocal > 0:
		hide, _ = graph.BlockLocal(c.BlockLocal, c.Causal)
	case c.Causal && c.Window > 0:
		hide, _ = graph.Window(c.Window) // causal itself
	case c.Causal:
		hide = graph.Causal()
	case c.Window > 0:
		hide, _ = graph.Band(c.Window)
	}
	s.MaskMod = graph.And(hide, c.Mask)
	if c.Sinks {
		s.Sinks = a.sinks.Node
	}
	if s.MaskMod != nil || s.ScoreMod != nil {
		s.QueryPos = qPos
	}
	return s
}

// positional reports whether the layer reads positions: RoPE, ALiBi or a
// window.
func (a *MultiHeadAttention) positional() bool {
	return a.cfg.Positions.inAttention() || a.cfg.Window > 0 || a.cfg.BlockLocal > 0 || a.cfg.Mask != nil || a.cfg.Score != nil
}

// rope returns the options of graph.RoPE for the layer's positions.
func (a *MultiHeadAttention) rope() graph.RoPEOptions {
	return graph.RoPEOptions{Interleaved: a.cfg.Positions == PositionsRoPEInterleaved, Base: a.cfg.RoPEBase}
}

// sequence returns constant positions 0, 1, ..., s-1 for each of b rows:
// where Forward's queries and keys are.
func (a *MultiHeadAttention) sequence(b, s int) (*graph.IDs, error) {
	pos, err := graph.NewIDs(a.s.g, b, s, s, a.s.Name(fmt.Sprintf("positions%d", s)))
	if err != nil {
		return nil, err
	}
	starts := make([]int, b)
	vals, err := graph.SequencePositions(starts, s)
	if err != nil {
		return nil, err
	}
	return pos, pos.Set(vals)
}

// scaleQuery returns the projected queries q (B, Sq, D) that make the
// kernels compute the configured Scale. Every kernel (graph.Attention,
// AttentionWithBias, ComposedAttention, FlashAttention) multiplies the
// scores by 1/sqrt(dk); since
//
//	(c·Q_h) K_h^T / sqrt(dk) = Q_h K_h^T · (c / sqrt(dk)),
//
// queries multiplied by c = scale·sqrt(dk) give the scores scale·Q_h K_h^T
// (and a score bias, added after the product, is not scaled):
//
//	ScaleDK:     c = 1         (q is returned as it is: no multiply at all)
//	ScaleDModel: c = sqrt(dk/D) = 1/sqrt(H)
//	ScaleNone:   c = sqrt(dk)
//
// The training paths (Forward) and the inference paths (Step,
// AttendProjected) all scale here, so a cached step computes what Forward
// computes.
func (a *MultiHeadAttention) scaleQuery(q *G.Node) (*G.Node, error) {
	c := a.cfg
	if c.Scale == "" || c.Scale == ScaleDK {
		return q, nil
	}
	dk := c.Dim / c.Heads
	f := c.Scale.Factor(c.Dim, c.Heads) * math.Sqrt(float64(dk))
	return graph.Scale(q, f)
}

// checkStep checks the inputs of a cached step for input width d and cache
// width kv.
func checkStep(x, cacheK, cacheV, slot *G.Node, mask *graph.MaskNode, d, kv int) error {
	for _, n := range []struct {
		node *G.Node
		name string
	}{{x, "input"}, {cacheK, "key cache"}, {cacheV, "value cache"}, {slot, "slot"}} {
		if err := graph.CheckNode(n.node, n.name); err != nil {
			return err
		}
	}
	if mask == nil {
		return errors.New("a cached step needs the mask of the positions each row may see")
	}
	if err := mask.Check(); err != nil {
		return err
	}
	xs, ks := x.Shape(), cacheK.Shape()
	if len(xs) != 3 || xs[1] != 1 || xs[2] != d || len(ks) != 3 || ks[0] != xs[0] || ks[2] != kv {
		return shapeErrorf("input %v and key cache %v, want (B, 1, %d) and (B, L, %d)", xs, ks, d, kv)
	}
	b, l := xs[0], ks[1]
	if !cacheV.Shape().Eq(ks) || !slot.Shape().Eq(tensor.Shape{b, l, 1}) || mask.B != b || mask.Sq != 1 || mask.Sk != l {
		return shapeErrorf("value cache %v, slot %v, mask (%d, %d, %d); want (%d, %d, %d), (%d, %d, 1), (%d, 1, %d)",
			cacheV.Shape(), slot.Shape(), mask.B, mask.Sq, mask.Sk, b, l, kv, b, l, b, l)
	}
	return nil
}

// checkShapes returns B, Sq, Sk after checking that the inputs and mask agree
// with each other and with the configuration.
func (a *MultiHeadAttention) checkShapes(query, key, value *G.Node, mask *graph.MaskNode) (b, sq, sk int, err error) {
	for _, in := range []struct {
		n    *G.Node
		name string
	}{{query, "query"}, {key, "key"}, {value, "value"}} {
		if err := graph.CheckNode(in.n, in.name); err != nil {
			return 0, 0, 0, err
		}
	}
	if err := mask.Check(); err != nil {
		return 0, 0, 0, err
	}
	qs, ks, vs := query.Shape(), key.Shape(), value.Shape()
	c := a.cfg
	if len(qs) != 3 || qs[2] != c.Dim {
		return 0, 0, 0, shapeErrorf("query shape %v, want (B, Sq, %d)", qs, c.Dim)
	}
	if len(ks) != 3 || ks[0] != qs[0] || ks[2] != c.KeyDim {
		return 0, 0, 0, shapeErrorf("key shape %v, want (%d, Sk, %d) to match query %v", ks, qs[0], c.KeyDim, qs)
	}
	if len(vs) != 3 || vs[0] != qs[0] || vs[1] != ks[1] || vs[2] != c.ValueDim {
		return 0, 0, 0, shapeErrorf("value shape %v, want (%d, %d, %d) to match key %v", vs, ks[0], ks[1], c.ValueDim, ks)
	}
	for _, n := range []*G.Node{query, key, value} {
		if n.Dtype() != a.s.dt {
			return 0, 0, 0, fmt.Errorf("input %q is %v, the layer is %v", n.Name(), n.Dtype(), a.s.dt)
		}
	}
	b, sq, sk = qs[0], qs[1], ks[1]
	if mask != nil && (mask.B != b || mask.Sq != sq || mask.Sk != sk) {
		return 0, 0, 0, shapeErrorf("mask is (B, Sq, Sk) = (%d, %d, %d), inputs need (%d, %d, %d)", mask.B, mask.Sq, mask.Sk, b, sq, sk)
	}
	if c.Causal && sq != sk {
		return 0, 0, 0, shapeErrorf("causal attention needs as many queries as keys, got Sq=%d Sk=%d", sq, sk)
	}
	return b, sq, sk, nil
}

// checkBias returns an error unless bias is nil or a node of the layer's
// dtype shaped (H, Sq, Sk) or (B, H, Sq, Sk).
func (a *MultiHeadAttention) checkBias(bias *G.Node, b, sq, sk int) error {
	if bias == nil {
		return nil
	}
	if err := graph.CheckNode(bias, "bias"); err != nil {
		return err
	}
	h := a.cfg.Heads
	if bs := bias.Shape(); !bs.Eq(tensor.Shape{h, sq, sk}) && !bs.Eq(tensor.Shape{b, h, sq, sk}) {
		return shapeErrorf("bias %q is %v, want (H, Sq, Sk) = (%d, %d, %d) or (B, H, Sq, Sk) = (%d, %d, %d, %d)", bias.Name(), bs, h, sq, sk, b, h, sq, sk)
	}
	if bias.Dtype() != a.s.dt {
		return fmt.Errorf("bias %q is %v, the layer is %v", bias.Name(), bias.Dtype(), a.s.dt)
	}
	return nil
}

// check returns an error unless a was made by NewMultiHeadAttention: a nil or
// zero-value layer has no scope and no projections.
func (a *MultiHeadAttention) check() error {
	if a == nil || a.s.check() != nil {
		return errors.New("layers: attention: the layer is nil or a zero value: make it with NewMultiHeadAttention")
	}
	for _, l := range []*Linear{a.wq, a.wk, a.wv, a.wo} {
		if l.check() != nil {
			return fmt.Errorf("layers: attention %q: the layer is a zero value (no projections): make it with NewMultiHeadAttention", a.s.prefix)
		}
	}
	return nil
}

// Params returns wq, bq, wk, bk, wv, bv, wo, bo (no biases without Bias),
// then sinks with Sinks, q_norm.gain, k_norm.gain with QKNorm and
// temperature with HeadTemperature.
func (a *MultiHeadAttention) Params() []graph.Param {
	if a == nil {
		return nil
	}
	var ps []graph.Param
	for _, l := range []*Linear{a.wq, a.wk, a.wv, a.wo} {
		ps = append(ps, l.Params()...)
	}
	if a.cfg.Sinks {
		ps = append(ps, a.sinks)
	}
	if a.cfg.QKNorm {
		ps = append(ps, a.qNorm, a.kNorm)
	}
	if a.cfg.HeadTemperature {
		ps = append(ps, a.temperature)
	}
	return ps
}

// Dropouts returns the dropout masks Forward created, to be redrawn each
// training step.
func (a *MultiHeadAttention) Dropouts() []*graph.Dropout {
	if a == nil {
		return nil
	}
	return a.dropouts
}
