package layers

// BlockOptions are the options every block of a model shares besides its
// sizes: its sublayers' options and the attention variants. A BlockConfig,
// a StackConfig and an EncDecConfig embed it, so that a stack hands it to
// each of its blocks whole and an encoder–decoder to both of its halves:
// an option is declared once, here, and reaches every layer that reads it
// without being copied field by field. Embedded, its fields keep their
// place in config.json's "model" object.
//
// A field's tags are the model's one schema: json its key in config.json,
// flag and help the command-line flag qkv registers for it (from the tags
// alone), zero the value a zero field stands for, when it stands for one.
type BlockOptions struct {
	// Activation of the feed-forward layers; "" means ReLU.
	Activation Activation `json:"activation" flag:"activation" help:"feed-forward activation: relu or gelu"`
	// Positions is how positions enter: PositionsLearned (the default for
	// ""), PositionsSinusoidal or PositionsNone are added to a stack's
	// embeddings; PositionsRoPE, PositionsRoPEInterleaved and
	// PositionsALiBi are applied by each self-attention (a block reads only
	// these three).
	Positions PositionsKind `json:"positions" flag:"positions" help:"positional encoding: learned, sinusoidal, none, rope (half-split pairs, Hugging Face's), rope-interleaved (Meta's pairs) or alibi"`
	// PostLN selects post-LN blocks, as the original Transformer:
	// x = LN(x + f(x)). The default, pre-LN, normalises the sublayer input,
	// x = x + f(LN(x)), and a stack ends with a final norm.
	PostLN bool `json:"post_ln" flag:"post-ln" help:"post-LN blocks instead of pre-LN"`
	// Bias adds biases to the attention and feed-forward projections.
	Bias bool `json:"bias" flag:"bias" help:"biases in the attention and feed-forward projections (--bias=false drops them, as nanoGPT's bias=False; LayerNorm biases stay unless --bias-free-norm, the head's unless --tie-embeddings)"`
	// Dropout is the rate of dropout on embeddings and on each sublayer's
	// output before the residual sum; AttnDropout that of the weights of
	// every attention, cross-attention included.
	Dropout     float64 `json:"dropout" flag:"dropout" help:"dropout on embeddings and sublayer outputs"`
	AttnDropout float64 `json:"attn_dropout" flag:"attn-dropout" help:"dropout on attention weights"`
	// Attention is how every attention is computed: AttentionFused (the
	// default for ""), AttentionComposed or AttentionFlash. It changes no
	// parameter, so a checkpoint runs under any of them.
	Attention AttentionImpl `json:"attention,omitempty" flag:"attention" help:"how attention is computed: composed, fused (default) or flash; checkpoints run under any"`
	// AttnScale is the factor of every attention's scores: ScaleDK (the
	// default for "", 1/sqrt(Dim/Heads)), ScaleDModel (1/sqrt(Dim)) or
	// ScaleNone (1). Unlike Attention it changes the function the
	// parameters compute. Absent from config.json for the default.
	AttnScale AttentionScale `json:"attn_scale,omitempty" flag:"attn-scale" zero:"dk" help:"factor of the attention scores: dk (1/sqrt(dim/heads), the default), dmodel (1/sqrt(dim)) or none (1); a checkpoint keeps its scale"`
	// AttentionVariants go to every attention (GQA, softcapping, sinks,
	// QK-norm, ...); each is absent from config.json when not set. A
	// cross-attention takes all but the positional ones.
	AttentionVariants
	// BiasFreeNorm leaves the additive bias out of every LayerNorm (gain
	// only, nanoGPT's LayerNorm(bias=False)). Bias keeps its meaning, the
	// projections' biases, so that configurations written before this
	// field existed build the same model. Absent from config.json when
	// false.
	BiasFreeNorm bool `json:"bias_free_norm,omitempty" flag:"bias-free-norm" help:"LayerNorms without their bias, gain only (nanoGPT's LayerNorm(bias=False))"`
}
