package graph

import (
	"fmt"
	"hash"
	"math"
	"unsafe"

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
	op := layerNormOp{paramOp: paramOp{shape: s.Clone(), n: d, params: len(params), out: lnOutput, after: true}, eps: eps}
	return apply(op, append([]*G.Node{x}, params...)...)
}

// What a layerNormOp computes (its paramOp's out): the output from (x,
// gain, bias), or a gradient from (x, gain, dy).
const (
	lnOutput   = paramOutput
	lnGradX    = paramGradX
	lnGradGain = paramGradP
	lnGradBias = paramGradP + 1
)

// layerNormOp's paramOp has the gain and the bias, of n = D values, as its
// parameters, or the gain alone (params 1) for a LayerNorm without a bias;
// the gradient ops take (x, gain, dy) either way, and without a bias there
// is no bias gradient.
type layerNormOp struct {
	paramOp
	eps float64
	// sums, on the gradient ops, is what dx's op leaves for the others.
	sums *lnSums
}

// lnSums are the sums over rows, each block's, of dy·xhat and of dy that
// dx's op adds up in its pass over x and dy, for the gain's and the bias's
// gradient ops (paramOp.after), which would otherwise each read x and dy
// again: in the nanoGPT preset's step, a LayerNorm's three gradient passes
// over rows that had left the cache. They are the sums those ops compute
// themselves (the same rows, blocks and order), so the same bits.
type lnSums struct {
	gain, bias []float64 // bias nil without a bias
	// x and dy are where the inputs the sums are of lie, n their length:
	// an op whose inputs are elsewhere computes its gradient itself.
	x, dy unsafe.Pointer
	n     int
}

// of reports whether s holds the sums of x and dy.
func (s *lnSums) of(x, dy unsafe.Pointer, n int) bool {
	return s.x == x && s.dy == dy && s.n == n
}

func (op layerNormOp) withOutput(b *output) G.Op { op.buf = b; return op }

func (op layerNormOp) Do(vals ...G.Value) (G.Value, error) { return runParam(op, op.paramOp, vals) }

func (op layerNormOp) run64(in [][]float64, out []float64) { runLayerNorm(op, in, out, nil) }
func (op layerNormOp) run32(in [][]float32, out []float32) { runLayerNorm(op, in, out, nil) }

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
// does not depend on how many goroutines ran. addend, where not nil, is
// added to dx row by row (normAddOp).
func runLayerNorm[T float32 | float64](op layerNormOp, in [][]T, out, addend []T) {
	j := jobOf[layerNormJob[T]](op.buf)
	j.op, j.x, j.gain, j.third, j.out, j.addend = op, in[0], in[1], nil, out, addend
	if len(in) > 2 {
		j.third = in[2]
	}
	d := len(j.gain)
	s := op.sums
	if s == nil {
		j.run(j, len(j.x), d, 2*d, op.out == lnGradGain || op.out == lnGradBias, out)
		return
	}
	x, dy := unsafe.Pointer(unsafe.SliceData(j.x)), unsafe.Pointer(unsafe.SliceData(j.third))
	switch {
	case op.out == lnGradX:
		// The pass over the rows adds up the parameters' sums too.
		blocks := rowBlockCount(len(j.x), d)
		s.gain = sized(s.gain, blocks*d)
		if op.params == 2 {
			s.bias = sized(s.bias, blocks*d)
		}
		s.x, s.dy, s.n = nil, nil, 0
		j.run(j, len(j.x), d, 2*d, false, out)
		s.x, s.dy, s.n = x, dy, len(j.x)
	case s.of(x, dy, len(j.x)) && op.out == lnGradGain:
		sumBlocks(s.gain, out)
	case s.of(x, dy, len(j.x)) && op.out == lnGradBias:
		sumBlocks(s.bias, out)
	default:
		j.run(j, len(j.x), d, 2*d, true, out)
	}
}

// rowBlocks is the part of a row-by-row job (LayerNorm's, RMSNorm's) that
// splits the rows into blocks: item blk is the block of rows [blk per,
// (blk+1) per).
type rowBlocks[T float32 | float64] struct {
	per     int
	sums    []float64 // each block's sums over its rows, for a parameter's gradient
	scratch [][]T     // each worker's scratch
}

// run has job, whose rowBlocks b is, work on n values in rows of d, in
// blocks of about layerNormBlock values over the cores, each worker with
// scratch values of its own. With sum, the op computes a parameter's
// gradient: each block sums its rows into b.sums, which run then adds
// into out in block order, so that the result does not depend on how many
// goroutines ran.
func (b *rowBlocks[T]) run(job par.Job, n, d, scratch int, sum bool, out []T) {
	b.per = rowsPerBlock(d)
	blocks := rowBlockCount(n, d)
	if sum {
		b.sums = sized(b.sums, blocks*d)
	}
	workers := par.WorkersFor(n)
	b.scratch = perWorker(b.scratch, workers, scratch)
	par.Run(blocks, workers, job)
	if sum {
		sumBlocks(b.sums, out)
	}
}

// rowsPerBlock is the number of rows of d values in a block of
// rowBlocks.run, and rowBlockCount the number of blocks it cuts n values
// into.
func rowsPerBlock(d int) int { return max(1, layerNormBlock/d) }

func rowBlockCount(n, d int) int {
	per := rowsPerBlock(d)
	return (n/d + per - 1) / per
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

// layerNormJob is runLayerNorm's work, on blocks of rows; its scratch is
// each worker's xhat and g, d values each, its sums for dgain or dbias.
type layerNormJob[T float32 | float64] struct {
	rowBlocks[T]
	op                  layerNormOp
	x, gain, third, out []T // third: the bias (nil without one), or dy for gradients
	addend              []T // added to dx, or nil
}

func (j *layerNormJob[T]) Item(w, blk int) {
	d := len(j.gain)
	xhat, g := j.scratch[w][:d], j.scratch[w][d:]
	for r := blk * j.per; r < min((blk+1)*j.per, len(j.x)/d); r++ {
		xr := j.x[r*d : (r+1)*d]
		switch j.op.out {
		case lnOutput:
			vec.Normalise(xr, xhat, j.op.eps)
			vec.MulAdd(j.out[r*d:(r+1)*d], xhat, j.gain, j.third)
		case lnGradBias:
			vec.AddWiden(j.sums[blk*d:(blk+1)*d], j.third[r*d:(r+1)*d])
		case lnGradGain:
			vec.Normalise(xr, xhat, j.op.eps)
			vec.MulAdd(g, j.third[r*d:(r+1)*d], xhat, nil) // dy * xhat
			vec.AddWiden(j.sums[blk*d:(blk+1)*d], g)
		case lnGradX:
			rstd := vec.Normalise(xr, xhat, j.op.eps)
			// dx, plus the addend as addOp adds it, and the parameters'
			// sums as lnGradGain and lnGradBias make them.
			var addend []T
			if j.addend != nil {
				addend = j.addend[r*d : (r+1)*d]
			}
			var sumGain, sumBias []float64
			if s := j.op.sums; s != nil {
				sumGain = s.gain[blk*d : (blk+1)*d]
				if s.bias != nil {
					sumBias = s.bias[blk*d : (blk+1)*d]
				}
			}
			vec.NormGrad(j.out[r*d:(r+1)*d], xhat, j.third[r*d:(r+1)*d], j.gain, g, rstd, addend, sumGain, sumBias)
		}
	}
}

// layerNormBlock is about how many elements a block of rows holds.
const layerNormBlock = 1 << 12

func (op layerNormOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.layernorm %v %v %d %t", op.shape, op.eps, op.out, op.params == 1)
}
func (op layerNormOp) Hashcode() uint32 { return hashOf(op) }

func (op layerNormOp) String() string {
	return [...]string{"qkv.LayerNorm", "qkv.LayerNormGradX", "qkv.LayerNormGradGain", "qkv.LayerNormGradBias"}[op.out]
}

// SymDiff returns dx, dgain and, with a bias, dbias as layerNormOps over
// (x, gain, dy).
func (op layerNormOp) SymDiff(inputs G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	sums := new(lnSums)
	return op.symDiff(op, func(out int) kernelOp { g := op; g.out, g.sums = out, sums; return g }, inputs, grad)
}
