package graph

import (
	"errors"
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Scalar returns a constant of value v in the dtype dt. gorgonia refuses to
// combine a float64 constant with float32 nodes ("Unification Fail"), so every
// constant in qkv is made through here.
func Scalar(dt tensor.Dtype, v float64) *G.Node {
	if dt == tensor.Float32 {
		return G.NewConstant(float32(v))
	}
	return G.NewConstant(v)
}

// CheckFloat returns an error unless dt is float32 or float64, the two dtypes
// qkv supports.
func CheckFloat(dt tensor.Dtype) error {
	if dt != tensor.Float32 && dt != tensor.Float64 {
		return fmt.Errorf("dtype %v is not supported: use float32 or float64", dt)
	}
	return nil
}

// NewDense returns a tensor of dtype dt and the given shape holding vals,
// converted from float64.
//
// len(vals) must be the shape's size: like an out-of-range index, a mismatch
// is a mistake in the calling code rather than bad input, and tensor.New
// panics on it. Callers with sizes from outside check them first
// (CheckElements, and the length of what they were given).
func NewDense(dt tensor.Dtype, shape tensor.Shape, vals []float64) *tensor.Dense {
	if dt == tensor.Float32 {
		f := make([]float32, len(vals))
		for i, v := range vals {
			f[i] = float32(v)
		}
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(f))
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(append([]float64(nil), vals...)))
}

// Float64s copies the float32 or float64 data of v into a new []float64.
func Float64s(v G.Value) ([]float64, error) {
	if d, ok := v.(*tensor.Dense); v == nil || (ok && d == nil) {
		return nil, errors.New("graph: value is nil")
	}
	switch d := v.Data().(type) {
	case []float64:
		return append([]float64(nil), d...), nil
	case []float32:
		out := make([]float64, len(d))
		for i, x := range d {
			out[i] = float64(x)
		}
		return out, nil
	case float64:
		return []float64{d}, nil
	case float32:
		return []float64{float64(d)}, nil
	default:
		return nil, fmt.Errorf("value of type %T is not float32 or float64", d)
	}
}
