package layers

import (
	"math"
	"slices"
)

// InitKind is how a stack draws its initial parameters. Its JSON form is the
// plain string; "" is qkv's own initialisation, so configurations written
// before the field existed build the same weights, bit for bit.
type InitKind string

// The initialisations of a stack. Both set LayerNorm gains to 1 and biases
// (projections', norms', attention sinks) to 0; they differ in the weights.
const (
	// InitDefault ("") draws every projection weight from U(±1/sqrt(in)),
	// PyTorch's nn.Linear bound, and the token and learned position tables
	// from N(0, 1), as nn.Embedding.
	InitDefault InitKind = ""
	// InitGPT2 is GPT-2's, as nanoGPT writes it: every projection weight
	// and both embedding tables from N(0, 0.02²), then attention's output
	// projection wo and the feed-forward's w2, the two layers that write
	// into the residual stream, from N(0, (0.02/sqrt(2·Layers))²): each of
	// the 2·Layers residual additions then adds variance 1/(2·Layers) of
	// what one would, so the stream's variance at the top does not grow
	// with depth. With N(0, 1) embeddings a tied head's logits would start
	// at a standard deviation of about sqrt(Dim); at 0.02 they start near 0.
	InitGPT2 InitKind = "gpt2"
)

// gpt2Std is GPT-2's standard deviation of weights and embeddings.
const gpt2Std = 0.02

// initKinds are the known kinds with a name, for errors.
var initKinds = []InitKind{InitGPT2}

// String returns the kind's name, "" for InitDefault.
func (k InitKind) String() string { return string(k) }

// valid reports whether k is a known kind or "" (InitDefault).
func (k InitKind) valid() bool { return k == InitDefault || slices.Contains(initKinds, k) }

// ParseInitKind returns the initialisation named s ("" is InitDefault), or
// an error matching ErrConfig for any other name.
func ParseInitKind(s string) (InitKind, error) {
	if k := InitKind(s); k.valid() {
		return k, nil
	}
	return "", configErrorf("layers: unknown Init %q, want %q (qkv's default) or %q", s, InitDefault, InitGPT2)
}

// WeightInit is how a layer draws its projection weights. The zero value
// is U(±1/sqrt(in)) for every weight; Std > 0 draws the input projections
// (attention's wq, wk, wv, the feed-forward's w1) from N(0, Std²), and
// OutStd > 0 the output projections (wo, w2) from N(0, OutStd²). Biases are
// 0 either way.
type WeightInit struct {
	Std, OutStd float64
}

// validate checks that both deviations are finite numbers >= 0.
func (w WeightInit) validate() error {
	if err := checkStd("Init.Std", w.Std); err != nil {
		return err
	}
	return checkStd("Init.OutStd", w.OutStd)
}

// weights is the WeightInit of the blocks of a stack of the given depth.
func (k InitKind) weights(layers int) WeightInit {
	if k != InitGPT2 || layers <= 0 {
		return WeightInit{}
	}
	return WeightInit{Std: gpt2Std, OutStd: gpt2Std / math.Sqrt(2*float64(layers))}
}

// headStd is the standard deviation of an untied head's weight, 0 for
// U(±1/sqrt(in)).
func (k InitKind) headStd() float64 {
	if k == InitGPT2 {
		return gpt2Std
	}
	return 0
}

// embeddingStd is the standard deviation of the token and learned position
// tables, 0 for N(0, 1) (EmbeddingConfig.Std's default).
func (k InitKind) embeddingStd() float64 { return k.headStd() }

// weightFill is the initFn of a weight with fan-in in: N(0, std²) when std
// > 0, else U(±1/sqrt(in)).
func weightFill(std float64, in int) initFn {
	if std > 0 {
		return normal(std)
	}
	return fanIn(in)
}

// stdOr1 is std, or 1 for 0: the default of embedding tables.
func stdOr1(std float64) float64 {
	if std > 0 {
		return std
	}
	return 1
}

// checkStd checks a standard deviation field: a finite number >= 0.
func checkStd(name string, v float64) error {
	if !(v >= 0) || math.IsInf(v, 0) {
		return fieldErrorf("init", nil, "%s must be a finite number >= 0 (0: the default), got %v", name, v)
	}
	return nil
}
