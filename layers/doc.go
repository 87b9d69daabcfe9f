// Package layers builds Transformer layers as gorgonia graphs: Linear,
// Embedding, positional encodings, LayerNorm, FeedForward, MultiHeadAttention,
// Block (with or without cross-attention), and the models made of one stack
// of blocks: Decoder (decoder-only), Encoder and EncoderDecoder, whose
// decoder blocks cross-attend to the encoder's output.
// MultiHeadAttention computes attention as AttentionConfig.Impl says
// (composed, fused or flash, one function of the same parameters), and
// Decoder.Step runs one new token per row against a key/value cache for
// generation.
//
// The attention of recent models is AttentionVariants (grouped-query
// KVHeads, Softcap, Sinks, QKNorm, a sliding Window, RoPEBase, and a user's
// own graph.MaskMod or graph.ScoreMod) with the positions kinds rope,
// rope-interleaved and alibi: one struct that a StackConfig or EncDecConfig
// hands to every attention, which applies it through graph.Mods in all three
// implementations and in the cached step.
//
// Every layer is made by a validating constructor from a Config, builds its
// part of the graph in Forward, and lists its learnable nodes in Params with
// stable hierarchical names ("blocks.0.attn.wq") and a graph.Role (weight,
// bias, gain, embedding). Getters return them by role too (attn.WQ(),
// ff.W1(), ln.Gain(), emb.Table(), dec.Blocks()[i].Attention()). A built
// layer cannot change: its configuration is kept unexported and Config()
// returns a copy, defaults filled in. Layers are built once; the
// inputs (graph.IDs, graph.MaskNode, graph.Targets) are re-bound every batch,
// so a trainer compiles one machine and feeds it batch after batch.
//
// Every Config has a Validate method that checks, without allocating, all
// that its constructor checks, including that no tensor would exceed
// graph.MaxElements: StackConfig.Validate is how a caller checks a model's
// configuration without building the model. Constructors call the same
// checks first. A nil or zero-value Scope, layer, input node, graph.IDs or
// graph.MaskNode is an error naming the layer, never a panic. A configuration
// the layers refuse matches ErrConfig with errors.Is, inputs whose shapes do
// not fit match ErrShape (graph.ErrShape).
//
// Activations are (B, S, D) nodes. Weights are stored (in, out): y = x W + b.
// The arithmetic lives in package graph (Linear, LayerNorm, Attention, ...):
// layers hold the parameters, check shapes and name what went wrong.
package layers
