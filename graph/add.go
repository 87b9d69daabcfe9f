package graph

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Add returns a + b for a and b of one shape: a residual connection, or two
// masks' biases combined. Its gradient with respect to each is the output's
// gradient itself.
//
// It is G.Add's arithmetic as one of qkv's ops, which keep their output
// from run to run (kernel.go): gorgonia's add, even writing into a kept
// output, allocated at every run.
func Add(a, b *G.Node) (*G.Node, error) {
	if err := CheckNode(a, "a"); err != nil {
		return nil, fmt.Errorf("graph: add: %w", err)
	}
	if err := CheckNode(b, "b"); err != nil {
		return nil, fmt.Errorf("graph: add: %w", err)
	}
	if !a.Shape().Eq(b.Shape()) || a.Dtype() != b.Dtype() {
		return nil, shapeErrorf("graph: add: %q is %v %v but %q is %v %v", a.Name(), a.Dtype(), a.Shape(), b.Name(), b.Dtype(), b.Shape())
	}
	if err := CheckFloat(a.Dtype()); err != nil {
		return nil, fmt.Errorf("graph: add: %w", err)
	}
	return apply(addOp{shape: a.Shape().Clone()}, a, b)
}

// addOp computes a + b.
type addOp struct {
	shape tensor.Shape
	buf   *output
}

func (op addOp) withOutput(b *output) G.Op { op.buf = b; return op }

func (op addOp) Arity() int { return 2 }

func (op addOp) Type() hm.Type {
	return opType([]int{op.shape.Dims(), op.shape.Dims()}, op.shape.Dims())
}

func (op addOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.shape.Clone(), nil }

func (op addOp) Do(vals ...G.Value) (G.Value, error) {
	return runKernel(op, vals, 2, op.shape, op.buf, false)
}

func (op addOp) run64(in [][]float64, out []float64) { add(out, in[0], in[1]) }
func (op addOp) run32(in [][]float32, out []float32) { add(out, in[0], in[1]) }

// add sets y = a + b.
func add[T float32 | float64](y, a, b []T) {
	for i := range y {
		y[i] = a[i] + b[i]
	}
}

func (op addOp) ReturnsPtr() bool     { return false }
func (op addOp) CallsExtern() bool    { return false }
func (op addOp) OverwritesInput() int { return -1 }

func (op addOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "qkv.add %v", op.shape) }
func (op addOp) Hashcode() uint32      { return hashOf(op) }
func (op addOp) String() string        { return "qkv.add" }

// DiffWRT: a + b is differentiable in both.
func (op addOp) DiffWRT(inputs int) []bool { return []bool{true, true} }

// SymDiff returns the output's gradient as the gradient of both inputs.
func (op addOp) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	return G.Nodes{grad, grad}, nil
}
