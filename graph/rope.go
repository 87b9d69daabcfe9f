package graph

import (
	"fmt"
	"hash"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/internal/gemm/par"
)

// DefaultRoPEBase is the base θ of RoPE's frequencies when RoPEOptions.Base
// is 0: 10000, as in the RoFormer paper, GPT-NeoX, GPT-J and Llama 1 and 2
// (Llama 3 uses 500000, Qwen3 1000000: set Base).
const DefaultRoPEBase = 10000

// RoPEOptions configures RoPE. The zero value is the Hugging Face default:
// half-split pairs, base 10000, every feature of a head rotated.
type RoPEOptions struct {
	// Interleaved pairs the features (2m, 2m+1) of each head, as Meta's
	// llama and GPT-J do (view_as_complex). false pairs (m, m + r/2), as
	// Hugging Face's rotate_half, GPT-NeoX, Qwen and gpt-oss do. The two
	// give different outputs from the same weights: a checkpoint moves from
	// one to the other by permuting the output features of each head of wq
	// and wk by [0, 2, 4, .., 1, 3, 5, ..] (what Hugging Face's Llama
	// converter does), after which they agree exactly.
	Interleaved bool
	// Base is θ in the frequencies θ^(-2m/r); 0 means DefaultRoPEBase. It
	// must be finite and greater than 1.
	Base float64
	// RotaryDim r is how many features of each head are rotated, the first
	// r; the other dk - r pass through unchanged (partial rotary: GPT-NeoX's
	// rotary_pct, GPT-J's rotary_dim). 0 means dk. It must be even and at
	// most dk. The frequencies are over r, not dk: θ^(-2m/r), m < r/2.
	RotaryDim int
}

// RoPE applies rotary position embedding to x, the queries or the keys of
// attention after their projection and before the heads are split: x is
// (B, S, D) with D = heads*dk, head h in features [h*dk, (h+1)*dk). For
// grouped-query keys, pass x = (B, S, G*dk) and heads = G.
//
// In every head, each pair m = 0..r/2-1 of features (see
// RoPEOptions.Interleaved for which two) is rotated, as the complex number
// x_i + i x_j, by the angle
//
//	pos[b, s] * base^(-2m/r)
//
// so that (x_i, x_j) becomes (x_i cos - x_j sin, x_j cos + x_i sin), where
// pos[b, s] is the absolute position of token s of sequence b. Then
// q_i · k_j depends on the positions only through i - j (tested to 1e-12).
//
// Positions are ids, not a table the op holds: make them with NewIDs(g, B,
// S, maxLen, name), whose Vocab bounds the positions, and Set them before
// each run, like the token ids. This way one graph serves every batch and
// every step of generation (a decode step rotates its one new token per row
// at the cache length t: x (B, 1, D) and positions (B, 1) holding t, see
// SequencePositions), a row may start anywhere (left padding, chunked
// prefill), the same node can feed every layer's RoPE and the learned
// positions of layers.Positions.At, and IDs.Set rejects a negative or
// out-of-range position with an error naming (b, s) before the graph runs.
// A position table held inside the op would instead change behind gorgonia's
// back: its value would not be part of the graph.
//
// The angles and the rotation are computed in float64 for both dtypes, and
// float32 results are rounded once at the end. This matches a float64
// reference (the PyTorch formulas of Hugging Face and Meta with float64
// angles, tools/torchref/variants_ref.py) to about 1e-15, tested at 1e-12.
// Hugging Face, Meta and gemma_pytorch compute the angles in float32 even for
// a float64 model: their angle at position p is off by up to p * 6e-8
// radians, so qkv agrees with them only to about 4e-8 * p: measured on
// |x| < 1, 2e-6 at positions below 64, 2e-5 below 512, 1.4e-4 below 4096.
//
// RoPE is differentiable in x; its gradient is the rotation by -angle (the
// rotation is orthogonal), itself a RoPE op, so that it can be
// differentiated again. Positions get no gradient. It is a custom op working
// in place on the (B, S, D) layout, heads where they lie, no reshapes. The
// cosines and sines are computed once per distinct position of the batch
// and shared by every head and sequence.
func RoPE(x *G.Node, heads int, pos *IDs, opt RoPEOptions) (*G.Node, error) {
	if err := CheckNode(x, "input"); err != nil {
		return nil, fmt.Errorf("graph: rope: %w", err)
	}
	if err := pos.Check(); err != nil {
		return nil, fmt.Errorf("graph: rope: positions: %w", err)
	}
	s := x.Shape()
	if s.Dims() != 3 {
		return nil, shapeErrorf("graph: rope: input %q has shape %v, want (B, S, heads*dk)", x.Name(), s)
	}
	if err := CheckFloat(x.Dtype()); err != nil {
		return nil, fmt.Errorf("graph: rope: %w", err)
	}
	b, n, d := s[0], s[1], s[2]
	if heads <= 0 || d%heads != 0 {
		return nil, shapeErrorf("graph: rope: input %q has %d features, which %d heads do not divide", x.Name(), d, heads)
	}
	dk := d / heads
	if dk%2 != 0 {
		return nil, shapeErrorf("graph: rope: RoPE needs an even head dimension, got dk = %d (%d features, %d heads)", dk, d, heads)
	}
	rot := opt.RotaryDim
	if rot == 0 {
		rot = dk
	}
	if rot < 0 || rot > dk || rot%2 != 0 {
		return nil, shapeErrorf("graph: rope: RotaryDim %d must be even and in (0, dk = %d]", opt.RotaryDim, dk)
	}
	base := opt.Base
	if base == 0 {
		base = DefaultRoPEBase
	}
	if !(base > 1) || math.IsInf(base, 1) {
		return nil, fmt.Errorf("graph: rope: base %v must be finite and greater than 1", opt.Base)
	}
	if pos.B != b || pos.S != n {
		return nil, shapeErrorf("graph: rope: positions %q are (B, S) = (%d, %d), want (%d, %d) to match input %q %v", pos.Node.Name(), pos.B, pos.S, b, n, x.Name(), s)
	}
	return apply(ropeOp{shape: s.Clone(), heads: heads, rot: rot, base: base, interleaved: opt.Interleaved}, x, pos.Node)
}

// SequencePositions returns the positions of len(starts) rows of s tokens,
// row b at starts[b], starts[b]+1, .., starts[b]+s-1, row-major (B, S), for
// IDs.Set: all starts 0 for a batch of whole sequences, the cache lengths
// for a decode step (s = 1). A negative start is an error.
func SequencePositions(starts []int, s int) ([]int, error) {
	if s <= 0 || len(starts) == 0 {
		return nil, fmt.Errorf("graph: positions: need rows and s > 0, got %d rows of %d", len(starts), s)
	}
	if err := CheckElements(len(starts), s); err != nil {
		return nil, fmt.Errorf("graph: positions: %w", err)
	}
	out := make([]int, 0, len(starts)*s)
	for b, p := range starts {
		if p < 0 || p > math.MaxInt-s {
			return nil, fmt.Errorf("graph: positions: start %d of row %d is negative or too large", p, b)
		}
		for i := 0; i < s; i++ {
			out = append(out, p+i)
		}
	}
	return out, nil
}

type ropeOp struct {
	pureOp
	shape       tensor.Shape // of x, (B, S, D)
	heads       int
	rot         int // features rotated per head, even, <= dk
	base        float64
	interleaved bool
	inverse     bool // rotate by -angle: the gradient
	buf         *output
	tab         *ropeTable
}

// ropeTable is an op's scratch, kept from one run to the next like its
// output: the inverse frequencies and the cosines and sines of the run.
type ropeTable struct {
	invFreq []float64 // (r/2)
	cs      []float64 // (rows, r): cos, sin of pair m at 2m, 2m+1
}

func (op ropeOp) withOutput(b *output) G.Op {
	op.buf, op.tab = b, new(ropeTable)
	return op
}

func (op ropeOp) Arity() int { return 2 }

func (op ropeOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	x := &G.TensorType{Dims: 3, Of: a}
	return hm.NewFnType(x, &G.TensorType{Dims: 1, Of: tensor.Int}, x)
}

func (op ropeOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.shape.Clone(), nil }

func (op ropeOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != 2 {
		return nil, fmt.Errorf("graph: %v: want 2 inputs, got %d", op, len(vals))
	}
	x, ok := vals[0].(*tensor.Dense)
	if !ok || x == nil || !x.Shape().Eq(op.shape) {
		return nil, fmt.Errorf("graph: %v: input must be a dense %v tensor, got %s", op, op.shape, describeValue(vals[0]))
	}
	p, ok := vals[1].(*tensor.Dense)
	b, n := op.shape[0], op.shape[1]
	if !ok || p == nil || p.Dtype() != tensor.Int || p.Shape().TotalSize() != b*n {
		return nil, fmt.Errorf("graph: %v: positions must be a dense int tensor of B*S = %d, got %s", op, b*n, describeValue(vals[1]))
	}
	pos := p.Ints() // (B*S)
	lo, err := op.table(pos)
	if err != nil {
		return nil, err
	}
	out := op.buf.get(x.Dtype(), op.shape, false)
	switch x.Dtype() {
	case tensor.Float64:
		runRoPE(op, x.Float64s(), pos, lo, out.Float64s())
	case tensor.Float32:
		runRoPE(op, x.Float32s(), pos, lo, out.Float32s())
	default:
		return nil, fmt.Errorf("graph: %v: dtype %v is not supported", op, x.Dtype())
	}
	return out, nil
}

// describeValue names v's type, dtype and shape for an error, nil included.
func describeValue(v G.Value) string {
	if d, ok := v.(*tensor.Dense); v == nil || (ok && d == nil) {
		return "nothing"
	}
	return fmt.Sprintf("%T %v %v", v, v.Dtype(), v.Shape())
}

// table fills op.tab.cs with the cosines and sines of this run's positions,
// sines negated for the inverse, and returns how row i of x finds its
// entries: at pos[i] - lo when the positions span fewer values than there
// are rows (a batch of sequences at 0..S-1, a decode step at one t: each
// distinct position once), else at row i (lo = -1).
func (op ropeOp) table(pos []int) (lo int, err error) {
	t := op.tab
	half := op.rot / 2
	if len(t.invFreq) != half {
		t.invFreq = make([]float64, half)
		for m := range t.invFreq {
			// The formula of Hugging Face's and Meta's inv_freq, in float64.
			t.invFreq[m] = 1 / math.Pow(op.base, float64(2*m)/float64(op.rot))
		}
	}
	lo, hi := math.MaxInt, 0
	for i, p := range pos {
		if p < 0 {
			return 0, fmt.Errorf("graph: %v: position %d at (b=%d, s=%d) is negative: bind positions with IDs.Set", op, p, i/op.shape[1], i%op.shape[1])
		}
		lo, hi = min(lo, p), max(hi, p)
	}
	rows, dense := len(pos), hi-lo < len(pos)
	if dense {
		rows = hi - lo + 1
	}
	if cap(t.cs) < rows*op.rot {
		t.cs = make([]float64, rows*op.rot)
	}
	t.cs = t.cs[:rows*op.rot]
	sign := 1.0
	if op.inverse {
		sign = -1
	}
	for r := 0; r < rows; r++ {
		p := lo + r
		if !dense {
			p = pos[r]
		}
		cs := t.cs[r*op.rot : (r+1)*op.rot]
		for m, f := range t.invFreq {
			s, c := math.Sincos(float64(p) * f)
			cs[2*m], cs[2*m+1] = c, sign*s
		}
	}
	if !dense {
		lo = -1
	}
	return lo, nil
}

// ropeBlock is about how many elements a block of rows holds.
const ropeBlock = 1 << 13

// runRoPE rotates every head of every row of x (B*S, D) into out (B*S, D),
// in float64, with the table op.table filled for pos (lo as it returned).
// Blocks of rows go to the cores; each writes only its rows.
func runRoPE[T float32 | float64](op ropeOp, x []T, pos []int, lo int, out []T) {
	j := jobOf[ropeJob[T]](op.buf)
	j.op, j.x, j.pos, j.lo, j.out = op, x, pos, lo, out
	j.per = max(1, ropeBlock/op.shape[2])
	rows := len(x) / op.shape[2]
	par.Run((rows+j.per-1)/j.per, par.WorkersFor(len(x)), j)
}

// ropeJob is runRoPE's work: item blk is the block of rows
// [blk per, (blk+1) per).
type ropeJob[T float32 | float64] struct {
	op     ropeOp
	x, out []T
	pos    []int
	lo     int
	per    int
}

func (j *ropeJob[T]) Item(_, blk int) {
	op := j.op
	d := op.shape[2]
	dk, half := d/op.heads, op.rot/2
	for r := blk * j.per; r < min((blk+1)*j.per, len(j.x)/d); r++ {
		t := r
		if j.lo >= 0 {
			t = j.pos[r] - j.lo
		}
		c := op.tab.cs[t*op.rot : (t+1)*op.rot] // (r/2, 2): cos, sin of each pair
		for h := 0; h < op.heads; h++ {
			xh, oh := j.x[r*d+h*dk:r*d+(h+1)*dk], j.out[r*d+h*dk:r*d+(h+1)*dk] // (dk)
			if op.interleaved {
				for m := 0; m < half; m++ {
					cos, sin := c[2*m], c[2*m+1]
					a, b := float64(xh[2*m]), float64(xh[2*m+1])
					oh[2*m], oh[2*m+1] = T(a*cos-b*sin), T(b*cos+a*sin)
				}
			} else {
				for m := 0; m < half; m++ {
					cos, sin := c[2*m], c[2*m+1]
					a, b := float64(xh[m]), float64(xh[m+half])
					oh[m], oh[m+half] = T(a*cos-b*sin), T(b*cos+a*sin)
				}
			}
			copy(oh[op.rot:], xh[op.rot:])
		}
	}
}

func (op ropeOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.rope %v %d %d %v %t %t", op.shape, op.heads, op.rot, op.base, op.interleaved, op.inverse)
}
func (op ropeOp) Hashcode() uint32 { return hashOf(op) }

func (op ropeOp) String() string {
	if op.inverse {
		return "qkv.RoPEInverse"
	}
	return "qkv.RoPE"
}

// DiffWRT: differentiable in x, not in the positions.
func (op ropeOp) DiffWRT(inputs int) []bool { return []bool{true, false}[:inputs] }

// SymDiff returns the gradient of x, the rotation of grad by the opposite
// angles, and none for the positions.
func (op ropeOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	if len(inputs) != 2 {
		return nil, fmt.Errorf("graph: %v: want 2 inputs, got %d", op, len(inputs))
	}
	inv := ropeOp{shape: op.shape, heads: op.heads, rot: op.rot, base: op.base, interleaved: op.interleaved, inverse: !op.inverse}
	dx, err := apply(inv, grad, inputs[1])
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx, nil}, nil
}
