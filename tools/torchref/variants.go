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
}

// Variants are every attention variant the comparisons run, each alone,
// then all of them at once, with RoPE and with ALiBi (the last two, which
// also run in float32). A variant added to layers.AttentionVariants and to
// torchref.py joins the comparisons here.
var Variants = []Variant{
	{"gqa-2", "", layers.AttentionVariants{KVHeads: 2}},
	{"mqa", "", layers.AttentionVariants{KVHeads: 1}},
	{"softcap-0.5", "", layers.AttentionVariants{Softcap: 0.5}},
	{"sinks", "", layers.AttentionVariants{Sinks: true}},
	{"qk-norm", "", layers.AttentionVariants{QKNorm: true}},
	{"head-temperature", "", layers.AttentionVariants{HeadTemperature: true}},
	{"rope", layers.PositionsRoPE, layers.AttentionVariants{}},
	{"rope-interleaved-base-100", layers.PositionsRoPEInterleaved, layers.AttentionVariants{RoPEBase: 100}},
	{"alibi", layers.PositionsALiBi, layers.AttentionVariants{}},
	{"window-3", "", layers.AttentionVariants{Window: 3}},
	{"rope+gqa+window+sinks+softcap+qk-norm+temperature", layers.PositionsRoPE, layers.AttentionVariants{KVHeads: 2, Window: 3, Sinks: true, Softcap: 2, QKNorm: true, HeadTemperature: true}},
	{"alibi+mqa+window+sinks+softcap+qk-norm+temperature", layers.PositionsALiBi, layers.AttentionVariants{KVHeads: 1, Window: 2, Sinks: true, Softcap: 2, QKNorm: true, HeadTemperature: true}},
}
