package graph

import (
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
)

// Scale returns x * f, every entry of x multiplied by the constant f, as a
// node of x's shape and dtype (the constant is made in x's dtype, see
// Scalar). It is gorgonia's Mul of a tensor and a scalar, the product
// the composed attention scales its scores with; its gradient is checked in
// float64 (go test ./graph -run GradCheckOps/Scale). f must be finite.
func Scale(x *G.Node, f float64) (*G.Node, error) {
	if err := CheckNode(x, "input"); err != nil {
		return nil, fmt.Errorf("graph: scale: %w", err)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("graph: scale: factor %v is not finite", f)
	}
	if err := CheckFloat(x.Dtype()); err != nil {
		return nil, fmt.Errorf("graph: scale: %w", err)
	}
	y, err := G.Mul(x, Scalar(x.Dtype(), f))
	if err != nil {
		return nil, fmt.Errorf("graph: scale: %w", err)
	}
	return y, nil
}
