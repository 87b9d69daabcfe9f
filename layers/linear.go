package layers

import (
	"fmt"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
)

// LinearConfig configures a Linear layer y = x W + b.
type LinearConfig struct {
	In, Out int
	// Bias adds the learnable b; without it y = x W.
	Bias bool
	// WeightName and BiasName name the parameters within the layer's scope;
	// they default to "w" and "b". Attention uses them to call its weights
	// wq, wk, wv, wo as the formula does.
	WeightName, BiasName string
}

// Linear is an affine map over the last axis: (..., In) -> (..., Out).
// W is stored (In, Out) so that y = x W, the transpose of PyTorch's layout.
type Linear struct {
	Config LinearConfig
	W, B   graph.Param // B.Node is nil without bias
}

// NewLinear returns a Linear in scope s with weights drawn from
// U(-1/sqrt(In), 1/sqrt(In)) and a zero bias.
func NewLinear(s *Scope, cfg LinearConfig) (*Linear, error) {
	if err := checkPositive(size{"In", cfg.In}, size{"Out", cfg.Out}); err != nil {
		return nil, fmt.Errorf("layers: linear %q: %w", s.prefix, err)
	}
	if cfg.WeightName == "" {
		cfg.WeightName = "w"
	}
	if cfg.BiasName == "" {
		cfg.BiasName = "b"
	}
	l := &Linear{Config: cfg}
	l.W = s.param(cfg.WeightName, fanIn(cfg.In), cfg.In, cfg.Out)
	if cfg.Bias {
		l.B = s.param(cfg.BiasName, constant(0), cfg.Out)
	}
	return l, nil
}

// Forward maps x of shape (..., In) to (..., Out).
func (l *Linear) Forward(x *G.Node) (*G.Node, error) {
	s := x.Shape()
	if len(s) < 2 || s[len(s)-1] != l.Config.In {
		return nil, fmt.Errorf("layers: linear %q: input shape %v, want (..., %d)", l.W.Name, s, l.Config.In)
	}
	if x.Dtype() != l.W.Node.Dtype() {
		return nil, fmt.Errorf("layers: linear %q: input is %v, weights are %v", l.W.Name, x.Dtype(), l.W.Node.Dtype())
	}
	y, err := graph.Linear(x, l.W.Node, l.B.Node) // (..., Out) = x W + b
	if err != nil {
		return nil, fmt.Errorf("layers: linear %q: %w", l.W.Name, err)
	}
	return y, nil
}

// Params returns W and, with bias, b.
func (l *Linear) Params() []graph.Param {
	if l.B.Node == nil {
		return []graph.Param{l.W}
	}
	return []graph.Param{l.W, l.B}
}
