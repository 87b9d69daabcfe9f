package graph

import (
	"fmt"
	"hash"
	"math"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/internal/vec"
)

// DefaultRMSNormEps is the eps of RMSNorm and HeadRMSNorm when they are given
// 0: 1e-6, Qwen3's rms_norm_eps (Llama uses 1e-5 or 1e-6, Gemma 3 1e-6).
const DefaultRMSNormEps = 1e-6

// RMSNorm normalises x (..., D) over its last axis by its root mean square
// and applies gain (D):
//
//	y = x / sqrt(mean(x^2) + eps) * gain
//
// as Hugging Face's LlamaRMSNorm and Qwen3RMSNorm (no mean subtracted, no
// bias). eps 0 means DefaultRMSNormEps; otherwise it must be positive and
// finite. Gemma stores its gain as w with y = x̂ (1 + w): pass 1 + w.
//
// Like LayerNorm it is one op forward and one per input backward, computed
// row by row in the data's dtype, tested
// against plain loops, against PyTorch (tools/torchref/variants_ref.py, to
// 1e-12 in float64) and its gradients (x and gain) against central finite
// differences.
func RMSNorm(x, gain *G.Node, eps float64) (*G.Node, error) {
	return rmsNorm("rmsnorm", x, gain, 1, eps)
}

// HeadRMSNorm is QK-norm as Qwen3 and Gemma 3 apply it: RMSNorm over each
// head's dk features of x (..., heads*dk), the queries or the keys after
// their projection, with one gain (dk) shared by every head:
//
//	y[.., h*dk+j] = x[.., h*dk+j] / sqrt(mean_j'(x[.., h*dk+j']^2) + eps) * gain[j]
//
// It is applied before RoPE. The heads lie contiguously in the last axis, so
// the op normalises rows of dk in place: the result is that of reshaping x to
// (N*heads, dk), RMSNorm, and reshaping back, without the two copies (tested
// equal). OLMo 2 normalises the whole projection instead: that is RMSNorm of
// x with a gain (heads*dk), or HeadRMSNorm with heads = 1. Errors as
// RMSNorm's, and heads must divide the last axis.
func HeadRMSNorm(x, gain *G.Node, heads int, eps float64) (*G.Node, error) {
	return rmsNorm("head rmsnorm", x, gain, heads, eps)
}

func rmsNorm(what string, x, gain *G.Node, heads int, eps float64) (*G.Node, error) {
	w, err := checkHeads("graph: "+what, x, gain, "gain", "(..., D)", heads)
	if err != nil {
		return nil, err
	}
	s := x.Shape()
	if !gain.Shape().Eq(tensor.Shape{w}) || gain.Dtype() != x.Dtype() {
		return nil, shapeErrorf("graph: %s: gain %q is %v %v, want %v (%d) to match input %v with %d heads", what, gain.Name(), gain.Dtype(), gain.Shape(), x.Dtype(), w, s, heads)
	}
	if eps == 0 {
		eps = DefaultRMSNormEps
	}
	if !(eps > 0) || math.IsInf(eps, 1) {
		return nil, fmt.Errorf("graph: %s: eps must be positive and finite (0 for the default %g), got %v", what, DefaultRMSNormEps, eps)
	}
	return apply(rmsNormOp{paramOp: paramOp{shape: s.Clone(), n: w, params: 1, out: rmsOutput}, eps: eps}, x, gain)
}

// What an rmsNormOp computes (its paramOp's out): the output from (x,
// gain), or a gradient from (x, gain, dy).
const (
	rmsOutput   = paramOutput
	rmsGradX    = paramGradX
	rmsGradGain = paramGradP
)

// rmsNormOp's paramOp has one parameter, the gain, of n values: the width
// of a normalised row, the last axis or dk.
type rmsNormOp struct {
	paramOp
	eps float64
}

func (op rmsNormOp) withOutput(b *output) G.Op { op.buf = b; return op }

func (op rmsNormOp) Do(vals ...G.Value) (G.Value, error) { return runParam(op, op.paramOp, vals) }

func (op rmsNormOp) run64(in [][]float64, out []float64) { runRMSNorm(op, in, out) }
func (op rmsNormOp) run32(in [][]float32, out []float32) { runRMSNorm(op, in, out) }

// runRMSNorm works row by row on xhat = x * rstd, rstd = 1/sqrt(mean(x^2) + eps):
//
//	y     = xhat * gain
//	dgain = sum over rows of dy * xhat
//	dx    = rstd * (g - xhat * mean(g * xhat)),  g = dy * gain
//
// Blocks of rows go to the cores; dgain is summed per block in float64, then
// the blocks in order, so the result does not depend on how many goroutines
// ran.
func runRMSNorm[T float32 | float64](op rmsNormOp, in [][]T, out []T) {
	j := jobOf[rmsNormJob[T]](op.buf)
	j.op, j.x, j.gain, j.dy, j.out = op, in[0], in[1], nil, out
	if op.out != rmsOutput {
		j.dy = in[2]
	}
	d := len(j.gain)
	j.run(j, len(j.x), d, d, op.out == rmsGradGain, out)
}

// rmsNormJob is runRMSNorm's work, on blocks of rows; its scratch is each
// worker's g, d values, its sums for dgain.
type rmsNormJob[T float32 | float64] struct {
	rowBlocks[T]
	op               rmsNormOp
	x, gain, dy, out []T // dy is nil forward
}

func (j *rmsNormJob[T]) Item(w, blk int) {
	d := len(j.gain)
	g := j.scratch[w]
	for r := blk * j.per; r < min((blk+1)*j.per, len(j.x)/d); r++ {
		xr := j.x[r*d : (r+1)*d]
		rstd := T(1 / math.Sqrt(float64(vec.Dot(xr, xr))/float64(d)+j.op.eps))
		switch j.op.out {
		case rmsOutput:
			o := j.out[r*d : (r+1)*d]
			vec.Lin(o, xr, xr, rstd, 0, 0)
			vec.MulAdd(o, o, j.gain, nil)
		case rmsGradGain:
			vec.Lin(g, xr, xr, rstd, 0, 0)           // xhat = x * rstd
			vec.MulAdd(g, j.dy[r*d:(r+1)*d], g, nil) // dy * xhat
			vec.AddWiden(j.sums[blk*d:(blk+1)*d], g)
		case rmsGradX:
			// dx = rstd g - rstd^3 x mean(g x)
			vec.MulAdd(g, j.dy[r*d:(r+1)*d], j.gain, nil)
			gx := vec.Dot(g, xr) / T(d)
			vec.Lin(j.out[r*d:(r+1)*d], g, xr, rstd, -rstd*rstd*rstd*gx, 0)
		}
	}
}

func (op rmsNormOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.rmsnorm %v %d %v %d", op.shape, op.n, op.eps, op.out)
}
func (op rmsNormOp) Hashcode() uint32 { return hashOf(op) }

func (op rmsNormOp) String() string {
	return [...]string{"qkv.RMSNorm", "qkv.RMSNormGradX", "qkv.RMSNormGradGain"}[op.out]
}

// SymDiff returns dx and dgain as rmsNormOps over (x, gain, dy).
func (op rmsNormOp) SymDiff(inputs G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	return op.symDiff(op, func(out int) kernelOp { g := op; g.out = out; return g }, inputs, grad)
}
