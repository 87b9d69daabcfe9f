package graph

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Softmax returns the softmax of x over its last axis, for 2-D, 3-D and 4-D x.
//
// gorgonia's own SoftMax forward seeds the row max with the first element of
// the whole tensor instead of the row, so rows of different scale overflow to
// Inf/NaN (pinned in defects_test.go). This one (softmaxOp) subtracts each
// row's own max before exponentiating, so float32 logits of any magnitude stay
// finite.
func Softmax(x *G.Node) (*G.Node, error) {
	if err := checkRows(x); err != nil {
		return nil, fmt.Errorf("graph: softmax: %w", err)
	}
	return G.ApplyOp(softmaxOp{shape: x.Shape().Clone(), heads: 1}, x)
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
	if err := CheckNode(scores, "scores"); err != nil {
		return nil, fmt.Errorf("graph: masked softmax: %w", err)
	}
	if err := mask.Check(); err != nil {
		return nil, fmt.Errorf("graph: masked softmax: %w", err)
	}
	s := scores.Shape()
	heads := 1
	switch {
	case len(s) == 3 && s[0] == mask.B && s[1] == mask.Sq && s[2] == mask.Sk:
	case len(s) == 4 && s[0] == mask.B && s[2] == mask.Sq && s[3] == mask.Sk:
		heads = s[1]
	default:
		return nil, fmt.Errorf("graph: masked softmax: scores shape %v does not match mask: want (B, Sq, Sk) = (%d, %d, %d) or (B, H, Sq, Sk)", s, mask.B, mask.Sq, mask.Sk)
	}
	if err := CheckFloat(scores.Dtype()); err != nil {
		return nil, fmt.Errorf("graph: masked softmax: %w", err)
	}
	if scores.Dtype() != mask.Bias.Dtype() {
		return nil, fmt.Errorf("graph: masked softmax: scores are %v but mask is %v", scores.Dtype(), mask.Bias.Dtype())
	}
	return G.ApplyOp(softmaxOp{shape: s.Clone(), masked: true, heads: heads}, scores, mask.Bias)
}

// LogSoftmax returns log(softmax(x)) over the last axis of a 2-D, 3-D or 4-D x,
// computed as z - log(sum(exp(z))) with z = x - rowmax(x) so that it is finite
// for any finite logits in float32.
//
// gorgonia's LogSoftMax shares SoftMax's wrong row max, and Log(SoftMax(x)) is
// rewritten in place so that the SoftMax node itself turns into
// log-probabilities; this function avoids both (see defects_test.go).
func LogSoftmax(x *G.Node) (*G.Node, error) {
	out, err := logSoftmax(x)
	if err != nil {
		return nil, fmt.Errorf("graph: log-softmax: %w", err)
	}
	return out, nil
}

// logSoftmax composes verified ops on a (rows, last) view: gorgonia's
// reductions along a middle axis of a 4-D tensor are wrong, along axis 1 of a
// matrix they are not.
func logSoftmax(x *G.Node) (*G.Node, error) {
	if err := checkRows(x); err != nil {
		return nil, err
	}
	shape := x.Shape().Clone()
	last := shape[len(shape)-1]
	rows, err := Reshape(x, tensor.Shape{shape.TotalSize() / last, last})
	if err != nil {
		return nil, err
	}
	m, err := G.Max(rows, 1)
	if err != nil {
		return nil, err
	}
	z, err := G.BroadcastSub(rows, m, nil, []byte{1}) // x - rowmax
	if err != nil {
		return nil, err
	}
	e, err := G.Exp(z)
	if err != nil {
		return nil, err
	}
	sum, err := G.Sum(e, 1)
	if err != nil {
		return nil, err
	}
	logSum, err := G.Log(sum)
	if err != nil {
		return nil, err
	}
	out, err := G.BroadcastSub(z, logSum, nil, []byte{1})
	if err != nil {
		return nil, err
	}
	return Reshape(out, shape)
}

// checkRows accepts float nodes of 2 to 4 dimensions.
func checkRows(x *G.Node) error {
	if err := CheckNode(x, "input"); err != nil {
		return err
	}
	if d := x.Shape().Dims(); d < 2 || d > 4 {
		return fmt.Errorf("want a 2-D, 3-D or 4-D node, got shape %v", x.Shape())
	}
	return CheckFloat(x.Dtype())
}
