package graph

import (
	"errors"
	"fmt"
	"math/rand/v2"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Dropout zeroes each entry of a fixed-shape node with probability P and scales
// the rest by 1/(1-P), through a keep-mask input that the caller redraws with
// Resample before every training step.
//
// gorgonia's Dropout divides by P instead of 1-P in its backward pass and draws
// from a clock-seeded generator (pinned in defects_test.go); here the mask of
// step t is drawn from a PCG seeded with (Seed, t), so runs and resumed runs
// repeat bit for bit.
type Dropout struct {
	P    float64
	Seed uint64
	keep *G.Node
	vals []float64
}

// NewDropout returns a dropout of rate p in [0, 1) for nodes of the given shape.
// It starts in evaluation mode (keeps everything) until Resample is called.
func NewDropout(g *G.ExprGraph, dt tensor.Dtype, shape tensor.Shape, p float64, seed uint64, name string) (*Dropout, error) {
	if !(p >= 0 && p < 1) { // also rejects NaN
		return nil, fmt.Errorf("graph: dropout %q: rate %v is outside [0, 1)", name, p)
	}
	if err := CheckFloat(dt); err != nil {
		return nil, fmt.Errorf("graph: dropout %q: %w", name, err)
	}
	if g == nil {
		return nil, fmt.Errorf("graph: dropout %q: the graph is nil", name)
	}
	if len(shape) == 0 {
		return nil, fmt.Errorf("graph: dropout %q: the shape is empty", name)
	}
	if err := CheckElements(shape...); err != nil {
		return nil, fmt.Errorf("graph: dropout %q: %w", name, err)
	}
	d := &Dropout{
		P:    p,
		Seed: seed,
		keep: G.NewTensor(g, dt, len(shape), G.WithShape(shape...), G.WithName(name+".keep")),
		vals: make([]float64, shape.TotalSize()),
	}
	return d, d.Eval()
}

// Apply returns x with the keep-mask applied. x must have the dropout's shape.
func (d *Dropout) Apply(x *G.Node) (*G.Node, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	if err := CheckNode(x, "input"); err != nil {
		return nil, fmt.Errorf("graph: dropout %q: %w", d.keep.Name(), err)
	}
	if !x.Shape().Eq(d.keep.Shape()) {
		return nil, fmt.Errorf("graph: dropout %q: input shape %v, want %v", d.keep.Name(), x.Shape(), d.keep.Shape())
	}
	return G.HadamardProd(x, d.keep)
}

// Keep returns the keep-mask node (0 or 1/(1-P)), for ops that apply it
// themselves, such as Attention; nil for a nil Dropout, which Attention
// takes as no dropout.
func (d *Dropout) Keep() *G.Node { return orZero(d).keep }

// check returns an error unless d was made by NewDropout.
func (d *Dropout) check() error {
	if d == nil || d.keep == nil || d.keep.Type() == nil || len(d.vals) != d.keep.Shape().TotalSize() {
		return errors.New("graph: dropout: nil or zero-value Dropout: make it with NewDropout")
	}
	if !(d.P >= 0 && d.P < 1) {
		return fmt.Errorf("graph: dropout %q: rate %v is outside [0, 1)", d.keep.Name(), d.P)
	}
	return nil
}

// Resample draws the keep-mask of training step `step`.
func (d *Dropout) Resample(step uint64) error {
	if err := d.check(); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(d.Seed, step))
	scale := 1 / (1 - d.P)
	for i := range d.vals {
		d.vals[i] = 0
		if rng.Float64() >= d.P {
			d.vals[i] = scale
		}
	}
	return d.bind()
}

// Eval switches the dropout off (keeps every entry unscaled), for evaluation.
func (d *Dropout) Eval() error {
	if err := d.check(); err != nil {
		return err
	}
	for i := range d.vals {
		d.vals[i] = 1
	}
	return d.bind()
}

func (d *Dropout) bind() error {
	if err := G.Let(d.keep, NewDense(d.keep.Dtype(), d.keep.Shape(), d.vals)); err != nil {
		return fmt.Errorf("graph: dropout %q: %w", d.keep.Name(), err)
	}
	return nil
}
