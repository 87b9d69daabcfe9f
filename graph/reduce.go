package graph

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Sum returns the sum of x along one axis.
//
// gorgonia's reductions along axis k with 2 <= k <= ndim-2 of a tensor of 4 or
// more dimensions give wrong values and gradients (pinned in defects_test.go).
// Reducing axis 1 of a 3-D tensor is right, so x is viewed as
// (before, axis, after) and reduced there.
func Sum(x *G.Node, axis int) (*G.Node, error) {
	return reduce(G.Sum, "sum", x, axis)
}

// Mean returns the mean of x along one axis, with the same workaround as Sum.
func Mean(x *G.Node, axis int) (*G.Node, error) {
	return reduce(G.Mean, "mean", x, axis)
}

func reduce(op func(*G.Node, ...int) (*G.Node, error), what string, x *G.Node, axis int) (*G.Node, error) {
	if err := CheckNode(x, "input"); err != nil {
		return nil, fmt.Errorf("graph: %s: %w", what, err)
	}
	s := x.Shape()
	if axis < 0 || axis >= len(s) {
		return nil, fmt.Errorf("graph: %s: axis %d out of range for shape %v", what, axis, s)
	}
	if len(s) <= 3 || axis == 0 || axis == len(s)-1 {
		return op(x, axis)
	}
	before, after := 1, 1
	for _, d := range s[:axis] {
		before *= d
	}
	for _, d := range s[axis+1:] {
		after *= d
	}
	v, err := Reshape(x, tensor.Shape{before, s[axis], after})
	if err != nil {
		return nil, fmt.Errorf("graph: %s: %w", what, err)
	}
	if v, err = op(v, 1); err != nil {
		return nil, fmt.Errorf("graph: %s: %w", what, err)
	}
	out := append(append(tensor.Shape{}, s[:axis]...), s[axis+1:]...)
	return Reshape(v, out)
}

// InvSqrt returns 1/sqrt(x + eps) element-wise, as Pow(x+eps, -0.5): gorgonia's
// InverseSqrt has a wrong gradient (pinned in defects_test.go).
func InvSqrt(x *G.Node, eps float64) (*G.Node, error) {
	if err := CheckNode(x, "input"); err != nil {
		return nil, fmt.Errorf("graph: inverse sqrt: %w", err)
	}
	shifted, err := G.Add(x, Scalar(x.Dtype(), eps))
	if err != nil {
		return nil, fmt.Errorf("graph: inverse sqrt: %w", err)
	}
	return G.Pow(shifted, Scalar(x.Dtype(), -0.5))
}
