package graph

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// maskedRowFloor is added to every softmax denominator. A row with at least one
// visible entry has a denominator >= 1 (its max contributes exp(0) = 1), and
// 1 + 1e-30 rounds to exactly 1 in float32 and float64, so such rows are not
// changed by a single bit. A row whose every entry is masked has denominator 0
// and so comes out as zeros instead of 0/0 = NaN.
const maskedRowFloor = 1e-30

// Softmax returns the softmax of x over its last axis, for 2-D, 3-D and 4-D x.
//
// gorgonia's own SoftMax forward seeds the row max with the first element of
// the whole tensor instead of the row, so rows of different scale overflow to
// Inf/NaN (pinned in defects_test.go). This one subtracts each row's own max
// before exponentiating, so float32 logits of any magnitude stay finite.
func Softmax(x *G.Node) (*G.Node, error) {
	return softmax(x, nil)
}

// MaskedSoftmax returns the softmax over the last axis of scores shaped
// (B, Sq, Sk) or (B, H, Sq, Sk), where only the entries the mask allows take
// part. The mask is (B, Sq, Sk) and is shared by all H heads.
//
// Hidden entries get weight exactly 0. A row whose every entry is hidden (a
// query that may attend to nothing) yields all-zero weights, never NaN: such a
// row contributes nothing downstream, and its gradient is zero.
func MaskedSoftmax(scores *G.Node, mask *MaskNode) (*G.Node, error) {
	if mask == nil {
		return Softmax(scores)
	}
	s := scores.Shape()
	want := fmt.Sprintf("(B, Sq, Sk) = (%d, %d, %d) or (B, H, Sq, Sk)", mask.B, mask.Sq, mask.Sk)
	var pattern []byte // axes of scores the (B, Sq, Sk) mask is repeated along
	switch {
	case len(s) == 3 && s[0] == mask.B && s[1] == mask.Sq && s[2] == mask.Sk:
	case len(s) == 4 && s[0] == mask.B && s[2] == mask.Sq && s[3] == mask.Sk:
		pattern = []byte{1}
	default:
		return nil, fmt.Errorf("graph: masked softmax: scores shape %v does not match mask: want %s", s, want)
	}
	if scores.Dtype() != mask.Bias.Dtype() {
		return nil, fmt.Errorf("graph: masked softmax: scores are %v but mask is %v", scores.Dtype(), mask.Bias.Dtype())
	}
	biased, err := broadcastOp(G.BroadcastAdd, scores, mask.Bias, pattern)
	if err != nil {
		return nil, fmt.Errorf("graph: masked softmax: add mask bias: %w", err)
	}
	keep := func(e *G.Node) (*G.Node, error) { return broadcastOp(G.BroadcastHadamardProd, e, mask.Keep, pattern) }
	return softmax(biased, keep)
}

// broadcastOp applies op with b repeated along pattern, or plainly when pattern
// is empty and the shapes already agree.
func broadcastOp(op func(a, b *G.Node, l, r []byte) (*G.Node, error), a, b *G.Node, pattern []byte) (*G.Node, error) {
	if len(pattern) == 0 {
		return op(a, b, nil, nil)
	}
	return op(a, b, nil, pattern)
}

// softmax computes exp(x - max) [* keep] / (sum + floor) over the last axis.
// The reductions run on a 2-D (rows, last) view: gorgonia's reductions along a
// middle axis of a 4-D tensor are wrong, along axis 1 of a matrix they are not.
func softmax(x *G.Node, keep func(*G.Node) (*G.Node, error)) (*G.Node, error) {
	rows, shape, err := asRows(x)
	if err != nil {
		return nil, fmt.Errorf("graph: softmax: %w", err)
	}
	z, err := subRowMax(rows)
	if err != nil {
		return nil, fmt.Errorf("graph: softmax: %w", err)
	}
	e, err := G.Exp(z)
	if err != nil {
		return nil, fmt.Errorf("graph: softmax: %w", err)
	}
	if keep != nil {
		if e, err = Reshape(e, shape); err != nil {
			return nil, fmt.Errorf("graph: softmax: %w", err)
		}
		if e, err = keep(e); err != nil {
			return nil, fmt.Errorf("graph: softmax: apply mask: %w", err)
		}
		if e, err = Reshape(e, z.Shape()); err != nil {
			return nil, fmt.Errorf("graph: softmax: %w", err)
		}
	}
	sum, err := G.Sum(e, 1)
	if err != nil {
		return nil, fmt.Errorf("graph: softmax: %w", err)
	}
	if sum, err = G.Add(sum, Scalar(x.Dtype(), maskedRowFloor)); err != nil {
		return nil, fmt.Errorf("graph: softmax: %w", err)
	}
	p, err := G.BroadcastHadamardDiv(e, sum, nil, []byte{1})
	if err != nil {
		return nil, fmt.Errorf("graph: softmax: %w", err)
	}
	return reshapeBack(p, shape)
}

// LogSoftmax returns log(softmax(x)) over the last axis of a 2-D, 3-D or 4-D x,
// computed as z - log(sum(exp(z))) with z = x - rowmax(x) so that it is finite
// for any finite logits in float32.
//
// gorgonia's LogSoftMax shares SoftMax's wrong row max, and Log(SoftMax(x)) is
// rewritten in place so that the SoftMax node itself turns into
// log-probabilities; this function avoids both (see defects_test.go).
func LogSoftmax(x *G.Node) (*G.Node, error) {
	rows, shape, err := asRows(x)
	if err != nil {
		return nil, fmt.Errorf("graph: log-softmax: %w", err)
	}
	z, err := subRowMax(rows)
	if err != nil {
		return nil, fmt.Errorf("graph: log-softmax: %w", err)
	}
	e, err := G.Exp(z)
	if err != nil {
		return nil, fmt.Errorf("graph: log-softmax: %w", err)
	}
	sum, err := G.Sum(e, 1)
	if err != nil {
		return nil, fmt.Errorf("graph: log-softmax: %w", err)
	}
	logSum, err := G.Log(sum)
	if err != nil {
		return nil, fmt.Errorf("graph: log-softmax: %w", err)
	}
	out, err := G.BroadcastSub(z, logSum, nil, []byte{1})
	if err != nil {
		return nil, fmt.Errorf("graph: log-softmax: %w", err)
	}
	return reshapeBack(out, shape)
}

// subRowMax returns x - max(x) along axis 1 of a matrix.
func subRowMax(x *G.Node) (*G.Node, error) {
	m, err := G.Max(x, 1)
	if err != nil {
		return nil, err
	}
	return G.BroadcastSub(x, m, nil, []byte{1})
}

// asRows views x, of 2 to 4 dimensions, as a (rows, last) matrix and returns
// that view with x's shape, to be restored by reshapeBack.
func asRows(x *G.Node) (*G.Node, tensor.Shape, error) {
	shape := x.Shape().Clone()
	if d := len(shape); d < 2 || d > 4 {
		return nil, nil, fmt.Errorf("want a 2-D, 3-D or 4-D node, got shape %v", shape)
	}
	if err := CheckFloat(x.Dtype()); err != nil {
		return nil, nil, err
	}
	if len(shape) == 2 {
		return x, shape, nil
	}
	last := shape[len(shape)-1]
	rows, err := Reshape(x, tensor.Shape{shape.TotalSize() / last, last})
	return rows, shape, err
}

func reshapeBack(x *G.Node, shape tensor.Shape) (*G.Node, error) {
	if x.Shape().Eq(shape) {
		return x, nil
	}
	return Reshape(x, shape)
}
