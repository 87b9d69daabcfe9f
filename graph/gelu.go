package graph

import (
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
)

// GELU returns the Gaussian error linear unit of x in its tanh form,
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as PyTorch's
// gelu(approximate="tanh") and GPT-2 compute it. gorgonia has no erf op, and
// the tanh form differs from the exact one by less than 1e-3.
func GELU(x *G.Node) (*G.Node, error) {
	if err := CheckNode(x, "input"); err != nil {
		return nil, fmt.Errorf("graph: gelu: %w", err)
	}
	dt := x.Dtype()
	sq, err := G.Square(x)
	if err != nil {
		return nil, fmt.Errorf("graph: gelu: %w", err)
	}
	cube, err := G.HadamardProd(sq, x)
	if err != nil {
		return nil, fmt.Errorf("graph: gelu: %w", err)
	}
	if cube, err = G.Mul(cube, Scalar(dt, 0.044715)); err != nil {
		return nil, fmt.Errorf("graph: gelu: %w", err)
	}
	inner, err := G.Add(x, cube)
	if err != nil {
		return nil, fmt.Errorf("graph: gelu: %w", err)
	}
	if inner, err = G.Mul(inner, Scalar(dt, math.Sqrt(2/math.Pi))); err != nil {
		return nil, fmt.Errorf("graph: gelu: %w", err)
	}
	t, err := G.Tanh(inner)
	if err != nil {
		return nil, fmt.Errorf("graph: gelu: %w", err)
	}
	if t, err = G.Add(t, Scalar(dt, 1)); err != nil {
		return nil, fmt.Errorf("graph: gelu: %w", err)
	}
	if t, err = G.Mul(t, Scalar(dt, 0.5)); err != nil {
		return nil, fmt.Errorf("graph: gelu: %w", err)
	}
	return G.HadamardProd(x, t)
}
