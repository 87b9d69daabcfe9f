package graph

import (
	"fmt"
	"hash"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/internal/vec"
)

// crossEntropyOp is the cross-entropy of CrossEntropy as one op each way:
//
//	loss = -Σ_i Σ_j t_ij log softmax(z_i)_j = Σ_i (T_i lse_i - Σ_j t_ij z_ij)
//
// where lse_i = m_i + log Σ_j exp(z_ij - m_i), m_i the row's max, and
// T_i = Σ_j t_ij the row's share of the weight; and, with grad, its
// gradient
//
//	dz_ij = g (T_i softmax(z_i)_j - t_ij)
//
// from (z, t, g). Composed of gorgonia's ops (max, broadcast subtract, exp,
// sum, log, product, sum, negation, about forty nodes with their
// gradients) it allocated every intermediate at every step; here a row of
// weight 0 (a prompt token, padding) costs nothing, and sums run in float64.
// loss_test.go keeps the composed form and tests this one equal to it.
type crossEntropyOp struct {
	pureOp
	shape   tensor.Shape // of the logits: (N, C) or (B, S, C)
	classes int
	grad    bool
	buf     *output      // grad: the (N, C) gradient
	loss    *lossScalars // the forward's scalar, kept from run to run
}

// lossScalars holds the loss value that crossEntropyOp returns, one per
// dtype (returning the same pointer every run allocates nothing), and a
// row of scratch for the exponentials.
type lossScalars struct {
	f32   G.F32
	f64   G.F64
	row32 []float32
	row64 []float64
}

// crossEntropy applies the forward op to logits and the targets' node.
func crossEntropy(logits, targets *G.Node, classes int) (*G.Node, error) {
	op := crossEntropyOp{shape: logits.Shape().Clone(), classes: classes, loss: new(lossScalars)}
	return G.ApplyOp(op, logits, targets)
}

func (op crossEntropyOp) Arity() int {
	if op.grad {
		return 3
	}
	return 2
}

func (op crossEntropyOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	z := &G.TensorType{Dims: op.shape.Dims(), Of: a}
	t := &G.TensorType{Dims: 2, Of: a}
	if op.grad {
		return hm.NewFnType(z, t, a, z)
	}
	return hm.NewFnType(z, t, a)
}

func (op crossEntropyOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	if op.grad {
		return op.shape.Clone(), nil
	}
	return tensor.ScalarShape(), nil
}

func (op crossEntropyOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != op.Arity() {
		return nil, fmt.Errorf("graph: %v: want %d inputs, got %d", op, op.Arity(), len(vals))
	}
	z, ok1 := vals[0].(*tensor.Dense)
	t, ok2 := vals[1].(*tensor.Dense)
	if !ok1 || !ok2 || z.Dtype() != t.Dtype() || z.Size() != op.shape.TotalSize() || t.Size() != z.Size() {
		return nil, fmt.Errorf("graph: %v: want logits %v and targets of as many elements, one float dtype; got %T %v and %T %v", op, op.shape, vals[0], vals[0].Shape(), vals[1], vals[1].Shape())
	}
	g := 1.0
	if op.grad {
		var err error
		if g, err = scalarOf(vals[2]); err != nil {
			return nil, fmt.Errorf("graph: %v: output gradient: %w", op, err)
		}
	}
	switch z.Dtype() {
	case tensor.Float64:
		return crossEntropyRun(op, z, t, g, &op.loss.row64, &op.loss.f64)
	case tensor.Float32:
		return crossEntropyRun(op, z, t, g, &op.loss.row32, &op.loss.f32)
	}
	return nil, fmt.Errorf("graph: %v: dtype %v is not supported", op, z.Dtype())
}

// crossEntropyRun is Do for logits z and targets t of T's dtype: the
// gradient into op's output, or the loss into *loss (with *row, grown to
// the class count, as scratch).
func crossEntropyRun[T float32 | float64, S G.F32 | G.F64](op crossEntropyOp, z, t *tensor.Dense, g float64, row *[]T, loss *S) (G.Value, error) {
	if op.grad {
		out := op.buf.get(z.Dtype(), op.shape, false)
		crossEntropyGrad(elements[T](z), elements[T](t), elements[T](out), op.classes, g)
		return out, nil
	}
	*row = grown(*row, op.classes)
	*loss = S(crossEntropyLoss(elements[T](z), elements[T](t), *row))
	return any(loss).(G.Value), nil
}

// grown returns s with length n, reallocated only when it is shorter.
func grown[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// crossEntropyLoss returns Σ_i (T_i lse_i - Σ_j t_ij z_ij) over the rows of
// z and t, each of len(row) classes; row is scratch.
func crossEntropyLoss[T float32 | float64](z, t, row []T) float64 {
	c := len(row)
	var loss float64
	for i := 0; i < len(z); i += c {
		zi, ti := z[i:i+c], t[i:i+c]
		w := rowShare(ti)
		if w == 0 {
			continue
		}
		m, sum := expRow(zi, row)
		var dot float64
		for j, v := range ti {
			if v != 0 {
				dot += float64(v) * float64(zi[j])
			}
		}
		loss += w*(float64(m)+math.Log(sum)) - dot
	}
	return loss
}

// crossEntropyGrad writes dz_ij = g (T_i softmax(z_i)_j - t_ij), rows of c
// classes: 0 for a row of weight 0.
func crossEntropyGrad[T float32 | float64](z, t, dz []T, c int, g float64) {
	for i := 0; i < len(z); i += c {
		zi, ti, di := z[i:i+c], t[i:i+c], dz[i:i+c]
		w := rowShare(ti)
		if w == 0 {
			clear(di)
			continue
		}
		_, sum := expRow(zi, di)
		scale := g * w / sum
		for j, e := range di {
			di[j] = T(scale*float64(e) - g*float64(ti[j]))
		}
	}
}

// rowShare returns T = Σ_j t_j, the row's share of the loss's weight.
func rowShare[T float32 | float64](t []T) float64 {
	var w float64
	for _, v := range t {
		w += float64(v)
	}
	return w
}

// expRow writes e_j = exp(z_j - m), m the row's max, and returns m and the
// sum of the e_j: float32 rows on internal/vec's vector exponential,
// float64 rows with math.Exp. A NaN in the row is its max, and makes every
// e_j NaN.
func expRow[T float32 | float64](z, e []T) (m T, sum float64) {
	m = vec.Max(z)
	if z32, ok := any(z).([]float32); ok {
		return m, float64(vec.ExpShiftSum(any(e).([]float32), z32, float32(m)))
	}
	for j, v := range z {
		ev := math.Exp(float64(v - m))
		e[j] = T(ev)
		sum += ev
	}
	return m, sum
}

// scalarOf returns the number a scalar value holds: gorgonia's scalars or
// a one-element tensor.
func scalarOf(v G.Value) (float64, error) {
	switch x := v.(type) {
	case *G.F64:
		return float64(*x), nil
	case *G.F32:
		return float64(*x), nil
	case *tensor.Dense:
		if x.Size() == 1 {
			switch x.Dtype() {
			case tensor.Float64:
				return x.Float64s()[0], nil
			case tensor.Float32:
				return float64(x.Float32s()[0]), nil
			}
		}
	}
	return 0, fmt.Errorf("want a float scalar, got %T %v", v, v.Shape())
}

func (op crossEntropyOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.crossEntropy %v %d %t", op.shape, op.classes, op.grad)
}
func (op crossEntropyOp) Hashcode() uint32 { return hashOf(op) }

func (op crossEntropyOp) String() string { return gradName("qkv.crossEntropy", op.grad) }

// DiffWRT: the loss is differentiable in the logits, not in the targets;
// the gradient op is not differentiated again.
func (op crossEntropyOp) DiffWRT(inputs int) []bool {
	d := make([]bool, inputs)
	d[0] = !op.grad
	return d
}

// SymDiff returns dz as a crossEntropyOp over (z, t, g), and no gradient
// for the targets.
func (op crossEntropyOp) SymDiff(inputs G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	if op.grad {
		return nil, fmt.Errorf("graph: %v is not differentiable", op)
	}
	g := op
	g.grad, g.buf = true, new(output) // g.loss is the forward's, unused by the gradient
	dz, err := G.ApplyOp(g, inputs[0], inputs[1], grad)
	if err != nil {
		return nil, err
	}
	return G.Nodes{dz, nil}, nil
}
