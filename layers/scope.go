package layers

import (
	"errors"
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
//
// A scope is only usable when made here: a nil *Scope or a zero-value Scope
// has no graph and no random source, and every constructor given one returns
// an error instead of building into nothing.
func NewScope(g *G.ExprGraph, dt tensor.Dtype, seed uint64) (*Scope, error) {
	if g == nil {
		return nil, errors.New("layers: scope: the graph is nil: pass the gorgonia graph the model is built in")
	}
	if err := graph.CheckFloat(dt); err != nil {
		return nil, configError(fmt.Errorf("layers: %w", err))
	}
	return &Scope{g: g, dt: dt, rng: rand.New(rand.NewPCG(seed, 0x716b76)), seed: seed}, nil
}

// Sub returns the scope of a child named name: its parameters are called
// "<prefix>.<name>.<param>". Sub of a nil scope is nil, so that a chain such
// as s.Sub("blocks").Sub("0") cannot panic and the constructor it is passed
// to reports the missing scope.
func (s *Scope) Sub(name string) *Scope {
	if s == nil {
		return nil
	}
	c := *s
	c.prefix = s.Name(name)
	return &c
}

// Name returns the full dotted name of local within this scope (local itself
// for a nil or root scope).
func (s *Scope) Name(local string) string {
	if s == nil || s.prefix == "" {
		return local
	}
	return s.prefix + "." + local
}

// Graph returns the graph layers are built in, nil for a nil scope.
func (s *Scope) Graph() *G.ExprGraph { return orZero(s).g }

// Dtype returns the dtype of every node the scope builds (the zero Dtype for a
// nil scope).
func (s *Scope) Dtype() tensor.Dtype { return orZero(s).dt }

// path is the scope's dotted prefix, "" for a nil or root scope: the name
// error messages give the layer.
func (s *Scope) path() string {
	if s == nil {
		return ""
	}
	return s.prefix
}

// check returns an error unless s was made by NewScope (or Sub of such a
// scope): a nil or zero-value scope has no graph to build in and no random
// source to draw weights from.
func (s *Scope) check() error {
	switch {
	case s == nil:
		return errors.New("scope is nil: make one with NewScope")
	case s.g == nil || s.rng == nil || graph.CheckFloat(s.dt) != nil:
		return errors.New("scope is a zero value (no graph, dtype or random source): make one with NewScope")
	}
	return nil
}

// checkLayer is how a constructor of a kind of layer begins: it returns an
// error unless s is a scope to build in (check) and validate, the
// configuration's, accepts it for the layer at s.
func (s *Scope) checkLayer(kind string, validate func(name string) error) error {
	if err := s.check(); err != nil {
		return layerErr(kind, s.path(), err)
	}
	return validate(s.path())
}

// orZero returns l, or a zero L for a nil l: the getters read through it,
// so that each is safe on a nil layer and returns its field's zero value
// there.
func orZero[L any](l *L) *L {
	if l == nil {
		return new(L)
	}
	return l
}

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

// param creates the learnable node named s.Name(local) with the given role,
// shape and initial values. Constructors validate their configuration first; the
// size check here guards the allocation itself all the same.
func (s *Scope) param(local string, role graph.Role, fill initFn, shape ...int) (graph.Param, error) {
	if err := graph.CheckElements(shape...); err != nil {
		return graph.Param{}, fmt.Errorf("parameter %q: %w", s.Name(local), err)
	}
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
	return graph.Param{Name: name, Node: n, Role: role}, nil
}

// dropout returns a dropout of rate p for nodes of the given shape, seeded
// from the model seed and the full name so that every site draws its own
// masks, or nil when p is 0.
func (s *Scope) dropout(local string, p float64, shape tensor.Shape) (*graph.Dropout, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
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

// size is a size of a configuration: its Go name for messages, and its
// config.json key for FieldError ("" when config.json does not hold it).
type size struct {
	name, field string
	v           int
}

// checkPositive returns an error naming the first size that is not > 0.
func checkPositive(sizes ...size) error {
	for _, s := range sizes {
		if s.v <= 0 {
			return fieldErrorf(s.field, nil, "%s must be positive, got %d", s.name, s.v)
		}
	}
	return nil
}

// checkTensor returns an error naming the tensor what unless graph.CheckElements
// accepts its shape: a configuration's sizes may each be fine and their
// product still overflow int or exceed graph.MaxElements. field and with
// are the config.json keys of its sizes.
func checkTensor(what, field string, with []string, shape ...int) error {
	if err := graph.CheckElements(shape...); err != nil {
		return &FieldError{Field: field, With: with, err: configError(fmt.Errorf("%s: %w", what, err))}
	}
	return nil
}

// checkRate returns an error unless the rate p, called name (field in
// config.json), is in [0, 1). Written as !(p >= 0 && p < 1) so that NaN is
// refused too.
func checkRate(name, field string, p float64) error {
	if !(p >= 0 && p < 1) {
		return fieldErrorf(field, nil, "%s %v is outside [0, 1)", name, p)
	}
	return nil
}

// layerErr wraps err as "layers: <kind> <"name">: err", leaving the name out
// when it is empty (a Config's Validate, which knows no scope, or a root
// scope).
func layerErr(kind, name string, err error) error {
	if name == "" {
		return fmt.Errorf("layers: %s: %w", kind, err)
	}
	return fmt.Errorf("layers: %s %q: %w", kind, name, err)
}

// addCounts returns a + b, or an error if the sum exceeds graph.MaxElements.
// Counts are each at most MaxElements, so the sum cannot overflow int64.
func addCounts(what string, counts ...int) (int, error) {
	total := 0
	for _, c := range counts {
		total += c
		if total > graph.MaxElements {
			return 0, configErrorf("%s: more than graph.MaxElements = %d parameters", what, graph.MaxElements)
		}
	}
	return total, nil
}
