package layers

import (
	"errors"
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
	// Std, when > 0, draws W from N(0, Std²) (GPT-2's init) instead of
	// U(±1/sqrt(In)); b starts at 0 either way.
	Std float64
}

// Linear is an affine map over the last axis: (..., In) -> (..., Out).
// W is stored (In, Out) so that y = x W, the transpose of PyTorch's layout.
// Its configuration is fixed when it is built: Config returns a copy.
type Linear struct {
	cfg  LinearConfig
	w, b graph.Param // b.Node is nil without bias
}

// Config returns a copy of the configuration the layer was built with, names
// filled in; the zero LinearConfig for a nil Linear.
func (l *Linear) Config() LinearConfig { return orZero(l).cfg }

// Weight returns W (In, Out), role graph.RoleWeight; the zero Param for a nil
// Linear.
func (l *Linear) Weight() graph.Param { return orZero(l).w }

// Bias returns b (Out), role graph.RoleBias; the zero Param (nil Node)
// without Bias or for a nil Linear.
func (l *Linear) Bias() graph.Param { return orZero(l).b }

// Validate checks what NewLinear checks, without allocating anything: In and
// Out positive, and the (In, Out) weight within graph.MaxElements.
func (c LinearConfig) Validate() error { return c.validate("") }

// validate is Validate for the layer at scope prefix name.
func (c LinearConfig) validate(name string) error {
	if err := checkPositive(size{"In", "", c.In}, size{"Out", "", c.Out}); err != nil {
		return layerErr("linear", name, err)
	}
	if err := checkTensor("weight (In, Out)", "", nil, c.In, c.Out); err != nil {
		return layerErr("linear", name, err)
	}
	if err := checkStd("Std", c.Std); err != nil {
		return layerErr("linear", name, err)
	}
	return nil
}

// params is the number of learnable values of a valid configuration.
func (c LinearConfig) params() int {
	if c.Bias {
		return c.In*c.Out + c.Out
	}
	return c.In * c.Out
}

// NewLinear returns a Linear in scope s with weights drawn from
// U(-1/sqrt(In), 1/sqrt(In)) and a zero bias.
func NewLinear(s *Scope, cfg LinearConfig) (*Linear, error) {
	if err := s.checkLayer("linear", cfg.validate); err != nil {
		return nil, err
	}
	if cfg.WeightName == "" {
		cfg.WeightName = "w"
	}
	if cfg.BiasName == "" {
		cfg.BiasName = "b"
	}
	l := &Linear{cfg: cfg}
	var err error
	if l.w, err = s.param(cfg.WeightName, graph.RoleWeight, weightFill(cfg.Std, cfg.In), cfg.In, cfg.Out); err != nil {
		return nil, layerErr("linear", s.path(), err)
	}
	if cfg.Bias {
		if l.b, err = s.param(cfg.BiasName, graph.RoleBias, constant(0), cfg.Out); err != nil {
			return nil, layerErr("linear", s.path(), err)
		}
	}
	return l, nil
}

// check returns an error unless l was made by NewLinear: a nil or zero-value
// Linear has no weights to multiply by.
func (l *Linear) check() error {
	if l == nil || l.w.Node == nil {
		return errors.New("layers: linear: the layer is nil or a zero value: make it with NewLinear")
	}
	return nil
}

// Forward maps x of shape (..., In) to (..., Out).
func (l *Linear) Forward(x *G.Node) (*G.Node, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	if err := graph.CheckNode(x, "input"); err != nil {
		return nil, fmt.Errorf("layers: linear %q: %w", l.w.Name, err)
	}
	s := x.Shape()
	if len(s) < 2 || s[len(s)-1] != l.cfg.In {
		return nil, shapeErrorf("layers: linear %q: input shape %v, want (..., %d)", l.w.Name, s, l.cfg.In)
	}
	if x.Dtype() != l.w.Node.Dtype() {
		return nil, fmt.Errorf("layers: linear %q: input is %v, weights are %v", l.w.Name, x.Dtype(), l.w.Node.Dtype())
	}
	y, err := graph.Linear(x, l.w.Node, l.b.Node) // (..., Out) = x W + b
	if err != nil {
		return nil, fmt.Errorf("layers: linear %q: %w", l.w.Name, err)
	}
	return y, nil
}

// Params returns W and, with bias, b; nothing for a nil Linear.
func (l *Linear) Params() []graph.Param {
	lin := orZero(l)
	return learned(lin.w, lin.b)
}
