package layers

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/qkv-dev/qkv/graph"
)

// ErrConfig is matched, with errors.Is, by every error that reports a
// configuration the layers cannot build: a size that is not positive, D not
// divisible by H, an unknown activation or positions kind, a rate outside
// [0, 1), a tensor beyond graph.MaxElements. Validate, the constructors and
// StackConfig.Validate return it; the message names the layer and the field.
var ErrConfig = errors.New("invalid layer configuration")

// ErrShape is graph.ErrShape: Forward methods report inputs whose shapes do
// not fit the layer with it, as the graph functions they call do.
var ErrShape = graph.ErrShape

// kindError is an error that also matches a sentinel (kind) with errors.Is,
// while its message is err's alone, so that adding the sentinel changes no
// message.
type kindError struct{ kind, err error }

func (e *kindError) Error() string { return e.err.Error() }

// Unwrap returns kind and err, so that errors.Is and errors.As see both.
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

// configErrorf is fmt.Errorf marked with ErrConfig.
func configErrorf(format string, args ...any) error {
	return &kindError{ErrConfig, fmt.Errorf(format, args...)}
}

// FieldError is an invalid configuration, with the field at fault named by
// its key in config.json's "model" object ("heads", "kv_heads",
// "attn_dropout"): the one schema of a model, whatever layer found the
// problem. A program that keeps the configuration inside a larger document
// (qkv's config.json under "model") maps Field to its own path instead of
// checking the value again. It matches ErrConfig; its message is the
// layer's, which names the layer and the Go field.
type FieldError struct {
	// Field is the key at fault; "" when the problem is the model as a
	// whole (its total size) or a field config.json does not hold.
	Field string
	// With are the other keys the problem involves ("dim" for heads that
	// do not divide it).
	With []string
	err  error
}

func (e *FieldError) Error() string { return e.err.Error() }

// Unwrap returns the error with its message, which matches ErrConfig.
func (e *FieldError) Unwrap() error { return e.err }

// fieldErrorf is configErrorf naming the config.json key at fault and the
// others its problem involves.
func fieldErrorf(field string, with []string, format string, args ...any) error {
	return &FieldError{Field: field, With: with, err: configErrorf(format, args...)}
}

// configError marks err with ErrConfig (nil stays nil).
func configError(err error) error {
	if err == nil {
		return nil
	}
	return &kindError{ErrConfig, err}
}

// shapeErrorf is fmt.Errorf marked with ErrShape.
func shapeErrorf(format string, args ...any) error {
	return &kindError{ErrShape, fmt.Errorf(format, args...)}
}

// Activation is the nonlinearity of a feed-forward layer. Its JSON form is
// the plain string ("relu", "gelu"), so config.json files keep loading.
type Activation string

// Activations of the feed-forward layer.
const (
	ActivationReLU Activation = "relu"
	// ActivationGELU is GELU in its tanh form, as GPT-2 and PyTorch's
	// gelu(approximate="tanh").
	ActivationGELU Activation = "gelu"
)

// String returns the activation's name.
func (a Activation) String() string { return string(a) }

// valid reports whether a is a known activation or "" (the default, ReLU).
func (a Activation) valid() bool {
	return a == "" || a == ActivationReLU || a == ActivationGELU
}

// ParseActivation returns the activation named s, or an error matching
// ErrConfig for any other name ("" included: the default is a Config's
// business, not a name's).
func ParseActivation(s string) (Activation, error) {
	if a := Activation(s); a != "" && a.valid() {
		return a, nil
	}
	return "", configErrorf("layers: unknown activation %q, want %q or %q", s, ActivationReLU, ActivationGELU)
}

// PositionsKind is the kind of positional encoding. Its JSON form is the
// plain string ("learned", "sinusoidal", "none", "rope", "rope-interleaved",
// "alibi").
type PositionsKind string

// Positional encodings: attention alone is permutation-equivariant, so the
// order of tokens reaches the model only through a vector added at each
// position.
const (
	// PositionsLearned is a learned (MaxLen, D) table.
	PositionsLearned PositionsKind = "learned"
	// PositionsSinusoidal is the fixed table of "Attention Is All You Need":
	// PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(p / 10000^(2i/D)).
	PositionsSinusoidal PositionsKind = "sinusoidal"
	// PositionsNone adds nothing; the model then cannot tell positions apart.
	PositionsNone PositionsKind = "none"
	// PositionsRoPE adds nothing to the embeddings: every self-attention
	// rotates its queries and keys by position (graph.RoPE), pairs of
	// features (m, m+dk/2) as Hugging Face's rotate_half and GPT-NeoX.
	PositionsRoPE PositionsKind = "rope"
	// PositionsRoPEInterleaved is RoPE on the pairs (2m, 2m+1), as Meta's
	// Llama and GPT-J: the same weights give other logits; a checkpoint
	// moves between the two by permuting each head's wq and wk columns.
	PositionsRoPEInterleaved PositionsKind = "rope-interleaved"
	// PositionsALiBi adds nothing to the embeddings: every self-attention
	// adds -m_h (i-j) to its scores (graph.ALiBi; -m_h |i-j| in a
	// bidirectional encoder).
	PositionsALiBi PositionsKind = "alibi"
)

// positionsKinds are the known kinds, for errors.
var positionsKinds = []PositionsKind{PositionsLearned, PositionsSinusoidal, PositionsNone, PositionsRoPE, PositionsRoPEInterleaved, PositionsALiBi}

// rope reports whether k rotates queries and keys (RoPE, either pairing).
func (k PositionsKind) rope() bool { return k == PositionsRoPE || k == PositionsRoPEInterleaved }

// attention returns k if it acts inside attention, and "" for the kinds the
// embeddings add: what a block's self-attention is told.
func (k PositionsKind) attention() PositionsKind {
	if k.inAttention() {
		return k
	}
	return ""
}

// inAttention reports whether k acts inside attention, adding nothing to
// the embeddings.
func (k PositionsKind) inAttention() bool { return k.rope() || k == PositionsALiBi }

// String returns the kind's name.
func (k PositionsKind) String() string { return string(k) }

// valid reports whether k is a known kind or "" (the default, learned).
func (k PositionsKind) valid() bool {
	return k == "" || slices.Contains(positionsKinds, k)
}

// ParsePositionsKind returns the positional encoding named s, or an error
// matching ErrConfig for any other name ("" included).
func ParsePositionsKind(s string) (PositionsKind, error) {
	if k := PositionsKind(s); k != "" && k.valid() {
		return k, nil
	}
	return "", configErrorf("layers: unknown positions kind %q, want one of %v", s, positionsKinds)
}

// AttentionImpl is how attention is computed: graph.Impl, the one list of
// implementations, which a config names by its plain string ("" means
// fused). The three compute the same function of the same parameters, so a
// checkpoint trained with one runs with any other.
type AttentionImpl = graph.Impl

// The implementations of attention, graph's under the names config uses.
const (
	// AttentionComposed builds attention from gorgonia's own graph ops:
	// the formula as a learner reads it (graph/composed.go).
	AttentionComposed = graph.Composed
	// AttentionFused is qkv's fused custom op: it forms the weights P
	// (B, H, Sq, Sk) and keeps them for the backward pass.
	AttentionFused = graph.Fused
	// AttentionFlash is the tiled op: it never forms the (Sq, Sk) weights,
	// keeping memory O(n·d) per head. It has no weights to return, and
	// takes no score bias and no attention dropout.
	AttentionFlash = graph.Flash
)

// ParseAttentionImpl returns the implementation named s, or an error
// matching ErrConfig for any other name ("" included).
func ParseAttentionImpl(s string) (AttentionImpl, error) {
	if a := AttentionImpl(s); a != "" && a.Valid() {
		return a, nil
	}
	return "", configErrorf("layers: unknown attention implementation %q, want %q, %q or %q", s, AttentionComposed, AttentionFused, AttentionFlash)
}

// AttentionScale is the factor the scores Q_h K_h^T of attention are
// multiplied by before the softmax. Its JSON form is the plain string; ""
// means ScaleDK, so configurations written before it existed keep their
// meaning.
type AttentionScale string

// The scales of attention scores. dk = D/H is the width of one head.
const (
	// ScaleDK is 1/sqrt(dk) (the default for ""), "Attention Is All You
	// Need"'s: the dot product of two dk-wide vectors of unit-variance
	// entries has variance dk, and the scale brings it back to 1.
	ScaleDK AttentionScale = "dk"
	// ScaleDModel is 1/sqrt(D), the whole model's width: a common mistake
	// with several heads, H times too small a variance for the scores
	// (sqrt(H) times too small a scale).
	ScaleDModel AttentionScale = "dmodel"
	// ScaleNone is 1: the raw dot products, whose softmax saturates as dk
	// grows.
	ScaleNone AttentionScale = "none"
)

// String returns the scale's name.
func (s AttentionScale) String() string { return string(s) }

// valid reports whether s is a known scale or "" (dk).
func (s AttentionScale) valid() bool {
	return s == "" || s == ScaleDK || s == ScaleDModel || s == ScaleNone
}

// ParseAttentionScale returns the scale named s, or an error matching
// ErrConfig for any other name ("" included).
func ParseAttentionScale(s string) (AttentionScale, error) {
	if a := AttentionScale(s); a != "" && a.valid() {
		return a, nil
	}
	return "", configErrorf("layers: unknown attention scale %q, want %q, %q or %q", s, ScaleDK, ScaleDModel, ScaleNone)
}

// Factor returns the factor the scores of a layer of width dim and heads
// heads are multiplied by: 1/sqrt(dim/heads) for ScaleDK and "",
// 1/sqrt(dim) for ScaleDModel, 1 for ScaleNone; NaN for an unknown scale or
// sizes that are not positive.
func (s AttentionScale) Factor(dim, heads int) float64 {
	if dim <= 0 || heads <= 0 {
		return math.NaN()
	}
	switch s {
	case "", ScaleDK:
		return 1 / math.Sqrt(float64(dim/heads))
	case ScaleDModel:
		return 1 / math.Sqrt(float64(dim))
	case ScaleNone:
		return 1
	}
	return math.NaN()
}
