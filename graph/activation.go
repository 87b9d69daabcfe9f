package graph

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/internal/gemm/par"
	"github.com/qkv-dev/qkv/internal/vec"
)

// GELU returns the Gaussian error linear unit of x in its tanh form,
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as PyTorch's
// gelu(approximate="tanh") and GPT-2 compute it. gorgonia has no erf op, and
// the tanh form differs from the exact one by less than 1e-3.
//
// It is one op each way instead of the nine elementwise gorgonia ops the
// formula takes (each of which allocates its result); the gradient
// recomputes the tanh from x rather than keeping it.
func GELU(x *G.Node) (*G.Node, error) { return activation(x, actGELU) }

// ReLU returns max(x, 0) elementwise. Its gradient is 1 where x > 0 and 0
// elsewhere, 0 included, as PyTorch's.
func ReLU(x *G.Node) (*G.Node, error) { return activation(x, actReLU) }

// The activations an activationOp computes.
const (
	actGELU = iota
	actReLU
)

var actNames = [...]string{actGELU: "gelu", actReLU: "relu"}

func activation(x *G.Node, kind int) (*G.Node, error) {
	if err := CheckNode(x, "input"); err != nil {
		return nil, fmt.Errorf("graph: %s: %w", actNames[kind], err)
	}
	if err := CheckFloat(x.Dtype()); err != nil {
		return nil, fmt.Errorf("graph: %s: %w", actNames[kind], err)
	}
	return apply(activationOp{kind: kind, shape: x.Shape().Clone()}, x)
}

// activationOp computes f(x), or with grad, dx = dy f'(x) from (x, dy).
type activationOp struct {
	pureOp
	kind  int
	shape tensor.Shape
	grad  bool
	buf   *output
}

func (op activationOp) withOutput(b *output) G.Op { op.buf = b; return op }

func (op activationOp) Arity() int {
	if op.grad {
		return 2
	}
	return 1
}

func (op activationOp) Type() hm.Type {
	in := []int{op.shape.Dims()}
	if op.grad {
		in = append(in, op.shape.Dims())
	}
	return opType(in, op.shape.Dims())
}

func (op activationOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.shape.Clone(), nil }

func (op activationOp) Do(vals ...G.Value) (G.Value, error) {
	return runKernel(op, vals, op.Arity(), op.shape, op.buf, false)
}

func (op activationOp) run64(in [][]float64, out []float64) { runActivation(op, in, out) }
func (op activationOp) run32(in [][]float32, out []float32) { runActivation(op, in, out) }

// activationChunk is the number of elements in an item of the work.
const activationChunk = 1 << 13

// runActivation works elementwise in chunks over the cores, on
// internal/vec's vector kernels; float64 GELU's (GELU64) give the bits of
// the formula computed with math.Tanh.
func runActivation[T float32 | float64](op activationOp, in [][]T, out []T) {
	j := jobOf[activationJob[T]](op.buf)
	j.op, j.x, j.y, j.dy = op, in[0], out, nil
	if op.grad {
		j.dy = in[1]
	}
	par.Run((len(out)+activationChunk-1)/activationChunk, par.WorkersFor(len(out)), j)
}

// activationJob is runActivation's work: item c is the chunk of elements
// [c activationChunk, (c+1) activationChunk).
type activationJob[T float32 | float64] struct {
	op       activationOp
	x, y, dy []T // dy is nil forward
}

func (j *activationJob[T]) Item(_, c int) {
	lo, hi := c*activationChunk, min((c+1)*activationChunk, len(j.y))
	x, y := j.x[lo:hi], j.y[lo:hi]
	var dy []T
	if j.dy != nil {
		dy = j.dy[lo:hi]
	}
	switch j.op.kind {
	case actReLU:
		if dy != nil {
			vec.ReLUGrad(y, x, dy)
		} else {
			vec.ReLU(y, x)
		}
	case actGELU:
		if y32, ok := any(y).([]float32); ok {
			if dy != nil {
				vec.GELUGrad(y32, any(x).([]float32), any(dy).([]float32))
			} else {
				vec.GELU(y32, any(x).([]float32))
			}
			return
		}
		y64, x64 := any(y).([]float64), any(x).([]float64)
		if dy != nil {
			vec.GELUGrad64(y64, x64, any(dy).([]float64))
		} else {
			vec.GELU64(y64, x64)
		}
	}
}

func (op activationOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.activation %d %v %t", op.kind, op.shape, op.grad)
}
func (op activationOp) Hashcode() uint32 { return hashOf(op) }

func (op activationOp) String() string { return gradName("qkv."+actNames[op.kind], op.grad) }

// DiffWRT: f(x) is differentiable in x; the gradient op is not
// differentiated again.
func (op activationOp) DiffWRT(inputs int) []bool { return diffAll(inputs, !op.grad) }

// SymDiff returns dx = dy f'(x) as an activationOp over (x, dy).
func (op activationOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	if op.grad {
		return nil, fmt.Errorf("graph: %v is not differentiable", op)
	}
	g := op
	g.grad = true
	dx, err := apply(g, inputs[0], grad)
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx}, nil
}
