// Package explain measures the attention tutorial's claims on qkv's own
// code: each claim builds graphs from qkv's ops and layers, or trains a
// model with train.Run as `qkv train` does and reads its attention, runs
// them, and turns what it measured into a verdict (Holds, HoldsInPart,
// DoesNotHold) with the numbers behind it and, when asked, figures.
// Nothing here recomputes the mathematics separately, so a claim that
// holds is a property of the code that trains qkv's models, not of a
// formula.
//
// There is one file a claim, in the order IDs lists them: the scale of the
// scores (scores-variance, softmax-saturation, scale-dk-not-dmodel), the
// softmax (stable-softmax, rows-sum-to-one), heads (multihead-cost), the
// masks (causal-mask, padding-mask), order (permutation-equivariance),
// where Q, K and V come from (self-vs-cross), the lookup (soft-lookup) and
// cost (quadratic-cost, memory-peak). Run runs one by id.
package explain
