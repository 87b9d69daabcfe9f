package layers

import "github.com/qkv-dev/qkv/graph"

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
	Activation Activation `json:"activation" flag:"activation" group:"model" help:"feed-forward activation: relu or gelu"`
	// Positions is how positions enter: PositionsLearned (the default for
	// ""), PositionsSinusoidal or PositionsNone are added to a stack's
	// embeddings; PositionsRoPE, PositionsRoPEInterleaved and
	// PositionsALiBi are applied by each self-attention (a block reads only
	// these three).
	Positions PositionsKind `json:"positions" flag:"positions" group:"model" help:"positional encoding: learned, sinusoidal, none, rope (half-split pairs, Hugging Face's), rope-interleaved (Meta's pairs) or alibi"`
	// PostLN selects post-LN blocks, as the original Transformer:
	// x = LN(x + f(x)). The default, pre-LN, normalises the sublayer input,
	// x = x + f(LN(x)), and a stack ends with a final norm.
	PostLN bool `json:"post_ln" flag:"post-ln" group:"model" help:"post-LN blocks instead of pre-LN"`
	// Bias adds biases to the attention and feed-forward projections.
	Bias bool `json:"bias" flag:"bias" group:"model" help:"biases in the attention and feed-forward projections (--bias=false drops them, as nanoGPT's bias=False; LayerNorm biases stay unless --bias-free-norm, the head's unless --tie-embeddings)"`
	// Dropout is the rate of dropout on embeddings and on each sublayer's
	// output before the residual sum; AttnDropout that of the weights of
	// every attention, cross-attention included.
	Dropout     float64 `json:"dropout" flag:"dropout" group:"model" help:"dropout on embeddings and sublayer outputs"`
	AttnDropout float64 `json:"attn_dropout" flag:"attn-dropout" group:"attention" help:"dropout on attention weights"`
	// Attention is how every attention is computed: AttentionFused (the
	// default for ""), AttentionComposed or AttentionFlash. It changes no
	// parameter, so a checkpoint runs under any of them.
	Attention AttentionImpl `json:"attention,omitempty" flag:"attention" group:"attention" help:"how attention is computed: composed, fused (default) or flash; checkpoints run under any"`
	// AttnScale is the factor of every attention's scores: ScaleDK (the
	// default for "", 1/sqrt(Dim/Heads)), ScaleDModel (1/sqrt(Dim)) or
	// ScaleNone (1). Unlike Attention it changes the function the
	// parameters compute. Absent from config.json for the default.
	AttnScale AttentionScale `json:"attn_scale,omitempty" flag:"attn-scale" group:"attention" zero:"dk" help:"factor of the attention scores: dk (1/sqrt(dim/heads), the default), dmodel (1/sqrt(dim)) or none (1); a checkpoint keeps its scale"`
	// AttentionVariants go to every attention (GQA, softcapping, sinks,
	// QK-norm, ...); each is absent from config.json when not set. A
	// cross-attention takes all but the positional ones.
	AttentionVariants
	// LinearOptions configure the blocks whose self-attention is linear.
	LinearOptions
	// BiasFreeNorm leaves the additive bias out of every LayerNorm (gain
	// only, nanoGPT's LayerNorm(bias=False)). Bias keeps its meaning, the
	// projections' biases, so that configurations written before this
	// field existed build the same model. Absent from config.json when
	// false.
	BiasFreeNorm bool `json:"bias_free_norm,omitempty" flag:"bias-free-norm" group:"model" help:"LayerNorms without their bias, gain only (nanoGPT's LayerNorm(bias=False))"`
}

// LinearOptions are the options of the blocks whose self-attention is
// linear attention (StackConfig.LayerKinds): the feature map φ, the width
// it maps from, the denominator and the chunk of the chunked form. Softmax
// blocks ignore them, and linear blocks ignore the softmax variants.
type LinearOptions struct {
	// FeatureMap is φ: graph.FeatureTaylor (the default for "", Based's
	// second-order Taylor map, φ(q)·φ(k) = 1 + s + s²/2 with
	// s = q·k/sqrt(d')), graph.FeatureELU1, graph.FeatureReLU or
	// graph.FeatureIdentity.
	FeatureMap graph.FeatureMap `json:"feature_map,omitempty" flag:"feature-map" group:"linear attention" zero:"taylor" help:"feature map of linear attention layers: taylor (Based's 1+s+s²/2), elu1 (elu(x)+1), relu or identity"`
	// FeatureDim is d', each head's width of a linear block's queries and
	// keys, which the feature map then maps to FeatureMap.Dim(d') features
	// (1 + d' + d'² for Taylor); 0 means dk = Dim/Heads. Based uses 16.
	FeatureDim int `json:"feature_dim,omitempty" flag:"feature-dim" group:"linear attention" help:"per-head width of a linear layer's queries and keys before the feature map (0: dim/heads; Based uses 16)"`
	// LinearNorm is the denominator: LinearNormSum (the default for ""),
	// out_i = φ(q_i)·S_i / (φ(q_i)·z_i + graph.LinearEps), or
	// LinearNormNone, out_i = φ(q_i)·S_i.
	LinearNorm LinearNorm `json:"linear_norm,omitempty" flag:"linear-norm" group:"linear attention" zero:"sum" help:"denominator of linear attention: sum (divide by φ(q)·Σφ(k), the default) or none"`
	// LinearChunk is the number of positions per chunk of linear
	// attention's chunked form (graph.LinearSpec.Chunk); 0 means
	// graph.DefaultLinearChunk. It changes speed, not the function.
	LinearChunk int `json:"linear_chunk,omitempty" flag:"linear-chunk" group:"linear attention" zero:"64" help:"positions per chunk of linear attention's chunked training form (speed only)"`
}

// LinearNorm is the denominator of linear attention, as config.json and
// the CLI spell it.
type LinearNorm string

// The denominators of linear attention.
const (
	// LinearNormSum divides by φ(q_i)·Σ_j φ(k_j), so that the weights
	// φ(q_i)·φ(k_j) of a row sum to 1, as softmax's do (Katharopoulos et
	// al.; Based).
	LinearNormSum LinearNorm = "sum"
	// LinearNormNone does not divide.
	LinearNormNone LinearNorm = "none"
)

// validate checks the options of a linear block of width dk per head at
// scope name.
func (o LinearOptions) validate(name string, dk int) error {
	if o.FeatureMap != "" && !o.FeatureMap.Valid() {
		return layerErr("linear attention", name, fieldErrorf("feature_map", nil, "unknown FeatureMap %q, want %q, %q, %q or %q", o.FeatureMap, graph.FeatureTaylor, graph.FeatureELU1, graph.FeatureReLU, graph.FeatureIdentity))
	}
	if o.FeatureDim < 0 {
		return layerErr("linear attention", name, fieldErrorf("feature_dim", nil, "FeatureDim %d must be positive, or 0 for dk = %d", o.FeatureDim, dk))
	}
	switch o.LinearNorm {
	case "", LinearNormSum, LinearNormNone:
	default:
		return layerErr("linear attention", name, fieldErrorf("linear_norm", nil, "unknown LinearNorm %q, want %q or %q", o.LinearNorm, LinearNormSum, LinearNormNone))
	}
	if o.LinearChunk < 0 {
		return layerErr("linear attention", name, fieldErrorf("linear_chunk", nil, "LinearChunk %d must be positive, or 0 for %d", o.LinearChunk, graph.DefaultLinearChunk))
	}
	return nil
}

// featureDim is d', FeatureDim or dk for 0.
func (o LinearOptions) featureDim(dk int) int {
	if o.FeatureDim == 0 {
		return dk
	}
	return o.FeatureDim
}

// featureMap is φ, FeatureTaylor for "".
func (o LinearOptions) featureMap() graph.FeatureMap {
	if o.FeatureMap == "" {
		return graph.FeatureTaylor
	}
	return o.FeatureMap
}
