package layers

import (
	"fmt"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
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
	y, err := l.forward(x)
	if err != nil {
		return nil, fmt.Errorf("layers: layernorm %q: %w", l.Gain.Name, err)
	}
	return y, nil
}

func (l *LayerNorm) forward(x *G.Node) (*G.Node, error) {
	s := x.Shape()
	d := l.Config.Dim
	if len(s) < 2 || s[len(s)-1] != d {
		return nil, fmt.Errorf("input shape %v, want (..., %d)", s, d)
	}
	flat, err := graph.Reshape(x, tensor.Shape{s.TotalSize() / d, d}) // (N, D)
	if err != nil {
		return nil, err
	}
	mean, err := graph.Mean(flat, 1) // (N)
	if err != nil {
		return nil, err
	}
	centred, err := G.BroadcastSub(flat, mean, nil, []byte{1}) // (N, D)
	if err != nil {
		return nil, err
	}
	sq, err := G.Square(centred)
	if err != nil {
		return nil, err
	}
	variance, err := graph.Mean(sq, 1) // (N)
	if err != nil {
		return nil, err
	}
	inv, err := graph.InvSqrt(variance, l.Config.Eps) // (N)
	if err != nil {
		return nil, err
	}
	y, err := G.BroadcastHadamardProd(centred, inv, nil, []byte{1}) // (N, D)
	if err != nil {
		return nil, err
	}
	if y, err = G.BroadcastHadamardProd(y, l.Gain.Node, nil, []byte{0}); err != nil {
		return nil, err
	}
	if y, err = G.BroadcastAdd(y, l.Bias.Node, nil, []byte{0}); err != nil {
		return nil, err
	}
	return graph.Reshape(y, s.Clone()) // (..., D)
}

// Params returns gain and bias.
func (l *LayerNorm) Params() []graph.Param { return []graph.Param{l.Gain, l.Bias} }
