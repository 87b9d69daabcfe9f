package graph

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Reshape returns x with a new shape of the same size, in its own memory.
//
// gorgonia's Reshape returns a value that shares memory with its input, and
// its compiler does not track that alias: an element-wise op after the
// Reshape may then run in place and overwrite the input's value while the
// backward pass still needs it (the output of Exp or Tanh, whose derivative is
// computed from it), giving a wrong gradient (pinned in reshape_test.go). This
// Reshape copies, so nothing downstream can write through it.
func Reshape(x *G.Node, to tensor.Shape) (*G.Node, error) {
	if err := CheckNode(x, "input"); err != nil {
		return nil, fmt.Errorf("graph: reshape: %w", err)
	}
	if err := CheckElements(to...); err != nil {
		return nil, fmt.Errorf("graph: reshape %q: target %w", x.Name(), err)
	}
	from := x.Shape().Clone()
	if from.TotalSize() != to.TotalSize() {
		return nil, fmt.Errorf("graph: reshape %q: cannot reshape %v (%d elements) to %v (%d elements)", x.Name(), from, from.TotalSize(), to, to.TotalSize())
	}
	if from.Eq(to) {
		return x, nil
	}
	return G.ApplyOp(reshapeCopy{from: from, to: to.Clone()}, x)
}

// reshapeCopy is the op behind Reshape: a copy with a new shape, whose
// gradient is the incoming gradient copied back to the old shape.
type reshapeCopy struct {
	pureOp
	from, to tensor.Shape
}

func (op reshapeCopy) Arity() int { return 1 }

func (op reshapeCopy) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(&G.TensorType{Dims: op.from.Dims(), Of: a}, &G.TensorType{Dims: op.to.Dims(), Of: a})
}

func (op reshapeCopy) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.to.Clone(), nil }

func (op reshapeCopy) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != 1 {
		return nil, fmt.Errorf("graph: reshape: want 1 input, got %d", len(vals))
	}
	in, ok := vals[0].(*tensor.Dense)
	if !ok {
		return nil, fmt.Errorf("graph: reshape: input is %T, want *tensor.Dense", vals[0])
	}
	if in.Shape().TotalSize() != op.from.TotalSize() {
		return nil, fmt.Errorf("graph: reshape: input shape %v, want %v", in.Shape(), op.from)
	}
	out := in.Clone().(*tensor.Dense)
	if err := out.Reshape(op.to...); err != nil {
		return nil, fmt.Errorf("graph: reshape: %w", err)
	}
	return out, nil
}

func (op reshapeCopy) WriteHash(h hash.Hash) { fmt.Fprintf(h, "qkv.reshape %v -> %v", op.from, op.to) }

func (op reshapeCopy) Hashcode() uint32 { return hashOf(op) }

func (op reshapeCopy) String() string { return fmt.Sprintf("qkv.Reshape%v", op.to) }

func (op reshapeCopy) DiffWRT(int) []bool { return []bool{true} }

func (op reshapeCopy) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	back, err := G.ApplyOp(reshapeCopy{from: op.to, to: op.from}, grad)
	if err != nil {
		return nil, err
	}
	return G.Nodes{back}, nil
}
