package graph

import (
	"fmt"
	"hash"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/internal/gemm/par"
	"github.com/qkv-dev/qkv/internal/vec"
)

// LayerNorm normalises x (..., D) over its last axis and applies gain and
// bias (D):
//
//	y = (x - mean(x)) / sqrt(var(x) + eps) * gain + bias
//
// with the biased variance, as PyTorch's LayerNorm; a nil bias leaves it
// out (y = xhat * gain, nanoGPT's LayerNorm(bias=False)), so that a model
// without norm biases holds no tensor that would stay zero. It is one op forward and
// one per input backward, computed row by row, instead of about ten
// reductions and broadcasts each way. The tests check it, in float64 and
// float32 and for 2-D and 3-D inputs, against the formula computed row by row
// in plain loops, and its gradients (x, gain, bias) against central finite
// differences in float64.
func LayerNorm(x, gain, bias *G.Node, eps float64) (*G.Node, error) {
	params := []*G.Node{gain, bias}
	if bias == nil {
		params = params[:1]
	}
	if err := checkNodes(append([]*G.Node{x}, params...), "input", "gain", "bias"); err != nil {
		return nil, fmt.Errorf("graph: layernorm: %w", err)
	}
	s := x.Shape()
	if s.Dims() < 2 {
		return nil, shapeErrorf("graph: layernorm: input shape %v, want (..., D)", s)
	}
	d := s[len(s)-1]
	for _, p := range params {
		if !p.Shape().Eq(tensor.Shape{d}) || p.Dtype() != x.Dtype() {
			return nil, shapeErrorf("graph: layernorm: %q is %v %v, want %v (%d) to match input %v", p.Name(), p.Dtype(), p.Shape(), x.Dtype(), d, s)
		}
	}
	if err := CheckFloat(x.Dtype()); err != nil {
		return nil, fmt.Errorf("graph: layernorm: %w", err)
	}
	if !(eps > 0) || math.IsInf(eps, 1) {
		return nil, fmt.Errorf("graph: layernorm: eps must be positive and finite, got %v", eps)
	}
	op := layerNormOp{shape: s.Clone(), eps: eps, out: lnOutput, noBias: bias == nil}
	return apply(op, append([]*G.Node{x}, params...)...)
}

// What a layerNormOp computes: the output from (x, gain, bias), or a
// gradient from (x, gain, dy).
const (
	lnOutput = iota
	lnGradX
	lnGradGain
	lnGradBias
)

type layerNormOp struct {
	shape tensor.Shape // of x
	eps   float64
	out   int
	// noBias: the output has no bias input (x, gain); the gradient ops
	// take (x, gain, dy) either way, and there is no bias gradient.
	noBias bool
	buf    *output
}

func (op layerNormOp) withOutput(b *output) G.Op { op.buf = b; return op }

func (op layerNormOp) Arity() int {
	if op.out == lnOutput && op.noBias {
		return 2
	}
	return 3
}

func (op layerNormOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	x := &G.TensorType{Dims: op.shape.Dims(), Of: a}
	v := &G.TensorType{Dims: 1, Of: a}
	switch op.out {
	case lnOutput:
		if op.noBias {
			return hm.NewFnType(x, v, x)
		}
		return hm.NewFnType(x, v, v, x)
	case lnGradX:
		return hm.NewFnType(x, v, x, x)
	}
	return hm.NewFnType(x, v, x, v)
}

func (op layerNormOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	if op.out == lnGradGain || op.out == lnGradBias {
		return tensor.Shape{op.shape[len(op.shape)-1]}, nil
	}
	return op.shape.Clone(), nil
}

func (op layerNormOp) Do(vals ...G.Value) (G.Value, error) {
	shape := op.shape // not InferShape's copy: runKernel copies it if it keeps it
	if op.out == lnGradGain || op.out == lnGradBias {
		shape = op.shape[len(op.shape)-1:]
	}
	return runKernel(op, vals, op.Arity(), shape, op.buf, false)
}

func (op layerNormOp) run64(in [][]float64, out []float64) { runLayerNorm(op, in, out) }
func (op layerNormOp) run32(in [][]float32, out []float32) { runLayerNorm(op, in, out) }

// runLayerNorm works row by row on xhat = (x - mean) * rstd,
// rstd = 1/sqrt(var + eps):
//
//	y     = xhat * gain + bias
//	dbias = sum over rows of dy,  dgain = sum over rows of dy * xhat
//	dx    = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dy * gain
//
// A row is computed in the data's dtype, on internal/vec's row operations.
// Blocks of rows go to the cores; the sums over rows for dgain and dbias
// are summed per block in float64, then the blocks in order, so the result
// does not depend on how many goroutines ran.
func runLayerNorm[T float32 | float64](op layerNormOp, in [][]T, out []T) {
	j := jobOf[layerNormJob[T]](op.buf)
	j.op, j.x, j.gain, j.third, j.out = op, in[0], in[1], nil, out
	if len(in) > 2 {
		j.third = in[2]
	}
	d := len(j.gain)
	rows := len(j.x) / d
	j.per = max(1, layerNormBlock/d)
	blocks := (rows + j.per - 1) / j.per
	if op.out == lnGradGain || op.out == lnGradBias {
		j.sums = sized(j.sums, blocks*d)
	}
	workers := par.WorkersFor(len(j.x))
	j.scratch = perWorker(j.scratch, workers, 2*d)
	par.Run(blocks, workers, j)
	if op.out == lnGradGain || op.out == lnGradBias {
		sumBlocks(j.sums, out)
	}
}

// sumBlocks sets out (d values) to the sum of the blocks of d in sums,
// added in block order, so that the result does not depend on which
// goroutine computed which block.
func sumBlocks[T float32 | float64](sums []float64, out []T) {
	d := len(out)
	for c := range out {
		var total float64
		for blk := 0; blk*d < len(sums); blk++ {
			total += sums[blk*d+c]
		}
		out[c] = T(total)
	}
}

// layerNormJob is runLayerNorm's work: item blk is the block of rows
// [blk per, (blk+1) per).
type layerNormJob[T float32 | float64] struct {
	op                  layerNormOp
	x, gain, third, out []T // third: the bias (nil without one), or dy for gradients
	per                 int
	sums                []float64 // each block's sum over its rows, for dgain and dbias
	scratch             [][]T     // each worker's xhat and g, d values each
}

func (j *layerNormJob[T]) Item(w, blk int) {
	d := len(j.gain)
	xhat, g := j.scratch[w][:d], j.scratch[w][d:]
	for r := blk * j.per; r < min((blk+1)*j.per, len(j.x)/d); r++ {
		xr := j.x[r*d : (r+1)*d]
		switch j.op.out {
		case lnOutput:
			normalise(xr, xhat, j.op.eps)
			vec.MulAdd(j.out[r*d:(r+1)*d], xhat, j.gain, j.third)
		case lnGradBias:
			for c, dy := range j.third[r*d : (r+1)*d] {
				j.sums[blk*d+c] += float64(dy)
			}
		case lnGradGain:
			normalise(xr, xhat, j.op.eps)
			for c, dy := range j.third[r*d : (r+1)*d] {
				j.sums[blk*d+c] += float64(dy * xhat[c])
			}
		case lnGradX:
			rstd := normalise(xr, xhat, j.op.eps)
			vec.MulAdd(g, j.third[r*d:(r+1)*d], j.gain, nil)
			gMean, gxMean := vec.Sum(g)/T(d), vec.Dot(g, xhat)/T(d)
			vec.Lin(j.out[r*d:(r+1)*d], g, xhat, rstd, -rstd*gxMean, -rstd*gMean)
		}
	}
}

// layerNormBlock is about how many elements a block of rows holds.
const layerNormBlock = 1 << 12

// normalise sets xhat = (x - mean(x)) * rstd and returns
// rstd = 1/sqrt(var(x) + eps), with the biased variance; the mean is
// subtracted before squaring, so no large mean cancels.
func normalise[T float32 | float64](x, xhat []T, eps float64) T {
	d := T(len(x))
	vec.Lin(xhat, x, x, 1, 0, -vec.Sum(x)/d)
	rstd := T(1 / math.Sqrt(float64(vec.Dot(xhat, xhat)/d)+eps))
	vec.Lin(xhat, xhat, xhat, rstd, 0, 0)
	return rstd
}

func (op layerNormOp) ReturnsPtr() bool     { return false }
func (op layerNormOp) CallsExtern() bool    { return false }
func (op layerNormOp) OverwritesInput() int { return -1 }

func (op layerNormOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.layernorm %v %v %d %t", op.shape, op.eps, op.out, op.noBias)
}
func (op layerNormOp) Hashcode() uint32 { return hashOf(op) }

func (op layerNormOp) String() string {
	return [...]string{"qkv.LayerNorm", "qkv.LayerNormGradX", "qkv.LayerNormGradGain", "qkv.LayerNormGradBias"}[op.out]
}

// DiffWRT: the output is differentiable in x, gain and bias; gradient ops are
// not differentiated again.
func (op layerNormOp) DiffWRT(inputs int) []bool {
	return []bool{op.out == lnOutput, op.out == lnOutput, op.out == lnOutput}[:inputs]
}

// SymDiff returns dx, dgain and, with a bias, dbias as layerNormOps over
// (x, gain, dy).
func (op layerNormOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	if op.out != lnOutput {
		return nil, fmt.Errorf("graph: %v is not differentiable", op)
	}
	grads := make(G.Nodes, len(inputs))
	for i, which := range []int{lnGradX, lnGradGain, lnGradBias}[:len(inputs)] {
		g, err := apply(layerNormOp{shape: op.shape, eps: op.eps, out: which, noBias: op.noBias}, inputs[0], inputs[1], grad)
		if err != nil {
			return nil, err
		}
		grads[i] = g
	}
	return grads, nil
}
