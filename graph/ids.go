package graph

import (
	"errors"
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// IDs is a (B, S) batch of token ids as a graph input, stored flat as a vector
// of B*S ints for gorgonia's ByIndices. Set checks every id against the
// vocabulary before it reaches the engine: gorgonia returns a wrong row for an
// out-of-range id and panics, out of the caller's reach, on a negative one.
type IDs struct {
	Node        *G.Node
	B, S, Vocab int
	backing     []int
	boundTensor *tensor.Dense
}

// NewIDs returns an input for B sequences of S token ids, each in [0, vocab).
func NewIDs(g *G.ExprGraph, b, s, vocab int, name string) (*IDs, error) {
	if b <= 0 || s <= 0 || vocab <= 0 {
		return nil, fmt.Errorf("graph: ids %q: sizes must be positive, got B=%d S=%d vocab=%d", name, b, s, vocab)
	}
	if g == nil {
		return nil, fmt.Errorf("graph: ids %q: the graph is nil", name)
	}
	if err := CheckElements(b, s); err != nil {
		return nil, fmt.Errorf("graph: ids %q: (B, S): %w", name, err)
	}
	backing := make([]int, b*s)
	return &IDs{
		Node:        G.NewVector(g, tensor.Int, G.WithShape(b*s), G.WithName(name)),
		B:           b,
		S:           s,
		Vocab:       vocab,
		backing:     backing,
		boundTensor: tensor.New(tensor.WithShape(b*s), tensor.WithBacking(backing)),
	}, nil
}

// Set binds the ids for the next run, row-major (B, S). It returns an error
// naming the offending position if the length is wrong or an id is outside
// [0, Vocab).
func (t *IDs) Set(ids []int) error {
	if err := t.Check(); err != nil {
		return fmt.Errorf("graph: %w", err)
	}
	if len(ids) != t.B*t.S {
		return fmt.Errorf("graph: ids %q: got %d ids, want B*S = %d*%d = %d", t.Node.Name(), len(ids), t.B, t.S, t.B*t.S)
	}
	for i, id := range ids {
		if id < 0 || id >= t.Vocab {
			return fmt.Errorf("graph: ids %q: id %d at (b=%d, s=%d) is outside the vocabulary [0, %d)", t.Node.Name(), id, i/t.S, i%t.S, t.Vocab)
		}
	}
	copy(t.backing, ids)
	if err := G.Let(t.Node, t.boundTensor); err != nil {
		return fmt.Errorf("graph: ids %q: %w", t.Node.Name(), err)
	}
	return nil
}

// Values returns the ids bound by the last Set, (B, S) row-major: the
// slice Set copies into, shared and not to be written. Spec's
// QueryPos may alias it, so that modifiers read each run's positions.
func (t *IDs) Values() []int { return orZero(t).backing }

// Check returns an error unless t was made by NewIDs: a nil or zero-value IDs
// has no node to bind and no buffer to copy into. Set and Embed call it; so do
// layers that take ids, before reading B and S.
func (t *IDs) Check() error {
	if t == nil {
		return errors.New("ids are nil: make them with NewIDs")
	}
	if t.Node == nil || t.Node.Type() == nil || t.backing == nil || t.B <= 0 || t.S <= 0 || t.Vocab <= 0 || len(t.backing) != t.B*t.S {
		return errors.New("ids are a zero value or were changed after NewIDs: make them with NewIDs")
	}
	return nil
}
