package graph

import (
	"errors"
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Targets holds, for N predictions over Classes classes, the integer targets
// and per-token weights of a cross-entropy loss, as one (N, Classes) input:
// row i is weight_i / sum(weights) at column target_i and 0 elsewhere. Weight 0
// drops a position (padding, prompt) from the loss.
type Targets struct {
	Node       *G.Node
	N, Classes int
	buf        *tensor.Dense // Set's matrix, rewritten in place by every Set
}

// NewTargets returns a targets input for N predictions over classes classes.
func NewTargets(g *G.ExprGraph, dt tensor.Dtype, n, classes int, name string) (*Targets, error) {
	if err := CheckFloat(dt); err != nil {
		return nil, fmt.Errorf("graph: targets %q: %w", name, err)
	}
	if n <= 0 || classes <= 0 {
		return nil, fmt.Errorf("graph: targets %q: sizes must be positive, got N=%d classes=%d", name, n, classes)
	}
	if err := CheckElements(n, classes); err != nil {
		return nil, fmt.Errorf("graph: targets %q: (N, classes): %w", name, err)
	}
	if g == nil {
		return nil, fmt.Errorf("graph: targets %q: the graph is nil", name)
	}
	return &Targets{Node: G.NewMatrix(g, dt, G.WithShape(n, classes), G.WithName(name)), N: n, Classes: classes}, nil
}

// Set binds targets and weights for the next run. Every target must be in
// [0, Classes), every weight finite and >= 0, and at least one weight > 0.
// Targets at weight-0 positions are not checked, so padding may hold anything.
func (t *Targets) Set(targets []int, weights []float64) error {
	if err := t.Check(); err != nil {
		return fmt.Errorf("graph: %w", err)
	}
	name := t.Node.Name()
	if len(targets) != t.N || len(weights) != t.N {
		return fmt.Errorf("graph: targets %q: got %d targets and %d weights, want %d of each", name, len(targets), len(weights), t.N)
	}
	var total float64
	for i, w := range weights {
		if w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
			return fmt.Errorf("graph: targets %q: weight %v at %d is not a finite non-negative number", name, w, i)
		}
		if w > 0 && (targets[i] < 0 || targets[i] >= t.Classes) {
			return fmt.Errorf("graph: targets %q: target %d at %d is outside [0, %d)", name, targets[i], i, t.Classes)
		}
		total += w
	}
	if total == 0 {
		return fmt.Errorf("graph: targets %q: every weight is 0, the loss would be 0/0", name)
	}
	if t.buf == nil {
		t.buf = tensor.New(tensor.Of(t.Node.Dtype()), tensor.WithShape(t.N, t.Classes))
	}
	switch t.buf.Dtype() {
	case tensor.Float64:
		setTargets(t.buf.Float64s(), t.Classes, targets, weights, total)
	case tensor.Float32:
		setTargets(t.buf.Float32s(), t.Classes, targets, weights, total)
	}
	if err := LetOnce(t.Node, t.buf); err != nil {
		return fmt.Errorf("graph: targets %q: %w", name, err)
	}
	return nil
}

// setTargets writes the targets' matrix into m, rows of classes entries:
// weight_i / total at column target_i, 0 elsewhere.
func setTargets[T float32 | float64](m []T, classes int, targets []int, weights []float64, total float64) {
	clear(m)
	for i, w := range weights {
		if w > 0 {
			m[i*classes+targets[i]] = T(w / total)
		}
	}
}

// CrossEntropy returns the weighted mean negative log-likelihood of the
// targets under softmax(logits), a scalar:
//
//	loss = -Σ_i Σ_j t_ij log softmax(logits_i)_j
//
// with t the Targets' (N, Classes) matrix of weights. logits are (N,
// Classes) or (B, S, Classes) with B*S = N. It is one op each way
// (crossentropy.go), which subtracts each row's max before the exponentials,
// so it is stable for large float32 logits.
func CrossEntropy(logits *G.Node, t *Targets) (*G.Node, error) {
	if err := CheckNode(logits, "logits"); err != nil {
		return nil, fmt.Errorf("graph: cross-entropy: %w", err)
	}
	if err := t.Check(); err != nil {
		return nil, fmt.Errorf("graph: cross-entropy: %w", err)
	}
	s := logits.Shape()
	if len(s) < 2 || s.TotalSize() != t.N*t.Classes || s[len(s)-1] != t.Classes {
		return nil, shapeErrorf("graph: cross-entropy: logits shape %v does not match targets %q of (N, classes) = (%d, %d)", s, t.Node.Name(), t.N, t.Classes)
	}
	if logits.Dtype() != t.Node.Dtype() {
		return nil, fmt.Errorf("graph: cross-entropy: logits are %v but targets are %v", logits.Dtype(), t.Node.Dtype())
	}
	return crossEntropy(logits, t.Node, t.Classes)
}

// Check returns an error unless t was made by NewTargets: a nil or zero-value
// Targets has no node to bind. Set and CrossEntropy call it.
func (t *Targets) Check() error {
	if t == nil {
		return errors.New("targets are nil: make them with NewTargets")
	}
	if t.Node == nil || t.Node.Type() == nil || t.N <= 0 || t.Classes <= 0 || !t.Node.Shape().Eq(tensor.Shape{t.N, t.Classes}) {
		return errors.New("targets are a zero value or were changed after NewTargets: make them with NewTargets")
	}
	return nil
}
