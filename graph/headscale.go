package graph

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// HeadScale multiplies each head's features of x (..., heads*dk) by that
// head's factor in scale (heads):
//
//	y[.., h*dk+j] = x[.., h*dk+j] * scale[h]
//
// Applied to the queries, it gives each head a learnable temperature of its
// scores: (scale_h q_i) · k_j / sqrt(dk) = scale_h (q_i · k_j / sqrt(dk)),
// before any score modifier (a softcap then caps the tempered score). It is
// differentiable in x and in scale, whose gradient sums dy * x over the
// head's features of every row, in float64 and in row order, so that it is
// the same bits from run to run. Errors name what is wrong: nodes, ranks,
// heads that do not divide the last axis, a scale of another size or dtype.
func HeadScale(x, scale *G.Node, heads int) (*G.Node, error) {
	const what = "graph: head scale"
	if err := checkNodes([]*G.Node{x, scale}, "input", "scale"); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	s := x.Shape()
	if s.Dims() < 2 {
		return nil, shapeErrorf("%s: input shape %v, want (..., heads*dk)", what, s)
	}
	if err := CheckFloat(x.Dtype()); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	d := s[len(s)-1]
	if heads <= 0 || d%heads != 0 {
		return nil, shapeErrorf("%s: input %q has %d features, which %d heads do not divide", what, x.Name(), d, heads)
	}
	if !scale.Shape().Eq(tensor.Shape{heads}) || scale.Dtype() != x.Dtype() {
		return nil, shapeErrorf("%s: scale %q is %v %v, want %v (%d), one factor per head", what, scale.Name(), scale.Dtype(), scale.Shape(), x.Dtype(), heads)
	}
	return apply(headScaleOp{shape: s.Clone(), heads: heads, out: headScaleOutput}, x, scale)
}

// What a headScaleOp computes: the output from (x, scale), or a gradient
// from (x, scale, dy).
const (
	headScaleOutput = iota
	headScaleGradX
	headScaleGradScale
)

type headScaleOp struct {
	shape tensor.Shape // of x
	heads int
	out   int
	buf   *output
}

func (op headScaleOp) withOutput(b *output) G.Op { op.buf = b; return op }

func (op headScaleOp) Arity() int {
	if op.out == headScaleOutput {
		return 2
	}
	return 3
}

func (op headScaleOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	x := &G.TensorType{Dims: op.shape.Dims(), Of: a}
	v := &G.TensorType{Dims: 1, Of: a}
	switch op.out {
	case headScaleOutput:
		return hm.NewFnType(x, v, x)
	case headScaleGradX:
		return hm.NewFnType(x, v, x, x)
	}
	return hm.NewFnType(x, v, x, v)
}

func (op headScaleOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	if op.out == headScaleGradScale {
		return tensor.Shape{op.heads}, nil
	}
	return op.shape.Clone(), nil
}

func (op headScaleOp) Do(vals ...G.Value) (G.Value, error) {
	shape := op.shape // not InferShape's copy: runKernel copies it if it keeps it
	var heads [1]int
	if op.out == headScaleGradScale {
		heads[0] = op.heads
		shape = heads[:]
	}
	// Sizes the kernel relies on: gorgonia checks ranks, not sizes.
	sizes := [3]int{op.shape.TotalSize(), op.heads, op.shape.TotalSize()}
	for i, want := range sizes[:min(len(vals), 3)] {
		if d, ok := vals[i].(*tensor.Dense); ok && d != nil && d.Shape().TotalSize() != want {
			return nil, fmt.Errorf("graph: %v: input %d has shape %v, want %d elements", op, i, d.Shape(), want)
		}
	}
	return runKernel(op, vals, op.Arity(), shape, op.buf, false)
}

func (op headScaleOp) run64(in [][]float64, out []float64) { runHeadScale(op, in, out) }
func (op headScaleOp) run32(in [][]float32, out []float32) { runHeadScale(op, in, out) }

// runHeadScale walks x in runs of dk features, run r belonging to head
// r % heads:
//
//	y      = x * scale[h]
//	dx     = dy * scale[h]
//	dscale = sum over the runs of head h of dy · x
func runHeadScale[T float32 | float64](op headScaleOp, in [][]T, out []T) {
	x, scale := in[0], in[1]
	dk := op.shape[len(op.shape)-1] / op.heads
	switch op.out {
	case headScaleOutput, headScaleGradX:
		src := x
		if op.out == headScaleGradX {
			src = in[2]
		}
		for r := 0; r*dk < len(src); r++ {
			s := scale[r%op.heads]
			for j, v := range src[r*dk : (r+1)*dk] {
				out[r*dk+j] = v * s
			}
		}
	case headScaleGradScale:
		dy := in[2]
		for h := range out {
			var sum float64
			for r := h; r*dk < len(x); r += op.heads {
				for j := r * dk; j < (r+1)*dk; j++ {
					sum += float64(dy[j]) * float64(x[j])
				}
			}
			out[h] = T(sum)
		}
	}
}

func (op headScaleOp) ReturnsPtr() bool     { return false }
func (op headScaleOp) CallsExtern() bool    { return false }
func (op headScaleOp) OverwritesInput() int { return -1 }

func (op headScaleOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.headscale %v %d %d", op.shape, op.heads, op.out)
}
func (op headScaleOp) Hashcode() uint32 { return hashOf(op) }

func (op headScaleOp) String() string {
	return [...]string{"qkv.HeadScale", "qkv.HeadScaleGradX", "qkv.HeadScaleGradScale"}[op.out]
}

// DiffWRT: the output is differentiable in x and scale; gradient ops are
// not differentiated again.
func (op headScaleOp) DiffWRT(inputs int) []bool {
	d := op.out == headScaleOutput
	return []bool{d, d, d}[:inputs]
}

// SymDiff returns dx and dscale as headScaleOps over (x, scale, dy).
func (op headScaleOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	if op.out != headScaleOutput {
		return nil, fmt.Errorf("graph: %v is not differentiable", op)
	}
	if len(inputs) != 2 {
		return nil, fmt.Errorf("graph: %v: want 2 inputs, got %d", op, len(inputs))
	}
	grads := make(G.Nodes, 2)
	for i, which := range []int{headScaleGradX, headScaleGradScale} {
		g, err := apply(headScaleOp{shape: op.shape, heads: op.heads, out: which}, inputs[0], inputs[1], grad)
		if err != nil {
			return nil, err
		}
		grads[i] = g
	}
	return grads, nil
}
