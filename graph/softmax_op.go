package graph

import (
	"fmt"
	"hash"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// softmaxOp is softmax over the last axis as one op, optionally of x plus an
// additive bias: x is (rows..., cols) and bias, if present, is (B, Sq, Sk)
// shared by the H heads of a (B, H, Sq, Sk) x, the Bias of a MaskNode (0
// where visible, -Inf where hidden). Composing softmax from gorgonia's
// reductions and broadcasts costs about 20 ops forward and as many backward
// per attention layer; this is one each way, with the same arithmetic: each
// row's own max is subtracted before exp, an entry of x + bias at -Inf gets
// weight exactly 0, and a row with every entry at -Inf is all 0.
type softmaxOp struct {
	shape  tensor.Shape // of x
	masked bool
	heads  int // H: how many consecutive (Sq, Sk) blocks of x share one bias block
}

func (op softmaxOp) Arity() int {
	if op.masked {
		return 2
	}
	return 1
}

func (op softmaxOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	x := &G.TensorType{Dims: op.shape.Dims(), Of: a}
	if op.masked {
		return hm.NewFnType(x, &G.TensorType{Dims: 3, Of: a}, x)
	}
	return hm.NewFnType(x, x)
}

func (op softmaxOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.shape.Clone(), nil }

func (op softmaxOp) Do(vals ...G.Value) (G.Value, error) {
	cols := op.shape[len(op.shape)-1]
	sq := 1
	if op.masked {
		sq = op.shape[len(op.shape)-2]
	}
	return runKernel(op, vals, op.Arity(), op.shape,
		func(in [][]float64, out []float64) { softmaxRows(in[0], optional(in, 1), out, cols, sq, op.heads) },
		func(in [][]float32, out []float32) { softmaxRows(in[0], optional(in, 1), out, cols, sq, op.heads) })
}

// optional returns in[i], or nil when the op has no such input.
func optional[T float32 | float64](in [][]T, i int) []T {
	if i < len(in) {
		return in[i]
	}
	return nil
}

// softmaxRows writes softmax(x + bias) of every row of x into out. Row r of x
// reads bias row (r / (heads*sq))*sq + r%sq: x is (B, H, Sq, cols) and bias
// (B, Sq, cols). A nil bias adds nothing.
func softmaxRows[T float32 | float64](x, bias, out []T, cols, sq, heads int) {
	row := make([]float64, cols)
	for r := 0; r*cols < len(x); r++ {
		for j, v := range x[r*cols : (r+1)*cols] {
			row[j] = float64(v)
		}
		if bias != nil {
			b := (r/(heads*sq))*sq + r%sq
			for j, v := range bias[b*cols : (b+1)*cols] {
				row[j] += float64(v) // 0 keeps row[j] bit for bit, -Inf hides it
			}
		}
		softmaxRow(row)
		for j, v := range row {
			out[r*cols+j] = T(v)
		}
	}
}

// softmaxRow turns one row of scores into its softmax in place, subtracting
// the row's max first. Entries at -Inf (hidden by a mask) get exactly
// exp(-Inf) = 0. A row whose every entry is -Inf, a query that may see
// nothing, is all 0 rather than 0/0 = NaN: such a row then contributes
// nothing downstream, and its gradient P * (dP - rowsum(P * dP)) is 0 too.
// Softmax, MaskedSoftmax and Attention all use it.
func softmaxRow(s []float64) {
	m := math.Inf(-1)
	for _, v := range s {
		m = math.Max(m, v)
	}
	if math.IsInf(m, -1) {
		clear(s)
		return
	}
	var sum float64
	for j := range s {
		s[j] = math.Exp(s[j] - m)
		sum += s[j]
	}
	for j := range s {
		s[j] /= sum
	}
}

func (op softmaxOp) ReturnsPtr() bool     { return false }
func (op softmaxOp) CallsExtern() bool    { return false }
func (op softmaxOp) OverwritesInput() int { return -1 }

func (op softmaxOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.softmax %v masked=%t heads=%d", op.shape, op.masked, op.heads)
}

func (op softmaxOp) Hashcode() uint32 { return hashOf(op) }

func (op softmaxOp) String() string {
	if op.masked {
		return "qkv.MaskedSoftmax"
	}
	return "qkv.Softmax"
}

// DiffWRT: the mask is a constant input, never differentiated.
func (op softmaxOp) DiffWRT(inputs int) []bool {
	d := make([]bool, inputs)
	d[0] = true
	return d
}

// SymDiff returns dx = y * (dy - sum(dy * y)) along the last axis, computed
// from the output y and the incoming gradient dy by softmaxGradOp.
func (op softmaxOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	dx, err := G.ApplyOp(softmaxGradOp{shape: op.shape}, output, grad)
	if err != nil {
		return nil, err
	}
	grads := make(G.Nodes, len(inputs))
	grads[0] = dx
	return grads, nil
}

// softmaxGradOp is the backward pass of softmaxOp: (y, dy) -> dx.
type softmaxGradOp struct{ shape tensor.Shape }

func (op softmaxGradOp) Arity() int { return 2 }

func (op softmaxGradOp) Type() hm.Type {
	x := &G.TensorType{Dims: op.shape.Dims(), Of: hm.TypeVariable('a')}
	return hm.NewFnType(x, x, x)
}

func (op softmaxGradOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.shape.Clone(), nil
}

func (op softmaxGradOp) Do(vals ...G.Value) (G.Value, error) {
	cols := op.shape[len(op.shape)-1]
	return runKernel(op, vals, 2, op.shape,
		func(in [][]float64, out []float64) { softmaxGradRows(in[0], in[1], out, cols) },
		func(in [][]float32, out []float32) { softmaxGradRows(in[0], in[1], out, cols) })
}

func softmaxGradRows[T float32 | float64](y, dy, out []T, cols int) {
	for r := 0; r*cols < len(y); r++ {
		yr, dyr, dxr := y[r*cols:(r+1)*cols], dy[r*cols:(r+1)*cols], out[r*cols:(r+1)*cols]
		var dot float64
		for j := range yr {
			dot += float64(yr[j]) * float64(dyr[j])
		}
		for j := range yr {
			dxr[j] = T(float64(yr[j]) * (float64(dyr[j]) - dot))
		}
	}
}

func (op softmaxGradOp) ReturnsPtr() bool     { return false }
func (op softmaxGradOp) CallsExtern() bool    { return false }
func (op softmaxGradOp) OverwritesInput() int { return -1 }

func (op softmaxGradOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "qkv.softmaxGrad %v", op.shape) }
func (op softmaxGradOp) Hashcode() uint32      { return hashOf(op) }
func (op softmaxGradOp) String() string        { return "qkv.SoftmaxGrad" }
