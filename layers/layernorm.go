package layers

import (
	"fmt"

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

// NewLayerNorm returns a LayerNorm with gain 1 and bias 0.
func NewLayerNorm(s *Scope, cfg LayerNormConfig) (*LayerNorm, error) {
	if err := checkPositive(size{"Dim", cfg.Dim}); err != nil {
		return nil, fmt.Errorf("layers: layernorm %q: %w", s.prefix, err)
	}
	if cfg.Eps < 0 {
		return nil, fmt.Errorf("layers: layernorm %q: Eps must be >= 0, got %v", s.prefix, cfg.Eps)
	}
	if cfg.Eps == 0 {
		cfg.Eps = 1e-5
	}
	return &LayerNorm{
		Config: cfg,
		Gain:   s.param("gain", constant(1), cfg.Dim),
		Bias:   s.param("bias", constant(0), cfg.Dim),
	}, nil
}

// Forward normalises x of shape (..., Dim).
func (l *LayerNorm) Forward(x *G.Node) (*G.Node, error) {
	y, err := graph.LayerNorm(x, l.Gain.Node, l.Bias.Node, l.Config.Eps)
	if err != nil {
		return nil, fmt.Errorf("layers: layernorm %q: %w", l.Gain.Name, err)
	}
	return y, nil
}

// Params returns gain and bias.
func (l *LayerNorm) Params() []graph.Param { return []graph.Param{l.Gain, l.Bias} }
