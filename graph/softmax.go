package graph

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

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
