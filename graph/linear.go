package graph

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	"gonum.org/v1/gonum/blas"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	fastgemm "github.com/qkv-dev/qkv/internal/gemm"
	"github.com/qkv-dev/qkv/internal/vec"
)

// Linear returns x W + b over the last axis of x (..., In), with W (In, Out)
// and b (Out), or x W when b is nil: (..., Out).
//
// gorgonia's Mul is 2-D only, so composing this takes a reshape (a copy, see
// Reshape), a matrix product, a broadcast of b and a reshape back, each way.
// As one op it is a single GEMM on the rows of x forward, and a GEMM per
// input backward (dx = dy W^T, dW = x^T dy, db = column sums of dy), on
// qkv's GEMM (internal/gemm; OpenBLAS with the openblas build tag),
// whatever BLAS gorgonia and gonum are set to use (see UseFastGEMM).
func Linear(x, w, b *G.Node) (*G.Node, error) { return linear(x, w, b, false) }

// LinearT returns x W^T + b for W (Out, In), PyTorch's nn.Linear layout, or
// x W^T when b is nil: (..., Out). It is Linear with the weight read
// transposed inside the GEMMs, so no transposed copy is formed: a decoder
// whose head is its token embedding table (Vocab, D), weight tying, takes
// its logits as x E^T with it, and E's gradient (dy^T x, (Vocab, D)) adds to
// the lookup's in the one table.
func LinearT(x, w, b *G.Node) (*G.Node, error) { return linear(x, w, b, true) }

// linear is Linear, or LinearT with trans.
func linear(x, w, b *G.Node, trans bool) (*G.Node, error) {
	if err := checkNodes([]*G.Node{x, w}, "input", "weights"); err != nil {
		return nil, fmt.Errorf("graph: linear: %w", err)
	}
	if b != nil {
		if err := CheckNode(b, "bias"); err != nil {
			return nil, fmt.Errorf("graph: linear: %w", err)
		}
	}
	s, ws := x.Shape(), w.Shape()
	in, out, want := 0, 0, "(In, Out)"
	if ws.Dims() == 2 {
		in, out = ws[0], ws[1]
		if trans {
			in, out, want = ws[1], ws[0], "(Out, In)"
		}
	}
	if s.Dims() < 2 || ws.Dims() != 2 || s[len(s)-1] != in {
		return nil, shapeErrorf("graph: linear: input %v and weights %v: want (..., In) and %s", s, ws, want)
	}
	if err := CheckFloat(x.Dtype()); err != nil {
		return nil, fmt.Errorf("graph: linear: %w", err)
	}
	if w.Dtype() != x.Dtype() {
		return nil, fmt.Errorf("graph: linear: input is %v, weights %q are %v", x.Dtype(), w.Name(), w.Dtype())
	}
	op := linearOp{x: s.Clone(), in: in, out: out, trans: trans, step: linOutput}
	// The output is allocated when the graph runs, where a failed make
	// cannot be caught: a small input and weight can still make a huge one.
	var y [8]int
	if err := CheckElements(op.shape(&y)...); err != nil {
		return nil, fmt.Errorf("graph: linear: output: %w", err)
	}
	if b == nil {
		return apply(op, x, w)
	}
	if !b.Shape().Eq(tensor.Shape{out}) || b.Dtype() != x.Dtype() {
		return nil, shapeErrorf("graph: linear: bias %q is %v %v, want %v (%d)", b.Name(), b.Dtype(), b.Shape(), x.Dtype(), out)
	}
	op.bias = true
	return apply(op, x, w, b)
}

// What a linearOp computes, and from which inputs.
const (
	linOutput = iota // y from x, W, [b]
	linGradX         // dx from dy, W
	linGradW         // dW from x, dy
	linGradB         // db from dy
)

type linearOp struct {
	pureOp
	x       tensor.Shape // shape of x, (..., In)
	in, out int
	bias    bool
	trans   bool // W is (Out, In): LinearT
	step    int
	buf     *output
}

func (op linearOp) withOutput(b *output) G.Op { op.buf = b; return op }

// rows is the number of vectors x holds.
func (op linearOp) rows() int { return op.x.TotalSize() / op.in }

// inputs lists the number of dimensions of each input, in buf: Do asks
// for the arity at every run.
func (op linearOp) inputs(buf *[3]int) []int {
	n := op.x.Dims()
	in := buf[:0]
	switch op.step {
	case linOutput:
		if op.bias {
			return append(in, n, 2, 1)
		}
		return append(in, n, 2)
	case linGradX:
		return append(in, n, 2)
	case linGradW:
		return append(in, n, n)
	}
	return append(in, n)
}

// shape is the output's shape: op.x itself for dx, else in buf, as Do asks
// for it at every run.
func (op linearOp) shape(buf *[8]int) tensor.Shape {
	switch op.step {
	case linGradX:
		return op.x
	case linGradW:
		if op.trans {
			return append(buf[:0], op.out, op.in)
		}
		return append(buf[:0], op.in, op.out)
	case linGradB:
		return append(buf[:0], op.out)
	}
	return append(append(tensor.Shape(buf[:0]), op.x[:len(op.x)-1]...), op.out)
}

func (op linearOp) Arity() int {
	var buf [3]int
	return len(op.inputs(&buf))
}

func (op linearOp) Type() hm.Type {
	var in [3]int
	var out [8]int
	return opType(op.inputs(&in), op.shape(&out).Dims())
}

func (op linearOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	var buf [8]int
	return op.shape(&buf).Clone(), nil
}

func (op linearOp) Do(vals ...G.Value) (G.Value, error) {
	var buf [8]int
	return runKernel(op, vals, op.Arity(), op.shape(&buf), op.buf, op.step == linGradB)
}

func (op linearOp) run64(in [][]float64, out []float64) { runLinear(op, in, out) }
func (op linearOp) run32(in [][]float32, out []float32) { runLinear(op, in, out) }

func runLinear[T float32 | float64](op linearOp, in [][]T, out []T) {
	n, i, o := op.rows(), op.in, op.out
	if op.trans {
		runLinearT(op, in, out)
		return
	}
	switch op.step {
	case linOutput: // y (n, o) = x (n, i) W (i, o) + b
		if op.bias {
			for r := 0; r < n; r++ {
				copy(out[r*o:(r+1)*o], in[2])
			}
			gemm(blas.NoTrans, blas.NoTrans, n, o, i, in[0], in[1], 1, out)
		} else {
			gemm(blas.NoTrans, blas.NoTrans, n, o, i, in[0], in[1], 0, out)
		}
	case linGradX: // dx (n, i) = dy (n, o) W^T
		linearGradX(op, in, 0, out)
	case linGradW: // dW (i, o) = x^T dy
		gemm(blas.Trans, blas.NoTrans, i, o, n, in[0], in[1], 0, out)
	case linGradB: // db = column sums of dy, row after row (1 db + 1 dy + 0 is db + dy)
		for r := 0; r < n; r++ {
			vec.Lin(out[:o], out[:o], in[0][r*o:(r+1)*o], 1, 1, 0)
		}
	}
}

// runLinearT is runLinear for W (o, i), read transposed; the bias's
// gradient is the same.
func runLinearT[T float32 | float64](op linearOp, in [][]T, out []T) {
	n, i, o := op.rows(), op.in, op.out
	switch op.step {
	case linOutput: // y (n, o) = x (n, i) W^T + b
		beta := T(0)
		if op.bias {
			for r := 0; r < n; r++ {
				copy(out[r*o:(r+1)*o], in[2])
			}
			beta = 1
		}
		gemm(blas.NoTrans, blas.Trans, n, o, i, in[0], in[1], beta, out)
	case linGradX: // dx (n, i) = dy (n, o) W (o, i)
		linearGradX(op, in, 0, out)
	case linGradW: // dW (o, i) = dy^T x, from x, dy
		gemm(blas.Trans, blas.NoTrans, o, i, n, in[1], in[0], 0, out)
	case linGradB:
		op.trans = false
		runLinear(op, in, out)
	}
}

// linearGradX sets out to dx + beta out, dx = dy W^T (dy W for LinearT)
// from in = (dy, W): beta 1 adds the product into out (accumulateOp).
func linearGradX[T float32 | float64](op linearOp, in [][]T, beta T, out []T) {
	tb := blas.Trans
	if op.trans {
		tb = blas.NoTrans
	}
	gemm(blas.NoTrans, tb, op.rows(), op.in, op.out, in[0], in[1], beta, out)
}

// gemm sets C (m, n) = op(A) op(B) + beta C for row-major, contiguous A, B
// and C, where op(A) is (m, k) and op(B) is (k, n), on qkvBLAS (blas.go),
// called directly: the global BLAS of gonum's blas32 and blas64 is the
// program's, which importing graph leaves alone.
func gemm[T float32 | float64](ta, tb blas.Transpose, m, n, k int, a, b []T, beta T, c []T) {
	lda, ldb := k, n
	if ta == blas.Trans {
		lda = m
	}
	if tb == blas.Trans {
		ldb = k
	}
	switch a := any(a).(type) {
	case []float64:
		qkvBLAS{}.Dgemm(ta, tb, m, n, k, 1, a, lda, any(b).([]float64), ldb, float64(beta), any(c).([]float64), n)
	case []float32:
		if bf16Linear.Load() {
			fastgemm.GemmBF16(ta == blas.Trans, tb == blas.Trans, m, n, k, 1, a, lda, any(b).([]float32), ldb, float32(beta), any(c).([]float32), n)
			return
		}
		qkvBLAS{}.Sgemm(ta, tb, m, n, k, 1, a, lda, any(b).([]float32), ldb, float32(beta), any(c).([]float32), n)
	}
}

func (op linearOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.linear %v %d %d %t %t %d", op.x, op.in, op.out, op.bias, op.trans, op.step)
}
func (op linearOp) Hashcode() uint32 { return hashOf(op) }

func (op linearOp) String() string {
	return [...]string{"qkv.Linear", "qkv.LinearGradX", "qkv.LinearGradW", "qkv.LinearGradB"}[op.step]
}

// DiffWRT: the output is differentiable in x, W and b; gradient ops are not
// differentiated again.
func (op linearOp) DiffWRT(inputs int) []bool { return diffAll(inputs, op.step == linOutput) }

// SymDiff returns dx, dW and, with a bias, db.
func (op linearOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	if op.step != linOutput {
		return nil, fmt.Errorf("graph: %v is not differentiable", op)
	}
	at := func(step int, args ...*G.Node) (*G.Node, error) {
		o := op
		o.step = step
		return apply(o, args...)
	}
	grads := make(G.Nodes, len(inputs))
	var err error
	if grads[0], err = at(linGradX, grad, inputs[1]); err != nil {
		return nil, err
	}
	if grads[1], err = at(linGradW, inputs[0], grad); err != nil {
		return nil, err
	}
	if op.bias {
		if grads[2], err = at(linGradB, grad); err != nil {
			return nil, err
		}
	}
	return grads, nil
}
