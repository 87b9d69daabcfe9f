package graph

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Embed returns the rows of table (Vocab, D) picked by ids, shaped (B, S, D):
// out[b, s] = table[ids[b, s]]. Its gradient with respect to the table adds
// each position's gradient into the row of its id, in the order of the
// positions, so repeated ids accumulate the same way every run.
//
// It is one of qkv's ops rather than G.ByIndices, whose gradient is wrong
// along any axis but 0, which returns a wrong row for an id past the end
// without an error (TestDefectByIndicesOutOfRange), and which allocated its
// output and its gradient at every run. The table must have a row for every
// id the input may hold: IDs.Set has already rejected ids outside [0,
// ids.Vocab), and the op checks again.
func Embed(table *G.Node, ids *IDs) (*G.Node, error) {
	if err := CheckNode(table, "table"); err != nil {
		return nil, fmt.Errorf("graph: embed: %w", err)
	}
	if err := ids.Check(); err != nil {
		return nil, fmt.Errorf("graph: embed: %w", err)
	}
	s := table.Shape()
	if len(s) != 2 {
		return nil, shapeErrorf("graph: embed: table %q must be (vocab, dim), got shape %v", table.Name(), s)
	}
	if ids.Vocab > s[0] {
		return nil, shapeErrorf("graph: embed: ids %q range over %d tokens but table %q has %d rows", ids.Node.Name(), ids.Vocab, table.Name(), s[0])
	}
	// B*S ids and a (vocab, dim) table may each be small enough while the
	// (B, S, dim) rows they select are not.
	if err := CheckElements(ids.B, ids.S, s[1]); err != nil {
		return nil, fmt.Errorf("graph: embed: output (B, S, dim): %w", err)
	}
	if err := CheckFloat(table.Dtype()); err != nil {
		return nil, fmt.Errorf("graph: embed: %w", err)
	}
	return G.ApplyOp(embedOp{vocab: s[0], dim: s[1], b: ids.B, s: ids.S, buf: new(output)}, table, ids.Node)
}

// embedOp gathers rows of a (vocab, dim) table by (B*S) ids into (B, S,
// dim), or with grad scatters a (B, S, dim) gradient back into (vocab, dim).
type embedOp struct {
	pureOp
	vocab, dim, b, s int
	grad             bool
	buf              *output
}

func (op embedOp) Arity() int { return 2 }

func (op embedOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	table := &G.TensorType{Dims: 2, Of: a}
	ids := &G.TensorType{Dims: 1, Of: tensor.Int}
	rows := &G.TensorType{Dims: 3, Of: a}
	if op.grad {
		return hm.NewFnType(rows, ids, table)
	}
	return hm.NewFnType(table, ids, rows)
}

func (op embedOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.outShape(), nil }

func (op embedOp) outShape() tensor.Shape {
	if op.grad {
		return tensor.Shape{op.vocab, op.dim}
	}
	return tensor.Shape{op.b, op.s, op.dim}
}

func (op embedOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != 2 {
		return nil, fmt.Errorf("graph: %v: want 2 inputs, got %d", op, len(vals))
	}
	x, ok1 := vals[0].(*tensor.Dense)
	ids, ok2 := vals[1].(*tensor.Dense)
	in := op.vocab * op.dim
	if op.grad {
		in = op.b * op.s * op.dim
	}
	if !ok1 || !ok2 || x.Size() != in || ids.Dtype() != tensor.Int || ids.Size() != op.b*op.s {
		return nil, fmt.Errorf("graph: %v: want %d floats and %d int ids, got %T %v and %T %v", op, in, op.b*op.s, vals[0], vals[0].Shape(), vals[1], vals[1].Shape())
	}
	idx := ids.Ints()
	for i, id := range idx {
		if id < 0 || id >= op.vocab {
			return nil, fmt.Errorf("graph: %v: id %d at %d is outside [0, %d)", op, id, i, op.vocab)
		}
	}
	out := op.buf.get(x.Dtype(), op.outShape(), op.grad)
	switch x.Dtype() {
	case tensor.Float64:
		gather(op, x.Float64s(), idx, out.Float64s())
	case tensor.Float32:
		gather(op, x.Float32s(), idx, out.Float32s())
	default:
		return nil, fmt.Errorf("graph: %v: dtype %v is not supported", op, x.Dtype())
	}
	return out, nil
}

// gather copies table row ids[i] to row i of out, or with op.grad adds row
// i of the gradient into row ids[i] of out (zeroed), i in order.
func gather[T float32 | float64](op embedOp, x []T, ids []int, out []T) {
	d := op.dim
	for i, id := range ids {
		if op.grad {
			add(out[id*d:(id+1)*d], out[id*d:(id+1)*d], x[i*d:(i+1)*d])
		} else {
			copy(out[i*d:(i+1)*d], x[id*d:(id+1)*d])
		}
	}
}

func (op embedOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.embed %d %d %d %d %t", op.vocab, op.dim, op.b, op.s, op.grad)
}
func (op embedOp) Hashcode() uint32 { return hashOf(op) }

func (op embedOp) String() string { return gradName("qkv.embed", op.grad) }

// DiffWRT: the rows are differentiable in the table, not in the ids; the
// gradient op is not differentiated again.
func (op embedOp) DiffWRT(int) []bool { return []bool{!op.grad, false} }

// SymDiff returns the table's gradient, the rows' gradient scattered by id.
func (op embedOp) SymDiff(inputs G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	if op.grad {
		return nil, fmt.Errorf("graph: %v is not differentiable", op)
	}
	g := op
	g.grad, g.buf = true, new(output)
	dt, err := G.ApplyOp(g, grad, inputs[1])
	if err != nil {
		return nil, err
	}
	return G.Nodes{dt, nil}, nil
}

// AddPositions returns x + table[:S] for x (B, S, D) and a table (L, D) of
// at least S rows, the rows added to every sequence of the batch: learned
// or sinusoidal positions. Its gradient is the output's for x, and for the
// table the sum over the batch in rows [0, S), 0 in the rest.
//
// One op each way instead of gorgonia's slice, broadcast (repeat) and add,
// and a sum for the gradient, each of which allocated at every run.
func AddPositions(x, table *G.Node) (*G.Node, error) {
	if err := CheckNode(x, "input"); err != nil {
		return nil, fmt.Errorf("graph: add positions: %w", err)
	}
	if err := CheckNode(table, "table"); err != nil {
		return nil, fmt.Errorf("graph: add positions: %w", err)
	}
	xs, ts := x.Shape(), table.Shape()
	if len(xs) != 3 || len(ts) != 2 || ts[0] < xs[1] || ts[1] != xs[2] || x.Dtype() != table.Dtype() {
		return nil, shapeErrorf("graph: add positions: input %v %v and table %v %v: want (B, S, D) and (L >= S, D) of one dtype", x.Dtype(), xs, table.Dtype(), ts)
	}
	if err := CheckFloat(x.Dtype()); err != nil {
		return nil, fmt.Errorf("graph: add positions: %w", err)
	}
	return G.ApplyOp(positionsOp{b: xs[0], s: xs[1], d: xs[2], l: ts[0], buf: new(output)}, x, table)
}

// positionsOp computes x + table[:S] from (x, table), or with grad the
// table's gradient from the output's gradient.
type positionsOp struct {
	pureOp
	b, s, d, l int
	grad       bool
	buf        *output
}

func (op positionsOp) Arity() int {
	if op.grad {
		return 1
	}
	return 2
}

func (op positionsOp) Type() hm.Type {
	if op.grad {
		return opType([]int{3}, 2)
	}
	return opType([]int{3, 2}, 3)
}

func (op positionsOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.outShape(), nil }

func (op positionsOp) outShape() tensor.Shape {
	if op.grad {
		return tensor.Shape{op.l, op.d}
	}
	return tensor.Shape{op.b, op.s, op.d}
}

func (op positionsOp) Do(vals ...G.Value) (G.Value, error) {
	return runKernel(op, vals, op.Arity(), op.outShape(), op.buf, op.grad)
}

func (op positionsOp) run64(in [][]float64, out []float64) { addPositions(op, in, out) }
func (op positionsOp) run32(in [][]float32, out []float32) { addPositions(op, in, out) }

// addPositions adds the table's first S rows to each sequence, or with
// op.grad sums the gradient's sequences into them (out zeroed), sequence by
// sequence in order.
func addPositions[T float32 | float64](op positionsOp, in [][]T, out []T) {
	n := op.s * op.d
	for b := range op.b {
		if op.grad {
			add(out[:n], out[:n], in[0][b*n:(b+1)*n])
		} else {
			add(out[b*n:(b+1)*n], in[0][b*n:(b+1)*n], in[1][:n])
		}
	}
}

func (op positionsOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.positions %d %d %d %d %t", op.b, op.s, op.d, op.l, op.grad)
}
func (op positionsOp) Hashcode() uint32 { return hashOf(op) }

func (op positionsOp) String() string { return gradName("qkv.addPositions", op.grad) }

// DiffWRT: differentiable in both x and the table; the gradient op is not
// differentiated again.
func (op positionsOp) DiffWRT(inputs int) []bool { return diffAll(inputs, !op.grad) }

// SymDiff returns the output's gradient for x and its sum over the batch
// for the table.
func (op positionsOp) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	if op.grad {
		return nil, fmt.Errorf("graph: %v is not differentiable", op)
	}
	g := op
	g.grad, g.buf = true, new(output)
	dt, err := G.ApplyOp(g, grad)
	if err != nil {
		return nil, err
	}
	return G.Nodes{grad, dt}, nil
}
