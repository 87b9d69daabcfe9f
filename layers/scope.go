package layers

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Scope is where layers are built: the graph, its dtype, the random source
// that initialises weights, and the dotted name prefix of the layer being
// built ("blocks.0.attn"). Layers built from scopes of one root, in the same
// order, from the same seed get the same names and the same initial values.
type Scope struct {
	g      *G.ExprGraph
	dt     tensor.Dtype
	rng    *rand.Rand
	seed   uint64
	prefix string
}

// NewScope returns the root scope of a model in g with dtype dt (float32 or
// float64); seed fixes every initial weight and dropout mask.
func NewScope(g *G.ExprGraph, dt tensor.Dtype, seed uint64) (*Scope, error) {
	if err := graph.CheckFloat(dt); err != nil {
		return nil, fmt.Errorf("layers: %w", err)
	}
	return &Scope{g: g, dt: dt, rng: rand.New(rand.NewPCG(seed, 0x716b76)), seed: seed}, nil
}

// Sub returns the scope of a child named name: its parameters are called
// "<prefix>.<name>.<param>".
func (s *Scope) Sub(name string) *Scope {
	c := *s
	c.prefix = s.Name(name)
	return &c
}

// Name returns the full dotted name of local within this scope.
func (s *Scope) Name(local string) string {
	if s.prefix == "" {
		return local
	}
	return s.prefix + "." + local
}

// Graph returns the graph layers are built in.
func (s *Scope) Graph() *G.ExprGraph { return s.g }

// Dtype returns the dtype of every node the scope builds.
func (s *Scope) Dtype() tensor.Dtype { return s.dt }

// initFn draws the initial value of one parameter.
type initFn func(rng *rand.Rand, i int) float64

func uniform(bound float64) initFn {
	return func(rng *rand.Rand, _ int) float64 { return (2*rng.Float64() - 1) * bound }
}

func normal(std float64) initFn {
	return func(rng *rand.Rand, _ int) float64 { return rng.NormFloat64() * std }
}

func constant(v float64) initFn {
	return func(*rand.Rand, int) float64 { return v }
}

// fanIn is PyTorch's nn.Linear default bound, U(-1/sqrt(in), 1/sqrt(in)).
func fanIn(in int) initFn { return uniform(1 / math.Sqrt(float64(in))) }

// param creates the learnable node named s.Name(local) with the given shape
// and initial values.
func (s *Scope) param(local string, fill initFn, shape ...int) graph.Param {
	vals := make([]float64, tensor.Shape(shape).TotalSize())
	for i := range vals {
		vals[i] = fill(s.rng, i)
	}
	name := s.Name(local)
	value := graph.NewDense(s.dt, shape, vals)
	var n *G.Node
	if len(shape) == 1 {
		n = G.NewVector(s.g, s.dt, G.WithShape(shape...), G.WithName(name), G.WithValue(value))
	} else {
		n = G.NewTensor(s.g, s.dt, len(shape), G.WithShape(shape...), G.WithName(name), G.WithValue(value))
	}
	return graph.Param{Name: name, Node: n}
}

// dropout returns a dropout of rate p for nodes of the given shape, seeded
// from the model seed and the full name so that every site draws its own
// masks, or nil when p is 0.
func (s *Scope) dropout(local string, p float64, shape tensor.Shape) (*graph.Dropout, error) {
	if p == 0 {
		return nil, nil
	}
	name := s.Name(local)
	h := s.seed
	for _, c := range name {
		h = h*1099511628211 + uint64(c)
	}
	return graph.NewDropout(s.g, s.dt, shape, p, h, name)
}

// size is a named size of a configuration, for validation messages.
type size struct {
	name string
	v    int
}

// checkPositive returns an error naming the first size that is not > 0.
func checkPositive(sizes ...size) error {
	for _, s := range sizes {
		if s.v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", s.name, s.v)
		}
	}
	return nil
}
