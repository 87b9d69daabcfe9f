package layers

import (
	"errors"
	"fmt"
	"math"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
)

// LayerNormConfig configures a LayerNorm over the last axis.
type LayerNormConfig struct {
	Dim int
	// Eps is added to the variance before the inverse square root; 0 means
	// the default 1e-5 (PyTorch's).
	Eps float64
}

// LayerNorm normalises each position's vector to zero mean and unit variance
// (biased variance, as PyTorch), then scales by Gain and shifts by Bias.
type LayerNorm struct {
	Config     LayerNormConfig
	Gain, Bias graph.Param
}

// Validate checks what NewLayerNorm checks, without allocating anything: Dim
// positive and Eps a finite number >= 0 (NaN or Inf would make every output
// NaN without an error).
func (c LayerNormConfig) Validate() error { return c.validate("") }

func (c LayerNormConfig) validate(name string) error {
	if err := checkPositive(size{"Dim", c.Dim}); err != nil {
		return layerErr("layernorm", name, err)
	}
	if !(c.Eps >= 0) || math.IsInf(c.Eps, 0) {
		return layerErr("layernorm", name, fmt.Errorf("Eps must be a finite number >= 0, got %v", c.Eps))
	}
	return nil
}

// params is the number of learnable values: gain and bias.
func (c LayerNormConfig) params() int { return 2 * c.Dim }

// NewLayerNorm returns a LayerNorm with gain 1 and bias 0.
func NewLayerNorm(s *Scope, cfg LayerNormConfig) (*LayerNorm, error) {
	if err := s.check(); err != nil {
		return nil, layerErr("layernorm", s.path(), err)
	}
	if err := cfg.validate(s.path()); err != nil {
		return nil, err
	}
	if cfg.Eps == 0 {
		cfg.Eps = 1e-5
	}
	gain, err := s.param("gain", constant(1), cfg.Dim)
	if err != nil {
		return nil, layerErr("layernorm", s.path(), err)
	}
	bias, err := s.param("bias", constant(0), cfg.Dim)
	if err != nil {
		return nil, layerErr("layernorm", s.path(), err)
	}
	return &LayerNorm{Config: cfg, Gain: gain, Bias: bias}, nil
}

// Forward normalises x of shape (..., Dim).
func (l *LayerNorm) Forward(x *G.Node) (*G.Node, error) {
	if l == nil || l.Gain.Node == nil || l.Bias.Node == nil {
		return nil, errors.New("layers: layernorm: the layer is nil or a zero value: make it with NewLayerNorm")
	}
	y, err := graph.LayerNorm(x, l.Gain.Node, l.Bias.Node, l.Config.Eps)
	if err != nil {
		return nil, fmt.Errorf("layers: layernorm %q: %w", l.Gain.Name, err)
	}
	return y, nil
}

// Params returns gain and bias; nothing for a nil LayerNorm.
func (l *LayerNorm) Params() []graph.Param {
	if l == nil || l.Gain.Node == nil {
		return nil
	}
	return []graph.Param{l.Gain, l.Bias}
}
