package graph

import (
	"errors"
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/internal/gemm/par"
)

// LinearStep is causal linear attention's recurrent form, for generation:
// one new position per sequence. phiQ and phiK (B, 1, H*dφ) and v
// (B, 1, H*dv) are the new position's; state (B, H*dφ, dv) and z
// (B, 1, H*dφ) the sums S and z of the positions before (zeros at the
// start; head h's rows of state are [h*dφ, (h+1)*dφ)). It returns
//
//	newState = state + φk vᵀ       per head  (B, H*dφ, dv)
//	newZ     = z + φk                        (B, 1, H*dφ)
//	out      = φqᵀ newState [/ (φqᵀ newZ + LinearEps)]   (B, 1, H*dv)
//
// the new position included, as LinearAttend's causal query sees its own
// key; bind newState and newZ as state and z at the next step. Step by
// step, out equals LinearAttend's causal output at each position (to
// rounding: the sums are added in another order, in the data's dtype).
//
// Only s.Heads and s.Normalize matter: the step is causal whatever
// s.Causal says, and Chunk and Impl (checked, then unused) have nothing to
// choose for one position. KeyLengths must be nil: a step does not know
// its position, so a padded position is one not stepped. It is forward
// only: its ops have no gradient.
func LinearStep(phiQ, phiK, v, state, z *G.Node, s LinearSpec) (out, newState, newZ *G.Node, err error) {
	const what = "graph: linear attention step"
	d, err := s.checkStep(phiQ, phiK, v, state, z)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	if newState, err = apply(linearStepOp{dims: d, out: stepState}, state, phiK, v); err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	if newZ, err = apply(linearStepOp{dims: d, out: stepZ}, z, phiK); err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	if out, err = apply(linearStepOp{dims: d, out: stepOut}, phiQ, newState, newZ); err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, newState, newZ, nil
}

// checkStep validates s and the step's inputs and returns the sizes
// (Sq = Sk = 1).
func (s LinearSpec) checkStep(q, k, v, state, z *G.Node) (linearDims, error) {
	if err := checkNodes([]*G.Node{q, k, v, state, z}, "phiQ", "phiK", "v", "state", "z"); err != nil {
		return linearDims{}, err
	}
	if s.KeyLengths != nil {
		return linearDims{}, errors.New("LinearSpec.KeyLengths must be nil: a step does not know its position; do not step a padded position")
	}
	sq := s
	sq.Causal = true
	d, err := sq.check(q, k, v)
	if err != nil {
		return linearDims{}, err
	}
	if d.Sq != 1 {
		return linearDims{}, shapeErrorf("phiQ %v, phiK %v, v %v: a step takes one position, want (B, 1, ...)", q.Shape(), k.Shape(), v.Shape())
	}
	if want := (tensor.Shape{d.B, d.H * d.F, d.E}); !state.Shape().Eq(want) {
		return linearDims{}, shapeErrorf("state %q is %v, want (B, H*dφ, dv) = %v", state.Name(), state.Shape(), want)
	}
	if want := (tensor.Shape{d.B, 1, d.H * d.F}); !z.Shape().Eq(want) {
		return linearDims{}, shapeErrorf("z %q is %v, want (B, 1, H*dφ) = %v", z.Name(), z.Shape(), want)
	}
	for _, n := range []*G.Node{state, z} {
		if n.Dtype() != q.Dtype() {
			return linearDims{}, fmt.Errorf("phiQ is %v but %q is %v", q.Dtype(), n.Name(), n.Dtype())
		}
	}
	return d, nil
}

// What a linearStepOp computes, and from which inputs:
const (
	stepState = iota // newState (B, H*dφ, dv) from state, φk, v
	stepZ            // newZ (B, 1, H*dφ) from z, φk
	stepOut          // out (B, 1, H*dv) from φq, newState, newZ
)

// linearStepOp is one of LinearStep's three results.
type linearStepOp struct {
	pureOp
	dims linearDims
	out  int
	buf  *output
}

func (op linearStepOp) withOutput(b *output) G.Op { op.buf = b; return op }

func (op linearStepOp) Arity() int {
	if op.out == stepZ {
		return 2
	}
	return 3
}

func (op linearStepOp) Type() hm.Type {
	if op.out == stepZ {
		return opType([]int{3, 3}, 3)
	}
	return opType([]int{3, 3, 3}, 3)
}

// sizes are the element counts of the inputs, in order.
func (op linearStepOp) sizes() [3]int {
	d := op.dims
	st, hf, he := d.B*d.H*d.F*d.E, d.B*d.H*d.F, d.B*d.H*d.E
	switch op.out {
	case stepState:
		return [3]int{st, hf, he}
	case stepZ:
		return [3]int{hf, hf}
	}
	return [3]int{hf, st, hf}
}

// shape is the output's shape, in buf.
func (op linearStepOp) shape(buf *[3]int) tensor.Shape {
	d := op.dims
	s := tensor.Shape(buf[:0])
	switch op.out {
	case stepState:
		return append(s, d.B, d.H*d.F, d.E)
	case stepZ:
		return append(s, d.B, 1, d.H*d.F)
	}
	return append(s, d.B, 1, d.H*d.E)
}

func (op linearStepOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	var buf [3]int
	return op.shape(&buf).Clone(), nil
}

func (op linearStepOp) Do(vals ...G.Value) (G.Value, error) {
	sizes := op.sizes()
	for i, want := range sizes[:min(len(vals), op.Arity())] {
		if vals[i] != nil && vals[i].Shape().TotalSize() != want {
			return nil, fmt.Errorf("graph: %v: input %d has shape %v, want %d elements", op, i, vals[i].Shape(), want)
		}
	}
	var buf [3]int
	return runKernel(op, vals, op.Arity(), op.shape(&buf), op.buf, false)
}

func (op linearStepOp) run64(in [][]float64, out []float64) { runLinearStep(op, in, out) }
func (op linearStepOp) run32(in [][]float32, out []float32) { runLinearStep(op, in, out) }

// runLinearStep computes the step, one item per (sequence, head), each
// writing only its own part of out.
func runLinearStep[T float32 | float64](op linearStepOp, in [][]T, out []T) {
	d := op.dims
	j := jobOf[linearStepJob[T]](op.buf)
	j.op, j.in, j.out = op, in, out
	par.Run(d.B*d.H, par.WorkersFor(2*d.B*d.H*d.F*d.E), j)
}

type linearStepJob[T float32 | float64] struct {
	op  linearStepOp
	in  [][]T
	out []T
}

func (j *linearStepJob[T]) Item(_, item int) {
	d, in, out := j.op.dims, j.in, j.out
	F, E := d.F, d.E
	b, h := item/d.H, item%d.H
	f0 := (b*d.H + h) * F // head h's first feature of sequence b, in (B, 1, H*dφ)
	e0 := (b*d.H + h) * E // its first value, in (B, 1, H*dv)
	switch j.op.out {
	case stepState: // newState = state + φk vᵀ
		state, k, v := in[0], in[1][f0:][:F], in[2][e0:][:E]
		for f, kf := range k {
			row := (f0 + f) * E
			for e, ve := range v {
				out[row+e] = state[row+e] + kf*ve
			}
		}
	case stepZ: // newZ = z + φk
		for f := f0; f < f0+F; f++ {
			out[f] = in[0][f] + in[1][f]
		}
	case stepOut: // out = φqᵀ newState [/ (φqᵀ newZ + eps)]
		q, state, z := in[0][f0:][:F], in[1], in[2][f0:][:F]
		o := out[e0:][:E]
		clear(o)
		for f, qf := range q {
			for e, s := range state[(f0+f)*E:][:E] {
				o[e] += qf * s
			}
		}
		if d.Normalize {
			r := 1 / (dot(q, z) + T(LinearEps))
			for e := range o {
				o[e] *= r
			}
		}
	}
}

func (op linearStepOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.linearstep %+v %d", op.dims, op.out)
}
func (op linearStepOp) Hashcode() uint32 { return hashOf(op) }

func (op linearStepOp) String() string {
	return [...]string{"qkv.LinearStepState", "qkv.LinearStepZ", "qkv.LinearStepOut"}[op.out]
}

// DiffWRT: the step is for inference; nothing is differentiated.
func (op linearStepOp) DiffWRT(inputs int) []bool { return diffAll(inputs, false) }

// SymDiff: a step has no gradient.
func (op linearStepOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("graph: %v is forward only (generation): it has no gradient", op)
}
