package graph

import (
	"fmt"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// pureOp answers for a qkv op what gorgonia asks of every op and what all
// of them answer alike: the op returns a value of its own (an output it
// keeps, kernel.go), not a pointer into an input; it calls nothing outside
// Go; it overwrites no input. The ops embed it.
type pureOp struct{}

func (pureOp) ReturnsPtr() bool     { return false }
func (pureOp) CallsExtern() bool    { return false }
func (pureOp) OverwritesInput() int { return -1 }

// orZero returns x, or a zero T for a nil x: getters read through it, so
// that each is safe on a nil receiver and returns its field's zero value
// there.
func orZero[T any](x *T) *T {
	if x == nil {
		return new(T)
	}
	return x
}

// diffAll is the DiffWRT of an op differentiable in each of its inputs
// (d true, the forward op) or in none (its gradient ops, not
// differentiated again).
func diffAll(inputs int, d bool) []bool {
	diff := make([]bool, inputs)
	for i := range diff {
		diff[i] = d
	}
	return diff
}

// gradName is the String of an op named name whose gradient op, with grad,
// is named name + "Grad".
func gradName(name string, grad bool) string {
	if grad {
		return name + "Grad"
	}
	return name
}

// What a paramOp computes.
const (
	paramOutput = iota // y, shaped as x, from (x, params...)
	paramGradX         // dx from (x, p, dy)
	paramGradP         // the first parameter's gradient from (x, p, dy); paramGradP+1 the second's
)

// checkHeads checks the input x (..., heads*dk) of an op on each head's dk
// features and the op's parameter p, named pname: both nodes, x of rank 2
// or more (shape, in the error, is the one wanted) and of a float dtype,
// heads dividing its last axis. It returns dk; its errors begin with what.
func checkHeads(what string, x, p *G.Node, pname, shape string, heads int) (int, error) {
	if err := checkNodes([]*G.Node{x, p}, "input", pname); err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	s := x.Shape()
	if s.Dims() < 2 {
		return 0, shapeErrorf("%s: input shape %v, want %s", what, s, shape)
	}
	if err := CheckFloat(x.Dtype()); err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	d := s[len(s)-1]
	if heads <= 0 || d%heads != 0 {
		return 0, shapeErrorf("%s: input %q has %d features, which %d heads do not divide", what, x.Name(), d, heads)
	}
	return d / heads, nil
}

// paramOp is what the ops of an input x (..., D) and one or two parameters
// of n values each share besides their kernels (LayerNorm's gain and bias,
// RMSNorm's gain, HeadScale's scale): which value an op computes, its
// arity, type and shape, the sizes its kernel relies on, and its
// gradients. The output is computed from (x, params...), every gradient
// from (x, p, dy), p the first parameter.
type paramOp struct {
	pureOp
	shape  tensor.Shape // of x
	n      int          // each parameter's length
	params int          // the parameters the output takes: 1, or 2
	out    int          // paramOutput, paramGradX or paramGradP + i
	// after: the parameters' gradient ops take dx as a fourth input,
	// read only so that each runs after dx's op, whose pass over the rows
	// left the sums it adds (LayerNorm's). Set on the output op, whose
	// symDiff builds them so, and on them.
	after bool
	buf   *output
}

func (op paramOp) Arity() int {
	if op.out == paramOutput {
		return 1 + op.params
	}
	if op.after && op.out >= paramGradP {
		return 4
	}
	return 3
}

func (op paramOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	x := &G.TensorType{Dims: op.shape.Dims(), Of: a}
	v := &G.TensorType{Dims: 1, Of: a}
	switch op.out {
	case paramOutput:
		if op.params == 2 {
			return hm.NewFnType(x, v, v, x)
		}
		return hm.NewFnType(x, v, x)
	case paramGradX:
		return hm.NewFnType(x, v, x, x)
	}
	if op.after {
		return hm.NewFnType(x, v, x, x, v)
	}
	return hm.NewFnType(x, v, x, v)
}

func (op paramOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	var n [1]int
	return op.outShape(&n).Clone(), nil
}

// outShape is the shape of what op computes, in *n for a parameter's
// gradient: not a copy, for runKernel copies it if it keeps it.
func (op paramOp) outShape(n *[1]int) tensor.Shape {
	if op.out >= paramGradP {
		n[0] = op.n
		return n[:]
	}
	return op.shape
}

// runParam is the Do of an op op whose paramOp is p: it checks the sizes
// the kernel relies on (gorgonia checks ranks, not sizes), x's, then p's,
// then the second parameter's or dy's, and runs op's kernel.
func runParam[K kernel](op K, p paramOp, vals []G.Value) (G.Value, error) {
	if err := checkParamSizes(op, p, vals); err != nil {
		return nil, err
	}
	var n [1]int
	return runKernel(op, vals, p.Arity(), p.outShape(&n), p.buf, false)
}

// checkParamSizes checks the sizes of the first three of vals, the inputs
// of op, whose paramOp is p. Generic in op, so that passing it allocates
// nothing (as an interface it would, at every run).
func checkParamSizes[K fmt.Stringer](op K, p paramOp, vals []G.Value) error {
	third := p.shape.TotalSize()
	if p.out == paramOutput {
		third = p.n
	}
	sizes := [3]int{p.shape.TotalSize(), p.n, third}
	for i, want := range sizes[:min(len(vals), 3)] {
		if d, ok := vals[i].(*tensor.Dense); ok && d != nil && d.Shape().TotalSize() != want {
			return fmt.Errorf("graph: %v: input %d has shape %v, want %d elements", op, i, d.Shape(), want)
		}
	}
	return nil
}

// DiffWRT: the output is differentiable in x and the parameters; gradient
// ops are not differentiated again.
func (op paramOp) DiffWRT(inputs int) []bool { return diffAll(inputs, op.out == paramOutput) }

// symDiff returns dx and each parameter's gradient, the ops at(paramGradX),
// at(paramGradP), ... over (x, p, dy), and dx with after; self names the op
// in errors.
func (op paramOp) symDiff(self fmt.Stringer, at func(out int) kernelOp, inputs G.Nodes, grad *G.Node) (G.Nodes, error) {
	if op.out != paramOutput {
		return nil, fmt.Errorf("graph: %v is not differentiable", self)
	}
	if len(inputs) != 1+op.params {
		return nil, fmt.Errorf("graph: %v: want %d inputs, got %d", self, 1+op.params, len(inputs))
	}
	grads := make(G.Nodes, len(inputs))
	for i := range grads {
		in := G.Nodes{inputs[0], inputs[1], grad}
		if op.after && i > 0 {
			in = append(in, grads[0])
		}
		g, err := apply(at(paramGradX+i), in...)
		if err != nil {
			return nil, err
		}
		grads[i] = g
	}
	return grads, nil
}
