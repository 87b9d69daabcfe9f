package graph

import (
	"fmt"
	"math"
	"math/bits"
	"slices"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// MaxElements is the most elements qkv lets one tensor have: 2^31 - 1, the
// largest int32.
//
// Sizes come from configurations and command lines, and a product of sizes
// can overflow int (In = Out = 1<<33 gave a weight of 0 elements) or ask
// make for more than memory can hold (a width of 3037000499 made the
// (D, D) weight panic in makeslice). Every constructor in graph and layers
// checks each tensor it would allocate with CheckElements before allocating
// it, so such sizes come back as errors. 2^31 - 1 elements is 8 GiB of
// float32 and 16 GiB of float64, far beyond the models qkv trains; being the
// largest int32, it also keeps every accepted count within int on 32-bit
// platforms.
const MaxElements = math.MaxInt32

// CheckElements returns an error, naming the shape, unless every size in
// shape is positive and their product neither overflows int nor exceeds
// MaxElements. A shape with no sizes (a scalar) has one element.
//
// It is the one place where graph and layers check sizes before allocating,
// so that the same rule and the same message hold everywhere.
func CheckElements(shape ...int) error {
	// The messages format a copy, so that shape does not escape and a call
	// that passes allocates nothing.
	for i, d := range shape {
		if d <= 0 {
			return fmt.Errorf("shape %v: size %d of axis %d is not positive", tensor.Shape(slices.Clone(shape)), d, i)
		}
	}
	n, overflow := uint64(1), false
	for _, d := range shape {
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt {
			overflow = true
			break
		}
		n = lo
	}
	switch {
	case overflow:
		return fmt.Errorf("shape %v: the element count overflows int (graph.MaxElements is %d)", tensor.Shape(slices.Clone(shape)), MaxElements)
	case n > MaxElements:
		return fmt.Errorf("shape %v: %d elements exceed graph.MaxElements = %d", tensor.Shape(slices.Clone(shape)), n, MaxElements)
	}
	return nil
}

// CheckNode returns an error unless n is a usable node: not nil, and not a
// zero-value G.Node, whose Dtype and Shape methods panic inside gorgonia.
// what names the node in the message ("query", "ids"). Every exported
// function of graph and layers that takes a node checks it here first, so that
// a nil reaches the caller as an error rather than as a panic deep in the
// engine.
func CheckNode(n *G.Node, what string) error {
	if n == nil {
		return fmt.Errorf("%s is nil", what)
	}
	if n.Type() == nil {
		return fmt.Errorf("%s is a zero-value node: make nodes with gorgonia's constructors", what)
	}
	return nil
}

// checkNodes returns the error of the first node, in order, that CheckNode
// rejects; names[i] names nodes[i].
func checkNodes(nodes []*G.Node, names ...string) error {
	for i, n := range nodes {
		if err := CheckNode(n, names[i]); err != nil {
			return err
		}
	}
	return nil
}
