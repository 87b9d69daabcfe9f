package layers

import (
	"fmt"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
)

// Activations of the feed-forward layer.
const (
	ActivationReLU = "relu"
	// ActivationGELU is GELU in its tanh form, as GPT-2 and PyTorch's
	// gelu(approximate="tanh").
	ActivationGELU = "gelu"
)

// FeedForwardConfig configures the position-wise feed-forward layer.
type FeedForwardConfig struct {
	Dim, Hidden int
	// Activation is ActivationReLU or ActivationGELU; "" means ReLU.
	Activation string
	Bias       bool
}

// FeedForward is act(x W1 + b1) W2 + b2, applied to each position alone.
type FeedForward struct {
	Config FeedForwardConfig
	w1, w2 *Linear
}

// NewFeedForward returns a feed-forward layer whose parameters are w1 (Dim,
// Hidden), b1, w2 (Hidden, Dim), b2 in scope s.
func NewFeedForward(s *Scope, cfg FeedForwardConfig) (*FeedForward, error) {
	if cfg.Activation == "" {
		cfg.Activation = ActivationReLU
	}
	if cfg.Activation != ActivationReLU && cfg.Activation != ActivationGELU {
		return nil, fmt.Errorf("layers: feed-forward %q: unknown activation %q, want %q or %q", s.prefix, cfg.Activation, ActivationReLU, ActivationGELU)
	}
	if err := checkPositive(size{"Dim", cfg.Dim}, size{"Hidden", cfg.Hidden}); err != nil {
		return nil, fmt.Errorf("layers: feed-forward %q: %w", s.prefix, err)
	}
	w1, err := NewLinear(s, LinearConfig{In: cfg.Dim, Out: cfg.Hidden, Bias: cfg.Bias, WeightName: "w1", BiasName: "b1"})
	if err != nil {
		return nil, err
	}
	w2, err := NewLinear(s, LinearConfig{In: cfg.Hidden, Out: cfg.Dim, Bias: cfg.Bias, WeightName: "w2", BiasName: "b2"})
	if err != nil {
		return nil, err
	}
	return &FeedForward{Config: cfg, w1: w1, w2: w2}, nil
}

// Forward maps x of shape (..., Dim) to (..., Dim).
func (f *FeedForward) Forward(x *G.Node) (*G.Node, error) {
	h, err := f.w1.Forward(x) // (..., Hidden)
	if err != nil {
		return nil, err
	}
	if f.Config.Activation == ActivationGELU {
		h, err = graph.GELU(h)
	} else {
		h, err = G.Rectify(h)
	}
	if err != nil {
		return nil, fmt.Errorf("layers: feed-forward %q: %w", f.w1.W.Name, err)
	}
	return f.w2.Forward(h) // (..., Dim)
}

// Params returns w1, b1, w2, b2 (no biases without Bias).
func (f *FeedForward) Params() []graph.Param {
	return append(f.w1.Params(), f.w2.Params()...)
}
