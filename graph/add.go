package graph

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/internal/gemm/par"
	"github.com/qkv-dev/qkv/internal/vec"
)

// Add returns a + b for a and b of one shape: a residual connection, or two
// masks' biases combined. Its gradient with respect to each is the output's
// gradient itself.
//
// It is G.Add's arithmetic as one of qkv's ops, which keep their output
// from run to run (kernel.go): gorgonia's add, even writing into a kept
// output, allocated at every run.
func Add(a, b *G.Node) (*G.Node, error) {
	if err := CheckNode(a, "a"); err != nil {
		return nil, fmt.Errorf("graph: add: %w", err)
	}
	if err := CheckNode(b, "b"); err != nil {
		return nil, fmt.Errorf("graph: add: %w", err)
	}
	if !a.Shape().Eq(b.Shape()) || a.Dtype() != b.Dtype() {
		return nil, shapeErrorf("graph: add: %q is %v %v but %q is %v %v", a.Name(), a.Dtype(), a.Shape(), b.Name(), b.Dtype(), b.Shape())
	}
	if err := CheckFloat(a.Dtype()); err != nil {
		return nil, fmt.Errorf("graph: add: %w", err)
	}
	return apply(addOp{shape: a.Shape().Clone()}, a, b)
}

// addOp computes a + b.
type addOp struct {
	pureOp
	shape tensor.Shape
	buf   *output
}

func (op addOp) withOutput(b *output) G.Op { op.buf = b; return op }

func (op addOp) Arity() int { return 2 }

func (op addOp) Type() hm.Type {
	return opType([]int{op.shape.Dims(), op.shape.Dims()}, op.shape.Dims())
}

func (op addOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.shape.Clone(), nil }

func (op addOp) Do(vals ...G.Value) (G.Value, error) {
	return runKernel(op, vals, 2, op.shape, op.buf, false)
}

func (op addOp) run64(in [][]float64, out []float64) { runAdd(op, in, out) }
func (op addOp) run32(in [][]float32, out []float32) { runAdd(op, in, out) }

// runAdd adds in chunks over the cores (a residual stream, (B, S, D), was
// a step's longest op left on one core).
func runAdd[T float32 | float64](op addOp, in [][]T, out []T) {
	j := jobOf[addJob[T]](op.buf)
	j.a, j.b, j.y = in[0], in[1], out
	par.Run((len(out)+activationChunk-1)/activationChunk, par.WorkersFor(len(out)), j)
}

// addJob is runAdd's work: item c is the chunk of elements
// [c activationChunk, (c+1) activationChunk).
type addJob[T float32 | float64] struct{ a, b, y []T }

func (j *addJob[T]) Item(_, c int) {
	lo, hi := c*activationChunk, min((c+1)*activationChunk, len(j.y))
	add(j.y[lo:hi], j.a[lo:hi], j.b[lo:hi])
}

// add sets y = a + b, on internal/vec's vector kernel: 1·a + 1·b + 0 is
// a + b rounded once, the same bits but for the sign of a zero sum.
func add[T float32 | float64](y, a, b []T) { vec.Lin(y, a, b, 1, 1, 0) }

func (op addOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "qkv.add %v", op.shape) }
func (op addOp) Hashcode() uint32      { return hashOf(op) }
func (op addOp) String() string        { return "qkv.add" }

// DiffWRT: a + b is differentiable in both.
func (op addOp) DiffWRT(inputs int) []bool { return []bool{true, true} }

// SymDiff returns the output's gradient as the gradient of both inputs.
func (op addOp) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	return G.Nodes{grad, grad}, nil
}

// WriteSlot returns cache + slot ⊗ row for a cache (B, L, D), a slot (B, L,
// 1) and a row (B, 1, D): each sequence's new key or value written into
// the positions its slot marks (1 at the step's position, 0 elsewhere), in
// a cache that is zero there. It is how a cached decoding step grows its
// key/value cache by one position. Only the marked rows are multiplied,
// where gorgonia's broadcast product and sum repeated the slot and the row
// to (B, L, D) at every step. It is for inference: it has no gradient.
func WriteSlot(cache, slot, row *G.Node) (*G.Node, error) {
	for _, n := range []struct {
		node *G.Node
		name string
	}{{cache, "cache"}, {slot, "slot"}, {row, "row"}} {
		if err := CheckNode(n.node, n.name); err != nil {
			return nil, fmt.Errorf("graph: write slot: %w", err)
		}
	}
	c, s, r := cache.Shape(), slot.Shape(), row.Shape()
	if len(c) != 3 || !s.Eq(tensor.Shape{c[0], c[1], 1}) || !r.Eq(tensor.Shape{c[0], 1, c[2]}) || slot.Dtype() != cache.Dtype() || row.Dtype() != cache.Dtype() {
		return nil, shapeErrorf("graph: write slot: cache %v, slot %v and row %v: want (B, L, D), (B, L, 1) and (B, 1, D) of one dtype", c, s, r)
	}
	if err := CheckFloat(cache.Dtype()); err != nil {
		return nil, fmt.Errorf("graph: write slot: %w", err)
	}
	return apply(slotOp{shape: c.Clone()}, cache, slot, row)
}

// slotOp computes WriteSlot.
type slotOp struct {
	pureOp
	shape tensor.Shape // the cache's (B, L, D)
	buf   *output
}

func (op slotOp) withOutput(b *output) G.Op { op.buf = b; return op }

func (op slotOp) Arity() int                                     { return 3 }
func (op slotOp) Type() hm.Type                                  { return opType([]int{3, 3, 3}, 3) }
func (op slotOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.shape.Clone(), nil }
func (op slotOp) Do(vals ...G.Value) (G.Value, error) {
	return runKernel(op, vals, 3, op.shape, op.buf, false)
}
func (op slotOp) run64(in [][]float64, out []float64) { writeSlot(op, in, out) }
func (op slotOp) run32(in [][]float32, out []float32) { writeSlot(op, in, out) }
func (op slotOp) WriteHash(h hash.Hash)               { fmt.Fprintf(h, "qkv.writeSlot %v", op.shape) }
func (op slotOp) Hashcode() uint32                    { return hashOf(op) }
func (op slotOp) String() string                      { return "qkv.writeSlot" }
func (op slotOp) DiffWRT(inputs int) []bool           { return make([]bool, inputs) }
func (op slotOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("graph: %v is for inference and has no gradient", op)
}

// writeSlot copies the cache and adds slot[b, l] row[b] to the rows whose
// slot is not 0.
func writeSlot[T float32 | float64](op slotOp, in [][]T, out []T) {
	cache, slot, row := in[0], in[1], in[2]
	l, d := op.shape[1], op.shape[2]
	copy(out, cache)
	for b := range op.shape[0] {
		for p := range l {
			if s := slot[b*l+p]; s != 0 {
				y := out[(b*l+p)*d : (b*l+p+1)*d]
				for j, v := range row[b*d : (b+1)*d] {
					y[j] += s * v
				}
			}
		}
	}
}
