package layers

import (
	"errors"
	"fmt"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
)

// FeedForwardConfig configures the position-wise feed-forward layer.
type FeedForwardConfig struct {
	Dim, Hidden int
	// Activation is ActivationReLU or ActivationGELU; "" means ReLU.
	Activation Activation
	Bias       bool
	// Init draws w1 with Init.Std and w2, which writes into the residual
	// stream, with Init.OutStd; the zero value is U(±1/sqrt(in)) for both.
	Init WeightInit
}

// FeedForward is act(x W1 + b1) W2 + b2, applied to each position alone.
// Its configuration is fixed when it is built: Config returns a copy.
type FeedForward struct {
	cfg    FeedForwardConfig
	w1, w2 *Linear
}

// Config returns a copy of the configuration the layer was built with,
// Activation filled in; the zero FeedForwardConfig for a nil FeedForward.
func (f *FeedForward) Config() FeedForwardConfig { return orZero(f).cfg }

// W1 returns w1 (Dim, Hidden), role graph.RoleWeight.
func (f *FeedForward) W1() graph.Param { return f.linear(0).Weight() }

// B1 returns b1 (Hidden), role graph.RoleBias; the zero Param without Bias.
func (f *FeedForward) B1() graph.Param { return f.linear(0).Bias() }

// W2 returns w2 (Hidden, Dim), role graph.RoleWeight.
func (f *FeedForward) W2() graph.Param { return f.linear(1).Weight() }

// B2 returns b2 (Dim), role graph.RoleBias; the zero Param without Bias.
func (f *FeedForward) B2() graph.Param { return f.linear(1).Bias() }

// linear returns w1 (i = 0) or w2, nil for a nil FeedForward; the getters
// then return the zero Param.
func (f *FeedForward) linear(i int) *Linear {
	if f == nil {
		return nil
	}
	return [2]*Linear{f.w1, f.w2}[i]
}

// Validate checks what NewFeedForward checks, without allocating anything: a
// known activation, Dim and Hidden positive, and the (Dim, Hidden) weights
// within graph.MaxElements.
func (c FeedForwardConfig) Validate() error { return c.validate("") }

func (c FeedForwardConfig) validate(name string) error {
	if !c.Activation.valid() {
		return layerErr("feed-forward", name, fieldErrorf("activation", nil, "unknown activation %q, want %q or %q", c.Activation, ActivationReLU, ActivationGELU))
	}
	if err := checkPositive(size{"Dim", "dim", c.Dim}, size{"Hidden", "hidden", c.Hidden}); err != nil {
		return layerErr("feed-forward", name, err)
	}
	if err := checkTensor("weight w1 (Dim, Hidden)", "hidden", []string{"dim"}, c.Dim, c.Hidden); err != nil {
		return layerErr("feed-forward", name, err)
	}
	if err := c.Init.validate(); err != nil {
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
	if err := s.checkLayer("feed-forward", cfg.validate); err != nil {
		return nil, err
	}
	if cfg.Activation == "" {
		cfg.Activation = ActivationReLU
	}
	w1, err := NewLinear(s, LinearConfig{In: cfg.Dim, Out: cfg.Hidden, Bias: cfg.Bias, WeightName: "w1", BiasName: "b1", Std: cfg.Init.Std})
	if err != nil {
		return nil, err
	}
	w2, err := NewLinear(s, LinearConfig{In: cfg.Hidden, Out: cfg.Dim, Bias: cfg.Bias, WeightName: "w2", BiasName: "b2", Std: cfg.Init.OutStd})
	if err != nil {
		return nil, err
	}
	return &FeedForward{cfg: cfg, w1: w1, w2: w2}, nil
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
	if f.cfg.Activation == ActivationGELU {
		h, err = graph.GELU(h)
	} else {
		h, err = graph.ReLU(h)
	}
	if err != nil {
		return nil, fmt.Errorf("layers: feed-forward %q: %w", f.w1.w.Name, err)
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
