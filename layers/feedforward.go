package layers

import (
	"errors"
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

// Validate checks what NewFeedForward checks, without allocating anything: a
// known activation, Dim and Hidden positive, and the (Dim, Hidden) weights
// within graph.MaxElements.
func (c FeedForwardConfig) Validate() error { return c.validate("") }

func (c FeedForwardConfig) validate(name string) error {
	if c.Activation != "" && c.Activation != ActivationReLU && c.Activation != ActivationGELU {
		return layerErr("feed-forward", name, fmt.Errorf("unknown activation %q, want %q or %q", c.Activation, ActivationReLU, ActivationGELU))
	}
	if err := checkPositive(size{"Dim", c.Dim}, size{"Hidden", c.Hidden}); err != nil {
		return layerErr("feed-forward", name, err)
	}
	if err := checkTensor("weight w1 (Dim, Hidden)", c.Dim, c.Hidden); err != nil {
		return layerErr("feed-forward", name, err)
	}
	return nil
}

// params is the number of learnable values of a valid configuration.
func (c FeedForwardConfig) params() int {
	return LinearConfig{In: c.Dim, Out: c.Hidden, Bias: c.Bias}.params() + LinearConfig{In: c.Hidden, Out: c.Dim, Bias: c.Bias}.params()
}

// NewFeedForward returns a feed-forward layer whose parameters are w1 (Dim,
// Hidden), b1, w2 (Hidden, Dim), b2 in scope s.
func NewFeedForward(s *Scope, cfg FeedForwardConfig) (*FeedForward, error) {
	if err := s.check(); err != nil {
		return nil, layerErr("feed-forward", s.path(), err)
	}
	if err := cfg.validate(s.path()); err != nil {
		return nil, err
	}
	if cfg.Activation == "" {
		cfg.Activation = ActivationReLU
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
	if f == nil || f.w1.check() != nil || f.w2.check() != nil {
		return nil, errors.New("layers: feed-forward: the layer is nil or a zero value: make it with NewFeedForward")
	}
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
	if f == nil {
		return nil
	}
	return append(f.w1.Params(), f.w2.Params()...)
}
