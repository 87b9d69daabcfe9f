package torchref

import "github.com/qkv-dev/qkv/layers"

// Variant is one way of attention that the PyTorch comparisons run
// (train's TestTorchReferenceLogits and TestTorchReferenceEncDecLogits):
// the positions it needs ("" keeps the model's) and the variants, which
// torchref.py reads from config.json's model object.
type Variant struct {
	Name      string
	Positions layers.PositionsKind
	Variants  layers.AttentionVariants
	// LayerKinds and Linear, when set, make some blocks linear attention
	// or windows of their own (layers.StackConfig.LayerKinds).
	LayerKinds string
	Linear     layers.LinearOptions
}

// Variants are every attention variant the comparisons run, each alone,
// then all of them at once, with RoPE and with ALiBi (the last two, which
// also run in float32). A variant added to layers.AttentionVariants and to
// torchref.py joins the comparisons here.
var Variants = []Variant{
	{"gqa-2", "", layers.AttentionVariants{KVHeads: 2}, "", layers.LinearOptions{}},
	{"mqa", "", layers.AttentionVariants{KVHeads: 1}, "", layers.LinearOptions{}},
	{"softcap-0.5", "", layers.AttentionVariants{Softcap: 0.5}, "", layers.LinearOptions{}},
	{"sinks", "", layers.AttentionVariants{Sinks: true}, "", layers.LinearOptions{}},
	{"qk-norm", "", layers.AttentionVariants{QKNorm: true}, "", layers.LinearOptions{}},
	{"head-temperature", "", layers.AttentionVariants{HeadTemperature: true}, "", layers.LinearOptions{}},
	{"rope", layers.PositionsRoPE, layers.AttentionVariants{}, "", layers.LinearOptions{}},
	{"rope-interleaved-base-100", layers.PositionsRoPEInterleaved, layers.AttentionVariants{RoPEBase: 100}, "", layers.LinearOptions{}},
	{"alibi", layers.PositionsALiBi, layers.AttentionVariants{}, "", layers.LinearOptions{}},
	{"window-3", "", layers.AttentionVariants{Window: 3}, "", layers.LinearOptions{}},
	{"global-2+window-2", "", layers.AttentionVariants{Window: 2, GlobalTokens: 2}, "", layers.LinearOptions{}},
	{"block-local-3", "", layers.AttentionVariants{BlockLocal: 3}, "", layers.LinearOptions{}},
	{"linear-taylor", "", layers.AttentionVariants{}, "linear", layers.LinearOptions{FeatureDim: 2}},
	{"linear-elu1-unnormalized", "", layers.AttentionVariants{}, "linear", layers.LinearOptions{FeatureMap: "elu1", LinearNorm: layers.LinearNormNone, LinearChunk: 3}},
	{"linear-relu", "", layers.AttentionVariants{}, "linear", layers.LinearOptions{FeatureMap: "relu"}},
	{"hybrid-linear,window:2", "", layers.AttentionVariants{}, "linear,window:2", layers.LinearOptions{FeatureDim: 3}},
	{"rope+gqa+window+sinks+softcap+qk-norm+temperature", layers.PositionsRoPE, layers.AttentionVariants{KVHeads: 2, Window: 3, Sinks: true, Softcap: 2, QKNorm: true, HeadTemperature: true}, "", layers.LinearOptions{}},
	{"alibi+mqa+window+sinks+softcap+qk-norm+temperature", layers.PositionsALiBi, layers.AttentionVariants{KVHeads: 1, Window: 2, Sinks: true, Softcap: 2, QKNorm: true, HeadTemperature: true}, "", layers.LinearOptions{}},
}
