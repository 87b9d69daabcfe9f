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
	// NoBias leaves the additive bias out: y = xhat * gain, nanoGPT's
	// LayerNorm(bias=False). The layer then has no "bias" parameter at all
	// (not a zero one), so a checkpoint holds no tensor that never moves.
	NoBias bool
}

// LayerNorm normalises each position's vector to zero mean and unit variance
// (biased variance, as PyTorch), then scales by its gain and shifts by its
// bias. Its configuration is fixed when it is built: Config returns a copy.
type LayerNorm struct {
	cfg        LayerNormConfig
	gain, bias graph.Param
}

// Config returns a copy of the configuration the layer was built with, Eps
// filled in; the zero LayerNormConfig for a nil LayerNorm.
func (l *LayerNorm) Config() LayerNormConfig { return orZero(l).cfg }

// Gain returns the gain (Dim), role graph.RoleGain; the zero Param for a nil
// LayerNorm.
func (l *LayerNorm) Gain() graph.Param { return orZero(l).gain }

// Bias returns the bias (Dim), role graph.RoleBias; the zero Param for a nil
// LayerNorm and with NoBias.
func (l *LayerNorm) Bias() graph.Param { return orZero(l).bias }

// Validate checks what NewLayerNorm checks, without allocating anything: Dim
// positive and Eps a finite number >= 0 (NaN or Inf would make every output
// NaN without an error).
func (c LayerNormConfig) Validate() error { return c.validate("") }

func (c LayerNormConfig) validate(name string) error {
	if err := checkPositive(size{"Dim", "dim", c.Dim}); err != nil {
		return layerErr("layernorm", name, err)
	}
	if !(c.Eps >= 0) || math.IsInf(c.Eps, 0) {
		return layerErr("layernorm", name, fieldErrorf("", nil, "Eps must be a finite number >= 0, got %v", c.Eps))
	}
	return nil
}

// params is the number of learnable values: gain and, unless NoBias, bias.
func (c LayerNormConfig) params() int {
	if c.NoBias {
		return c.Dim
	}
	return 2 * c.Dim
}

// NewLayerNorm returns a LayerNorm with gain 1 and bias 0 (no bias with
// NoBias).
func NewLayerNorm(s *Scope, cfg LayerNormConfig) (*LayerNorm, error) {
	if err := s.checkLayer("layernorm", cfg.validate); err != nil {
		return nil, err
	}
	if cfg.Eps == 0 {
		cfg.Eps = 1e-5
	}
	gain, err := s.param("gain", graph.RoleGain, constant(1), cfg.Dim)
	if err != nil {
		return nil, layerErr("layernorm", s.path(), err)
	}
	l := &LayerNorm{cfg: cfg, gain: gain}
	if !cfg.NoBias {
		if l.bias, err = s.param("bias", graph.RoleBias, constant(0), cfg.Dim); err != nil {
			return nil, layerErr("layernorm", s.path(), err)
		}
	}
	return l, nil
}

// Forward normalises x of shape (..., Dim).
func (l *LayerNorm) Forward(x *G.Node) (*G.Node, error) {
	if l == nil || l.gain.Node == nil || (l.bias.Node == nil) != l.cfg.NoBias {
		return nil, errors.New("layers: layernorm: the layer is nil or a zero value: make it with NewLayerNorm")
	}
	y, err := graph.LayerNorm(x, l.gain.Node, l.bias.Node, l.cfg.Eps) // a nil bias: gain only
	if err != nil {
		return nil, fmt.Errorf("layers: layernorm %q: %w", l.gain.Name, err)
	}
	return y, nil
}

// Params returns gain and bias (gain alone with NoBias); nothing for a nil
// LayerNorm.
func (l *LayerNorm) Params() []graph.Param {
	n := orZero(l)
	return learned(n.gain, n.bias)
}
