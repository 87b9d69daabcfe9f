package graph

import (
	"fmt"
	"hash"
	"hash/fnv"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// softmaxOp is softmax over the last axis as one op, optionally with an
// additive mask bias: x is (rows..., cols) and bias, if present, is
// (B, Sq, Sk) shared by the H heads of a (B, H, Sq, Sk) x. Composing softmax
// from gorgonia's reductions and broadcasts costs about 20 ops forward and as
// many backward per attention layer; this is one each way, with the same
// arithmetic: each row's own max is subtracted before exp, hidden entries
// (bias < 0) get weight exactly 0, and a row with nothing visible is all 0.
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
	if len(vals) != op.Arity() {
		return nil, fmt.Errorf("graph: softmax: want %d inputs, got %d", op.Arity(), len(vals))
	}
	x, ok := vals[0].(*tensor.Dense)
	if !ok || !x.Shape().Eq(op.shape) {
		return nil, fmt.Errorf("graph: softmax: input %v, want a dense tensor of shape %v", vals[0].Shape(), op.shape)
	}
	out := tensor.New(tensor.Of(x.Dtype()), tensor.WithShape(op.shape.Clone()...))
	cols := op.shape[len(op.shape)-1]
	sq := 1
	if op.masked {
		sq = op.shape[len(op.shape)-2]
	}
	var bias any
	if op.masked {
		b, ok := vals[1].(*tensor.Dense)
		if !ok || b.Dtype() != x.Dtype() {
			return nil, fmt.Errorf("graph: softmax: mask bias must be a dense %v tensor", x.Dtype())
		}
		bias = b.Data()
	}
	switch xs := x.Data().(type) {
	case []float64:
		bs, _ := bias.([]float64)
		softmaxRows(xs, bs, out.Data().([]float64), cols, sq, op.heads)
	case []float32:
		bs, _ := bias.([]float32)
		softmaxRows(xs, bs, out.Data().([]float32), cols, sq, op.heads)
	default:
		return nil, fmt.Errorf("graph: softmax: dtype %v is not supported", x.Dtype())
	}
	return out, nil
}

// softmaxRows writes softmax(x + bias) of every row of x into out. Row r of x
// reads bias row (r / (heads*sq))*sq + r%sq: x is (B, H, Sq, cols) and bias
// (B, Sq, cols). A nil bias hides nothing.
func softmaxRows[T float32 | float64](x, bias, out []T, cols, sq, heads int) {
	for r := 0; r*cols < len(x); r++ {
		xr, yr := x[r*cols:(r+1)*cols], out[r*cols:(r+1)*cols]
		var br []T
		if bias != nil {
			b := (r/(heads*sq))*sq + r%sq
			br = bias[b*cols : (b+1)*cols]
		}
		m := math.Inf(-1)
		for j, v := range xr {
			if br != nil && br[j] < 0 {
				continue
			}
			m = math.Max(m, float64(v))
		}
		if math.IsInf(m, -1) { // nothing visible: zeros, not 0/0
			clear(yr)
			continue
		}
		var sum float64
		for j, v := range xr {
			if br != nil && br[j] < 0 {
				yr[j] = 0
				continue
			}
			e := math.Exp(float64(v) - m)
			yr[j] = T(e)
			sum += e
		}
		for j := range yr {
			yr[j] = T(float64(yr[j]) / sum)
		}
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

// DiffWRT: the mask bias is a constant input, never differentiated.
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
	if len(vals) != 2 {
		return nil, fmt.Errorf("graph: softmax gradient: want 2 inputs, got %d", len(vals))
	}
	y, ok1 := vals[0].(*tensor.Dense)
	dy, ok2 := vals[1].(*tensor.Dense)
	if !ok1 || !ok2 || y.Dtype() != dy.Dtype() || y.Shape().TotalSize() != dy.Shape().TotalSize() {
		return nil, fmt.Errorf("graph: softmax gradient: inputs %v and %v do not match", vals[0].Shape(), vals[1].Shape())
	}
	out := tensor.New(tensor.Of(y.Dtype()), tensor.WithShape(op.shape.Clone()...))
	cols := op.shape[len(op.shape)-1]
	switch ys := y.Data().(type) {
	case []float64:
		softmaxGradRows(ys, dy.Data().([]float64), out.Data().([]float64), cols)
	case []float32:
		softmaxGradRows(ys, dy.Data().([]float32), out.Data().([]float32), cols)
	default:
		return nil, fmt.Errorf("graph: softmax gradient: dtype %v is not supported", y.Dtype())
	}
	return out, nil
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

// hashOf hashes what an op writes with WriteHash.
func hashOf(op interface{ WriteHash(hash.Hash) }) uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}
