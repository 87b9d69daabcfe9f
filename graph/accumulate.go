package graph

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	fastgemm "github.com/qkv-dev/qkv/internal/gemm"
)

// accumulateOp is the Machine's form of a sum s + dy Wᵀ whose second term
// is a Linear's dx read by that sum alone: the product is added into s in
// place (GEMM with beta 1), instead of being written out and read back by
// an add. G.Grad sums the gradients of a value read by several Linears so
// (a Transformer block's normalised input, read by wq, wk and wv: two adds
// of a (B, S, D) tensor each block). compile builds it (fuseAccumulations);
// graphs never hold it.
//
// Where the product's depth (the Linear's output width) fits one of
// internal/gemm's blocks, each sum is s + p rounded once, as the add
// computed it: the same values (a zero's sign aside).
type accumulateOp struct {
	linearOp // the LinearGradX
}

func (op accumulateOp) Arity() int { return 3 }

func (op accumulateOp) String() string { return "qkv.LinearGradX+add" }

// OverwritesInput: the sum, input 2, becomes the output.
func (op accumulateOp) OverwritesInput() int { return 2 }

// Do adds dy Wᵀ (vals 0 and 1) into the sum (vals 2) and returns it.
func (op accumulateOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != 3 {
		return nil, fmt.Errorf("graph: %v: want 3 inputs, got %d", op, len(vals))
	}
	dt := vals[0].Dtype()
	for _, v := range vals {
		if _, ok := v.(*tensor.Dense); !ok || v.Dtype() != dt {
			return nil, fmt.Errorf("graph: %v: inputs must be dense %v tensors, got %T %v", op, dt, v, v.Dtype())
		}
	}
	sum := vals[2].(*tensor.Dense)
	if !sum.Shape().Eq(op.x) {
		return nil, shapeErrorf("graph: %v: the sum is %v, want %v", op, sum.Shape(), op.x)
	}
	switch dt {
	case tensor.Float64:
		linearGradX(op.linearOp, typed(vals[:2], op.buf.inputs64()), 1, sum.Float64s())
	case tensor.Float32:
		linearGradX(op.linearOp, typed(vals[:2], op.buf.inputs32()), 1, sum.Float32s())
	default:
		return nil, fmt.Errorf("graph: %v: dtype %v is not supported", op, dt)
	}
	return sum, nil
}

// fuseAccumulations replaces each step of an add, a + b, where b is a
// Linear's dx and a a value that qkv's own op computed into a buffer it
// keeps, each read by that add alone and neither the derivative of a node
// (which Deriv or Grad would read), by an accumulateOp over (dy, W, a),
// and drops b's step: b's node then never holds a value. Only products of
// at most one internal/gemm block of depth are fused, so the sums are the
// add's.
func (m *Machine) fuseAccumulations() {
	users := map[*G.Node]int{}
	for _, s := range m.steps {
		for _, c := range s.in {
			users[c]++
		}
	}
	at := map[*G.Node]int{}
	for i, s := range m.steps {
		at[s.node] = i
	}
	// alone reports whether n is computed by a step into a buffer of its
	// own op and read by one step only, and is nobody's derivative.
	alone := func(n *G.Node) (int, bool) {
		i, ok := at[n]
		if !ok || users[n] != 1 || len(n.DerivOf()) > 0 {
			return 0, false
		}
		switch op := m.steps[i].op.(type) {
		case addOp, accumulateOp:
			return i, true
		case linearOp:
			return i, op.step == linGradX
		}
		return 0, false
	}
	dropped := map[int]bool{}
	for i := range m.steps {
		s := &m.steps[i]
		if _, ok := s.op.(addOp); !ok || len(s.in) != 2 {
			continue
		}
		for _, pair := range [2][2]*G.Node{{s.in[0], s.in[1]}, {s.in[1], s.in[0]}} {
			sum, prod := pair[0], pair[1]
			j, ok := alone(prod)
			lin, isLin := m.steps[j].op.(linearOp)
			if !ok || !isLin || !fastgemm.OneBlock(lin.out) {
				continue
			}
			if _, ok := alone(sum); !ok {
				continue
			}
			s.op = accumulateOp{lin}
			s.in = append(append([]*G.Node(nil), m.steps[j].in...), sum)
			s.args = make([]G.Value, len(s.in))
			s.into = nil
			dropped[j] = true
			break
		}
	}
	kept := m.steps[:0]
	for i, s := range m.steps {
		if !dropped[i] {
			kept = append(kept, s)
		}
	}
	m.steps = kept
}
