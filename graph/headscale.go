package graph

import (
	"fmt"
	"hash"

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
	if _, err := checkHeads(what, x, scale, "scale", "(..., heads*dk)", heads); err != nil {
		return nil, err
	}
	s := x.Shape()
	if !scale.Shape().Eq(tensor.Shape{heads}) || scale.Dtype() != x.Dtype() {
		return nil, shapeErrorf("%s: scale %q is %v %v, want %v (%d), one factor per head", what, scale.Name(), scale.Dtype(), scale.Shape(), x.Dtype(), heads)
	}
	return apply(headScaleOp{paramOp{shape: s.Clone(), n: heads, params: 1, out: headScaleOutput}}, x, scale)
}

// What a headScaleOp computes (its paramOp's out): the output from (x,
// scale), or a gradient from (x, scale, dy).
const (
	headScaleOutput    = paramOutput
	headScaleGradX     = paramGradX
	headScaleGradScale = paramGradP
)

// headScaleOp's paramOp has one parameter, the scale, of n = heads values.
type headScaleOp struct{ paramOp }

func (op headScaleOp) withOutput(b *output) G.Op { op.buf = b; return op }

func (op headScaleOp) Do(vals ...G.Value) (G.Value, error) { return runParam(op, op.paramOp, vals) }

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
	heads := op.n
	dk := op.shape[len(op.shape)-1] / heads
	switch op.out {
	case headScaleOutput, headScaleGradX:
		src := x
		if op.out == headScaleGradX {
			src = in[2]
		}
		for r := 0; r*dk < len(src); r++ {
			s := scale[r%heads]
			for j, v := range src[r*dk : (r+1)*dk] {
				out[r*dk+j] = v * s
			}
		}
	case headScaleGradScale:
		dy := in[2]
		for h := range out {
			var sum float64
			for r := h; r*dk < len(x); r += heads {
				for j := r * dk; j < (r+1)*dk; j++ {
					sum += float64(dy[j]) * float64(x[j])
				}
			}
			out[h] = T(sum)
		}
	}
}

func (op headScaleOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.headscale %v %d %d", op.shape, op.n, op.out)
}
func (op headScaleOp) Hashcode() uint32 { return hashOf(op) }

func (op headScaleOp) String() string {
	return [...]string{"qkv.HeadScale", "qkv.HeadScaleGradX", "qkv.HeadScaleGradScale"}[op.out]
}

// SymDiff returns dx and dscale as headScaleOps over (x, scale, dy).
func (op headScaleOp) SymDiff(inputs G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	return op.symDiff(op, func(out int) kernelOp { g := op; g.out = out; return g }, inputs, grad)
}
