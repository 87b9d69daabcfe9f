package graph

import (
	"fmt"
	"slices"

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
	dt, err := denseInputs(op, vals)
	if err != nil {
		return nil, err
	}
	sum := vals[2].(*tensor.Dense)
	if !sum.Shape().Eq(op.x) {
		return nil, shapeErrorf("graph: %v: the sum is %v, want %v", op, sum.Shape(), op.x)
	}
	if dt == tensor.Float64 {
		linearGradX(op.linearOp, typed(vals[:2], op.buf.inputs64()), 1, sum.Float64s())
	} else {
		linearGradX(op.linearOp, typed(vals[:2], op.buf.inputs32()), 1, sum.Float32s())
	}
	return sum, nil
}

// normAddOp is the Machine's form of a sum r + dx whose dx is a
// LayerNorm's, read by that sum alone (and by the LayerNorm's parameter
// gradients, only to run after it): dx's pass over the rows adds r to each
// row, in its own buffer, instead of an add reading dx back. G.Grad sums
// so a residual stream's gradient, the block's and its LayerNorm's. The
// sum is addOp's, a + b rounded once. Its inputs are the LayerNorm
// gradient's (x, gain, dy), then r.
type normAddOp struct{ layerNormOp }

func (op normAddOp) Arity() int { return 4 }

func (op normAddOp) String() string { return "qkv.LayerNormGradX+add" }

func (op normAddOp) Do(vals ...G.Value) (G.Value, error) {
	if err := checkParamSizes(op, op.paramOp, vals); err != nil {
		return nil, err
	}
	if len(vals) == 4 {
		if d, ok := vals[3].(*tensor.Dense); ok && d != nil && d.Shape().TotalSize() != op.shape.TotalSize() {
			return nil, shapeErrorf("graph: %v: the addend has shape %v, want %v", op, d.Shape(), op.shape)
		}
	}
	return runKernel(op, vals, 4, op.shape, op.buf, false)
}

func (op normAddOp) run64(in [][]float64, out []float64) {
	runLayerNorm(op.layerNormOp, in[:3], out, in[3])
}
func (op normAddOp) run32(in [][]float32, out []float32) {
	runLayerNorm(op.layerNormOp, in[:3], out, in[3])
}

// fuseAccumulations replaces the step of an add, a + b, where b is read by
// that add alone and is nobody's derivative (which Deriv or Grad would
// read):
//
//   - b a Linear's dx, and a a value that qkv's own op computed into a
//     buffer it keeps, read by the add alone and nobody's derivative: by
//     an accumulateOp over (dy, W, a). Only products of at most one
//     internal/gemm block of depth, so that the sums are the add's.
//   - b a LayerNorm's dx (its parameter gradients read it only to run
//     after it: they read the add instead, and move to run right after
//     it): by a normAddOp over (x, gain, dy, a).
//
// b's step is dropped: its node then never holds a value.
func (m *Machine) fuseAccumulations() {
	users := map[*G.Node]int{}
	// after lists the steps that read a node only to run after it (a
	// LayerNorm's parameter gradients, their dx).
	after := map[*G.Node][]int{}
	for i, s := range m.steps {
		for _, c := range s.in {
			users[c]++
		}
		if ln, ok := s.op.(layerNormOp); ok && ln.after && ln.out >= lnGradGain && len(s.in) == 4 {
			after[s.in[3]] = append(after[s.in[3]], i)
		}
	}
	at := map[*G.Node]int{}
	for i, s := range m.steps {
		at[s.node] = i
	}
	// norm returns the step of n when it is a LayerNorm's dx that only a
	// sum at step i reads, but for steps that read it to run after it and
	// whose own values no step reads up to i: those can move to run after
	// i.
	norm := func(n *G.Node, i int) (int, layerNormOp, bool) {
		j, ok := at[n]
		if !ok || len(n.DerivOf()) > 0 || users[n] != 1+len(after[n]) {
			return 0, layerNormOp{}, false
		}
		for _, k := range after[n] {
			for _, s := range m.steps[k+1 : max(k+1, i+1)] {
				if slices.Contains(s.in, m.steps[k].node) {
					return 0, layerNormOp{}, false
				}
			}
		}
		ln, ok := m.steps[j].op.(layerNormOp)
		return j, ln, ok && ln.out == lnGradX
	}
	moved := map[int][]int{} // the steps to run right after each step
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
			if j, ln, ok := norm(prod, i); ok {
				s.rewrite(normAddOp{ln}, append(append([]*G.Node(nil), m.steps[j].in...), sum))
				for _, k := range after[prod] {
					m.steps[k].in[3] = s.node
					if k < i {
						moved[i] = append(moved[i], k)
						dropped[k] = true
					}
				}
				dropped[j] = true
				break
			}
			j, ok := alone(prod)
			lin, isLin := m.steps[j].op.(linearOp)
			if !ok || !isLin || !fastgemm.OneBlock(lin.out) {
				continue
			}
			if _, ok := alone(sum); !ok {
				continue
			}
			s.rewrite(accumulateOp{lin}, append(append([]*G.Node(nil), m.steps[j].in...), sum))
			dropped[j] = true
			break
		}
	}
	var kept []step
	for i, s := range m.steps {
		if !dropped[i] {
			kept = append(kept, s)
		}
		for _, k := range moved[i] {
			kept = append(kept, m.steps[k])
		}
	}
	m.steps = kept
}
