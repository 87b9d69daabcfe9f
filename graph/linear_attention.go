package graph

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	fastgemm "github.com/qkv-dev/qkv/internal/gemm"
	"github.com/qkv-dev/qkv/internal/gemm/par"
)

// LinearSpec is everything about one linear attention besides its inputs.
//
// For sequence b, head h and query i, with visible keys j (j < KeyLengths[b],
// and j <= i if Causal),
//
//	S_i = sum_j φ(k_j) v_jᵀ       (dφ, dv)
//	z_i = sum_j φ(k_j)            (dφ)
//	out_i = φ(q_i)ᵀ S_i / (φ(q_i)ᵀ z_i + LinearEps)   with Normalize
//	out_i = φ(q_i)ᵀ S_i                                without
//
// which is attention with the weights φ(q_i)·φ(k_j) in place of the
// softmax's exp(q_i·k_j/sqrt(d)) (Katharopoulos et al. 2020; Based, Arora
// et al. 2024). The inputs are the features already (Features), so a
// feature map is no field of the spec.
type LinearSpec struct {
	// Heads is H: head h reads columns [h*dφ, (h+1)*dφ) of φq and φk and
	// [h*dv, (h+1)*dv) of v.
	Heads int
	// Causal: query i sees keys j <= i (then Sq must equal Sk); otherwise
	// every key.
	Causal bool
	// Normalize divides each output row by φ(q_i)ᵀ z_i + LinearEps.
	Normalize bool
	// Chunk is the number of rows per chunk of the fused causal form; 0
	// means DefaultLinearChunk. Any value from 1 works and need not divide
	// the sequence; a chunk longer than the sequence is cut to it. It
	// changes nothing but rounding, and nothing at all without Causal
	// (the non-causal form is one state over all keys) or with Composed.
	Chunk int
	// Impl is Composed (gorgonia's ops, the O(n²) masked form, the
	// reference) or Fused ("", the chunked custom op). Flash is not an
	// implementation of linear attention.
	Impl Impl
	// KeyLengths is nil or B lengths, read when the graph runs (so they may
	// be updated in place between runs, as MaskNode.KeyLengths is): keys
	// j >= KeyLengths[b] of sequence b are hidden (padding). A query with
	// no visible key gets output 0 and zero gradients. A length outside
	// [0, Sk] (MaskNode.KeyLengths' -1 for a mask that is not key padding)
	// is an error of the run.
	KeyLengths []int
}

// LinearEps is added to each normalized row's denominator φ(q_i)ᵀ z_i:
// Based's eps (zoology's based.py), 1e-12. Its only role is to turn the
// 0/0 of a query that sees no key (or whose features are all zero, as ReLU
// can give) into 0/1e-12 = 0. It is no regularizer: with the positive maps
// (elu1, taylor) the denominator is a sum of positive terms, and 1e-12
// beside a sum of order 1 is lost to rounding in float64 and float32
// alike. In float32 it is representable (about 9.9999998e-13, a normal
// number, far above float32's smallest, 1.2e-38), so it behaves the same
// in both dtypes; a denominator that cancels to ~0 (the identity map's
// signed features) is unstable whatever eps.
const LinearEps = 1e-12

// DefaultLinearChunk is the number of rows per chunk of the fused causal
// form when LinearSpec.Chunk is 0: each chunk costs two (C, C) products
// beside the (C, dφ, dv) ones, so a chunk of about dφ+dv rows balances the
// quadratic part against the state's.
const DefaultLinearChunk = 64

// LinearAttend returns linear attention (see LinearSpec) of the features
// phiQ (B, Sq, H*dφ) and phiK (B, Sk, H*dφ) over the values v (B, Sk, H*dv):
// (B, Sq, H*dv), the heads side by side. It is differentiable in all three.
//
// Composed builds the O(n²) masked form from gorgonia's ops, the formula
// as a learner reads it:
//
//	A = (φQ φKᵀ) ⊙ M          M the 0/1 mask of causality and padding
//	out = A V / (A 1 + eps)   (A V without Normalize)
//
// Fused is a custom op in the chunked form (flash-linear-attention's
// "chunk" mode), O(n dφ dv) time and O(n (dφ + dv) + C² + dφ dv) memory,
// with a hand-written backward pass: see linearCausal, linearCausalGrad and,
// without Causal, linearFull and linearFullGrad. Its products run on
// qkv's GEMM in the data's dtype, and the state S, the key sum z and their
// gradients accumulate in the data's dtype too (float32 for float32 data,
// as the products of every other op here). The (sequence, head) pairs are
// split over the cores, each written by one goroutine in a fixed order, so
// the results are the same bits at any GOMAXPROCS.
//
// Errors, while the graph is built, name what is wrong: nil nodes,
// shapes (matching ErrShape), dtypes, heads that do not divide the widths,
// Causal with Sq != Sk, a negative Chunk, KeyLengths of another length than
// B, an unknown Impl or Flash.
func LinearAttend(phiQ, phiK, v *G.Node, s LinearSpec) (*G.Node, error) {
	name := "graph: " + s.Impl.String() + " linear attention"
	d, err := s.check(phiQ, phiK, v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var out *G.Node
	if s.Impl == Composed {
		out, err = composedLinear(phiQ, phiK, v, s.KeyLengths, d)
	} else {
		op := linAttnOp{dims: d, out: linForward, lengths: s.KeyLengths}
		out, err = apply(op, phiQ, phiK, v)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// linearDims are the sizes of one linear attention.
type linearDims struct {
	B, Sq, Sk, H int
	F, E         int // dφ and dv, the features and values per head
	C            int // rows per chunk (causal), at most Sk
	Causal       bool
	Normalize    bool
	Padded       bool // KeyLengths are given
}

// check validates s against the inputs and returns the sizes.
func (s LinearSpec) check(q, k, v *G.Node) (linearDims, error) {
	if err := checkNodes([]*G.Node{q, k, v}, "phiQ", "phiK", "v"); err != nil {
		return linearDims{}, err
	}
	switch {
	case s.Impl == Flash:
		return linearDims{}, fmt.Errorf("LinearSpec.Impl %q: linear attention is %q (the chunked op, which forms no (Sq, Sk) matrix either) or %q", Flash, Fused, Composed)
	case !s.Impl.Valid():
		return linearDims{}, fmt.Errorf("unknown LinearSpec.Impl %q, want %q or %q", string(s.Impl), Fused, Composed)
	case s.Chunk < 0:
		return linearDims{}, fmt.Errorf("LinearSpec.Chunk %d is negative: use 0 for the default (%d) or any size from 1", s.Chunk, DefaultLinearChunk)
	}
	qs, ks, vs := q.Shape(), k.Shape(), v.Shape()
	if len(qs) != 3 || len(ks) != 3 || len(vs) != 3 || ks[0] != qs[0] || vs[0] != qs[0] || vs[1] != ks[1] || ks[2] != qs[2] {
		return linearDims{}, shapeErrorf("phiQ %v, phiK %v, v %v: want (B, Sq, H*dφ), (B, Sk, H*dφ), (B, Sk, H*dv)", qs, ks, vs)
	}
	h := s.Heads
	if h <= 0 || qs[2]%h != 0 || vs[2]%h != 0 {
		return linearDims{}, shapeErrorf("phiQ %v, v %v: %d heads do not divide the features %d and the values %d", qs, vs, h, qs[2], vs[2])
	}
	d := linearDims{B: qs[0], Sq: qs[1], Sk: ks[1], H: h, F: qs[2] / h, E: vs[2] / h,
		Causal: s.Causal, Normalize: s.Normalize, Padded: s.KeyLengths != nil}
	if s.Causal && d.Sq != d.Sk {
		return linearDims{}, shapeErrorf("causal linear attention needs as many queries as keys, got Sq = %d, Sk = %d", d.Sq, d.Sk)
	}
	if s.KeyLengths != nil && len(s.KeyLengths) != d.B {
		return linearDims{}, shapeErrorf("LinearSpec.KeyLengths has %d lengths, want one per sequence, B = %d", len(s.KeyLengths), d.B)
	}
	if err := CheckFloat(q.Dtype()); err != nil {
		return linearDims{}, err
	}
	for _, n := range []*G.Node{k, v} {
		if n.Dtype() != q.Dtype() {
			return linearDims{}, fmt.Errorf("phiQ is %v but %q is %v", q.Dtype(), n.Name(), n.Dtype())
		}
	}
	d.C = s.Chunk
	if d.C == 0 {
		d.C = DefaultLinearChunk
	}
	d.C = min(d.C, d.Sk)
	// What is allocated when the graph runs, where a failed make cannot be
	// caught: the output, the stacked gradients, each worker's scratch and,
	// composed, the (Sq, Sk) weights of every head.
	if err := CheckElements(d.B, d.Sq, d.H*d.E); err != nil {
		return linearDims{}, fmt.Errorf("output: %w", err)
	}
	if err := CheckElements(d.B, d.Sk, d.H*d.F); err != nil {
		return linearDims{}, fmt.Errorf("phiK: %w", err)
	}
	if err := CheckElements(d.B, d.stackedWidth()); err != nil {
		return linearDims{}, fmt.Errorf("gradients: %w", err)
	}
	if err := CheckElements(max(d.Sq, d.Sk), d.E+d.F+1); err != nil {
		return linearDims{}, fmt.Errorf("per-head buffer: %w", err)
	}
	if err := CheckElements(d.F, d.E); err != nil {
		return linearDims{}, fmt.Errorf("state: %w", err)
	}
	if s.Impl == Composed {
		if err := CheckElements(d.B*d.H, d.Sq, d.Sk); err != nil {
			return linearDims{}, fmt.Errorf("composed weights (B*H, Sq, Sk): %w", err)
		}
	}
	return d, nil
}

// stackedWidth is the width of a sequence's stacked gradients: dφq
// (Sq, H*dφ), dφk (Sk, H*dφ) and dv (Sk, H*dv), one after the other. Each
// term is a checked tensor size; the sum of three stays within int64.
func (d linearDims) stackedWidth() int { return (d.Sq+d.Sk)*d.H*d.F + d.Sk*d.H*d.E }

// checkLengths returns an error unless every length is in [0, sk]; what
// names the op (a func, so that a run that passes does not box the op
// into an interface, which would allocate).
func checkLengths(what func() string, lengths []int, sk int) error {
	for b, l := range lengths {
		if l < 0 || l > sk {
			return fmt.Errorf("graph: %s: LinearSpec.KeyLengths[%d] = %d, want 0..%d (a mask whose MaskNode.KeyLengths is -1 is not key padding, which is all linear attention can hide)", what(), b, l, sk)
		}
	}
	return nil
}

// composedLinear is LinearAttend's Composed implementation, gorgonia's
// ops only but for the mask (an element-wise op that reads KeyLengths at
// every run), so that gorgonia derives the backward pass:
//
//	Q, K, V = split heads            (B*H, S, dφ), (B*H, Sk, dφ), (B*H, Sk, dv)
//	A   = (Q Kᵀ) ⊙ M                 (B*H, Sq, Sk), M 1 where visible, 0 where hidden
//	out = A V / (A 1 + eps)          (B*H, Sq, dv); A V without Normalize
//
// It keeps the (Sq, Sk) weights of every head: the reference the chunked
// op is tested against, not for long sequences.
func composedLinear(q, k, v *G.Node, lengths []int, d linearDims) (*G.Node, error) {
	c := composer{dt: q.Dtype()}
	Q := c.splitHeads(q, d.H) // (B*H, Sq, dφ)
	K := c.splitHeads(k, d.H) // (B*H, Sk, dφ)
	V := c.splitHeads(v, d.H) // (B*H, Sk, dv)
	A := c.matmul(Q, K, true) // Q Kᵀ  (B*H, Sq, Sk)
	if d.Causal || d.Padded { // ⊙ M
		A = c.unary(func(a *G.Node) (*G.Node, error) {
			return apply(linearMaskOp{dims: d, lengths: lengths}, a)
		}, A)
	}
	O := c.matmul(A, V, false) // A V  (B*H, Sq, dv)
	if d.Normalize {
		den := c.reduce(G.Sum, A)                           // A 1  (B*H, Sq)
		den = c.binary(G.Add, den, Scalar(c.dt, LinearEps)) // + eps
		O = c.rowwise(G.BroadcastHadamardDiv, O, den)
	}
	out := c.mergeHeads(O, d.B, d.H) // (B, Sq, H*dv)
	return out, c.err
}

// linearMaskOp multiplies the weights A (B*H, Sq, Sk) of composedLinear by
// the 0/1 mask M of causality (j <= i) and padding (j < KeyLengths[b]).
// It is linear and its own adjoint: the gradient is the same op applied to
// the incoming gradient, dA ⊙ M.
type linearMaskOp struct {
	pureOp
	dims    linearDims
	lengths []int
	buf     *output
}

func (op linearMaskOp) withOutput(b *output) G.Op { op.buf = b; return op }
func (op linearMaskOp) Arity() int                { return 1 }
func (op linearMaskOp) Type() hm.Type             { return opType([]int{3}, 3) }
func (op linearMaskOp) shape() tensor.Shape {
	return tensor.Shape{op.dims.B * op.dims.H, op.dims.Sq, op.dims.Sk}
}
func (op linearMaskOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.shape(), nil }

func (op linearMaskOp) Do(vals ...G.Value) (G.Value, error) {
	d := op.dims
	if len(vals) == 1 && vals[0] != nil && vals[0].Shape().TotalSize() != d.B*d.H*d.Sq*d.Sk {
		return nil, fmt.Errorf("graph: %v: input is %v, want (%d, %d, %d)", op, vals[0].Shape(), d.B*d.H, d.Sq, d.Sk)
	}
	if err := checkLengths(op.String, op.lengths, d.Sk); err != nil {
		return nil, err
	}
	return runKernel(op, vals, 1, op.shape(), op.buf, false)
}

func (op linearMaskOp) run64(in [][]float64, out []float64) { runLinearMask(op, in[0], out) }
func (op linearMaskOp) run32(in [][]float32, out []float32) { runLinearMask(op, in[0], out) }

func runLinearMask[T float32 | float64](op linearMaskOp, a, out []T) {
	d := op.dims
	for bh := range d.B * d.H {
		l := d.Sk
		if op.lengths != nil {
			l = op.lengths[bh/d.H]
		}
		for i := range d.Sq {
			row := (bh*d.Sq + i) * d.Sk
			end := l
			if d.Causal {
				end = min(end, i+1)
			}
			copy(out[row:row+end], a[row:row+end])
			clear(out[row+end : row+d.Sk])
		}
	}
}

func (op linearMaskOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.linearmask %+v %p/%d", op.dims, op.lengths, len(op.lengths))
}
func (op linearMaskOp) Hashcode() uint32 { return hashOf(op) }
func (op linearMaskOp) String() string   { return "qkv.LinearMask" }

// DiffWRT: the masked weights are differentiable in the weights.
func (op linearMaskOp) DiffWRT(int) []bool { return []bool{true} }

// SymDiff returns dA ⊙ M, the same op over the gradient.
func (op linearMaskOp) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	g, err := apply(linearMaskOp{dims: op.dims, lengths: op.lengths}, grad)
	if err != nil {
		return nil, err
	}
	return G.Nodes{g}, nil
}

// What a linAttnOp computes, and from which inputs:
const (
	linForward = iota // out (B, Sq, H*dv) from φq, φk, v
	linGrad           // dφq, dφk, dv stacked per sequence (B, stackedWidth) from φq, φk, v, dout
	linGradQ          // dφq (B, Sq, H*dφ) from the stacked gradients
	linGradK          // dφk (B, Sk, H*dφ) from the stacked gradients
	linGradV          // dv (B, Sk, H*dv) from the stacked gradients
)

// linAttnOp is the fused (chunked) linear attention or a step of its
// gradient; which one is out. lengths is LinearSpec.KeyLengths.
type linAttnOp struct {
	pureOp
	dims    linearDims
	out     int
	lengths []int
	buf     *output
}

func (op linAttnOp) withOutput(b *output) G.Op { op.buf = b; return op }

// roles lists the op's inputs, in order.
func (op linAttnOp) roles() roleList {
	var l roleList
	switch op.out {
	case linForward, linGrad:
		l.add(roleQ, true)
		l.add(roleK, true)
		l.add(roleV, true)
		l.add(roleDOut, op.out == linGrad)
	default: // the stacked gradients, (B, stackedWidth) here
		l.add(roleStacked, true)
	}
	return l
}

// size is the number of elements of the input of role r.
func (op linAttnOp) size(r role) int {
	d := op.dims
	switch r {
	case roleQ:
		return d.B * d.Sq * d.H * d.F
	case roleK:
		return d.B * d.Sk * d.H * d.F
	case roleV:
		return d.B * d.Sk * d.H * d.E
	case roleDOut:
		return d.B * d.Sq * d.H * d.E
	}
	return d.B * d.stackedWidth()
}

// shape is the output's shape, in buf.
func (op linAttnOp) shape(buf *[3]int) tensor.Shape {
	d := op.dims
	s := tensor.Shape(buf[:0])
	switch op.out {
	case linGrad:
		return append(s, d.B, d.stackedWidth())
	case linGradQ:
		return append(s, d.B, d.Sq, d.H*d.F)
	case linGradK:
		return append(s, d.B, d.Sk, d.H*d.F)
	case linGradV:
		return append(s, d.B, d.Sk, d.H*d.E)
	}
	return append(s, d.B, d.Sq, d.H*d.E)
}

func (op linAttnOp) Arity() int {
	l := op.roles()
	return l.n
}

func (op linAttnOp) Type() hm.Type {
	l := op.roles()
	ranks := make([]int, l.n)
	for i, r := range l.all() {
		ranks[i] = 3
		if r == roleStacked {
			ranks[i] = 2
		}
	}
	var out [3]int
	return opType(ranks, op.shape(&out).Dims())
}

func (op linAttnOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	var buf [3]int
	return op.shape(&buf).Clone(), nil
}

func (op linAttnOp) Do(vals ...G.Value) (G.Value, error) {
	// Sizes the kernel relies on: gorgonia checks ranks, not sizes.
	l := op.roles()
	for i, r := range l.all() {
		if i < len(vals) && vals[i] != nil && vals[i].Shape().TotalSize() != op.size(r) {
			return nil, fmt.Errorf("graph: %v: input %d has shape %v, want %d elements", op, i, vals[i].Shape(), op.size(r))
		}
	}
	if op.out == linForward || op.out == linGrad {
		if err := checkLengths(op.String, op.lengths, op.dims.Sk); err != nil {
			return nil, err
		}
	}
	var buf [3]int
	return runKernel(op, vals, op.Arity(), op.shape(&buf), op.buf, false)
}

func (op linAttnOp) run64(in [][]float64, out []float64) { runLinAttn(op, in, out) }
func (op linAttnOp) run32(in [][]float32, out []float32) { runLinAttn(op, in, out) }

// runLinAttn runs op: the forward pass and the gradient head by head, the
// (sequence, head) pairs split over the cores, each writing only its own
// columns of out in a fixed order, so that results do not depend on the
// number of workers; the extractions copy a region of the stacked
// gradients.
func runLinAttn[T float32 | float64](op linAttnOp, in [][]T, out []T) {
	d := op.dims
	switch op.out {
	case linGradQ, linGradK, linGradV:
		w := d.stackedWidth()
		first, size := 0, d.Sq*d.H*d.F
		switch op.out {
		case linGradK:
			first, size = d.Sq*d.H*d.F, d.Sk*d.H*d.F
		case linGradV:
			first, size = (d.Sq+d.Sk)*d.H*d.F, d.Sk*d.H*d.E
		}
		for b := range d.B {
			copy(out[b*size:][:size], in[0][b*w+first:][:size])
		}
		return
	}
	j := jobOf[linAttnJob[T]](op.buf)
	j.op, j.in, j.out = op, in, out
	// The multiply-adds of a head: a few (n, dφ, dv) products and, causal,
	// a few (n, C, dφ + dv).
	work := d.B * d.H * max(d.Sq, d.Sk) * (d.F*d.E + d.C*(d.F+d.E))
	workers := par.WorkersFor(work)
	for len(j.scratch) < workers {
		j.scratch = append(j.scratch, new(linearScratch[T]))
	}
	par.Run(d.B*d.H, workers, j)
}

// linAttnJob is runLinAttn's work: item b*H + h is head h of sequence b.
type linAttnJob[T float32 | float64] struct {
	op      linAttnOp
	in      [][]T
	out     []T
	scratch []*linearScratch[T] // one per worker
}

func (j *linAttnJob[T]) Item(w, item int) {
	d := j.op.dims
	b, h := item/d.H, item%d.H
	l := d.Sk
	if j.op.lengths != nil {
		l = j.op.lengths[b]
	}
	sc := j.scratch[w]
	sc.size(d, j.op.out == linGrad)
	hd := linearHeadOf(j.op, j.in, j.out, b, h, l)
	switch {
	case j.op.out == linForward && d.Causal:
		linearCausal(hd, sc)
	case j.op.out == linForward:
		linearFull(hd, sc)
	case d.Causal:
		linearCausalGrad(hd, sc)
	default:
		linearFullGrad(hd, sc)
	}
}

// linearScratch is one worker's buffers: the state S and its gradient R
// (dφ, dv), the key sum z and its gradient y (dφ), two (C, C) blocks for
// the chunks' weights A and their gradient, and for the gradient of a
// normalized attention each query's dnum (dv) and dden.
type linearScratch[T float32 | float64] struct {
	s, r, z, y []T
	a, da      []T
	dn, dd     []T
	ws         fastgemm.Workspace[T]
}

// size makes the buffers fit d (grad: the gradient's too).
func (sc *linearScratch[T]) size(d linearDims, grad bool) {
	grow := func(x []T, n int) []T {
		if cap(x) < n {
			return make([]T, n)
		}
		return x[:n]
	}
	sc.s, sc.z = grow(sc.s, d.F*d.E), grow(sc.z, d.F)
	if d.Causal {
		sc.a = grow(sc.a, d.C*d.C)
	}
	if grad {
		sc.r, sc.y = grow(sc.r, d.F*d.E), grow(sc.y, d.F)
		if d.Causal {
			sc.da = grow(sc.da, d.C*d.C)
		}
		if d.Normalize {
			sc.dn, sc.dd = grow(sc.dn, d.Sq*d.E), grow(sc.dd, d.Sq)
		}
	}
}

// linearHead is one head of one sequence: each matrix starts at the head's
// first row and column where it lies in its tensor, rows ld apart (the GEMM
// reads and writes them in place). out is the forward output; dq, dk, dv
// the gradients, in the sequence's block of the stacked gradients.
type linearHead[T float32 | float64] struct {
	d          linearDims
	l          int // visible keys, KeyLengths[b]
	q, k, v    []T // (Sq, dφ), (Sk, dφ), (Sk, dv)
	out, dout  []T // (Sq, dv)
	dq, dk, dv []T
	ldf, lde   int // H*dφ, H*dv
}

func linearHeadOf[T float32 | float64](op linAttnOp, in [][]T, out []T, b, h, l int) linearHead[T] {
	d := op.dims
	ldf, lde := d.H*d.F, d.H*d.E
	hd := linearHead[T]{d: d, l: l, ldf: ldf, lde: lde,
		q: heads(in[0], b, d.Sq, ldf, h, d.F, 0), k: heads(in[1], b, d.Sk, ldf, h, d.F, 0), v: heads(in[2], b, d.Sk, lde, h, d.E, 0)}
	if op.out == linForward {
		hd.out = heads(out, b, d.Sq, lde, h, d.E, 0)
		return hd
	}
	hd.dout = heads(in[3], b, d.Sq, lde, h, d.E, 0)
	seq := out[b*d.stackedWidth():]
	hd.dq = heads(seq, 0, d.Sq, ldf, h, d.F, 0)
	hd.dk = heads(seq[d.Sq*ldf:], 0, d.Sk, ldf, h, d.F, 0)
	hd.dv = heads(seq[(d.Sq+d.Sk)*ldf:], 0, d.Sk, lde, h, d.E, 0)
	return hd
}

// zeroRows clears rows [i0, i1) of an (n, cols) matrix whose rows are ld apart.
func zeroRows[T float32 | float64](x []T, i0, i1, cols, ld int) {
	for i := i0; i < i1; i++ {
		clear(x[i*ld:][:cols])
	}
}

// dot returns a·b.
func dot[T float32 | float64](a, b []T) T {
	var s T
	for i, x := range a {
		s += x * b[i]
	}
	return s
}

// addColSums adds the sums of the columns of x (rows, cols), rows ld
// apart, to z, row by row.
func addColSums[T float32 | float64](z, x []T, rows, cols, ld int) {
	for i := range rows {
		for c, v := range x[i*ld:][:cols] {
			z[c] += v
		}
	}
}

// maskCausal clears the entries j > i of an (m, kc) block: key j of a
// chunk is hidden from its query i when it comes after it.
func maskCausal[T float32 | float64](a []T, m, kc int) {
	for i := range min(m, kc) {
		clear(a[i*kc+i+1 : (i+1)*kc])
	}
}

// linearCausal is the chunked forward pass of one head (fla's "chunk"
// mode). The S and z of the keys before chunk c carry across chunks; for
// the chunk's m queries and its kc visible keys (kc < m only at the
// padding's edge, 0 after it):
//
//	out_c = Q_c S + ((Q_c K_cᵀ) ⊙ causal) V_c     inter-chunk, then intra-chunk
//	den_c = Q_c z + rowsum((Q_c K_cᵀ) ⊙ causal)
//	out_c = out_c / (den_c + eps)                 with Normalize
//	S    += K_cᵀ V_c,  z += colsum(K_c)
//
// The products are GEMMs in the data's dtype on the rows where they lie;
// S and z are accumulated in the data's dtype too (float32 for float32
// data), chunk by chunk.
func linearCausal[T float32 | float64](hd linearHead[T], sc *linearScratch[T]) {
	d, ldf, lde := hd.d, hd.ldf, hd.lde
	F, E, C := d.F, d.E, d.C
	clear(sc.s)
	clear(sc.z)
	gemm := sc.ws.Gemm // the heads are already spread over the cores
	for c0 := 0; c0 < d.Sq; c0 += C {
		m := min(C, d.Sq-c0)
		kc := max(0, min(m, hd.l-c0))
		seen := min(c0, hd.l) // keys in S
		qc, kk, vc, oc := hd.q[c0*ldf:], hd.k[c0*ldf:], hd.v[c0*lde:], hd.out[c0*lde:]
		if seen > 0 {
			gemm(false, false, m, E, F, 1, qc, ldf, sc.s, E, 0, oc, lde)
		} else {
			zeroRows(oc, 0, m, E, lde)
		}
		a := sc.a[:m*kc]
		if kc > 0 {
			gemm(false, true, m, kc, F, 1, qc, ldf, kk, ldf, 0, a, kc)
			maskCausal(a, m, kc)
			gemm(false, false, m, E, kc, 1, a, kc, vc, lde, 1, oc, lde)
		}
		if d.Normalize {
			for i := range m {
				var den T
				if seen > 0 {
					den = dot(qc[i*ldf:][:F], sc.z)
				}
				for _, x := range a[i*kc:][:kc] {
					den += x
				}
				r := 1 / (den + T(LinearEps))
				for e := range oc[i*lde:][:E] {
					oc[i*lde+e] *= r
				}
			}
		}
		if kc > 0 {
			gemm(true, false, F, E, kc, 1, kk, ldf, vc, lde, 1, sc.s, E)
			addColSums(sc.z, kk, kc, F, ldf)
		}
	}
}

// linearFull is the non-causal forward pass of one head: one state over
// the l visible keys, S = K_lᵀ V_l and z = colsum(K_l), then out = Q S,
// divided by Q z + eps with Normalize. Chunking would change nothing but
// rounding here.
func linearFull[T float32 | float64](hd linearHead[T], sc *linearScratch[T]) {
	d, ldf, lde := hd.d, hd.ldf, hd.lde
	F, E := d.F, d.E
	if hd.l == 0 {
		zeroRows(hd.out, 0, d.Sq, E, lde)
		return
	}
	gemm := sc.ws.Gemm
	gemm(true, false, F, E, hd.l, 1, hd.k, ldf, hd.v, lde, 0, sc.s, E)
	gemm(false, false, d.Sq, E, F, 1, hd.q, ldf, sc.s, E, 0, hd.out, lde)
	if d.Normalize {
		clear(sc.z)
		addColSums(sc.z, hd.k, hd.l, F, ldf)
		for i := range d.Sq {
			r := 1 / (dot(hd.q[i*ldf:][:F], sc.z) + T(LinearEps))
			for e := range hd.out[i*lde:][:E] {
				hd.out[i*lde+e] *= r
			}
		}
	}
}

// dnum returns query i0's row of dnum, the gradient of the numerator
// num_i = φ(q_i)ᵀ S_i, and the distance between rows: dout itself
// without Normalize, else the scratch's (see normGrad).
func (hd linearHead[T]) dnum(sc *linearScratch[T], i0 int) ([]T, int) {
	if hd.d.Normalize {
		return sc.dn[i0*hd.d.E:], hd.d.E
	}
	return hd.dout[i0*hd.lde:], hd.lde
}

// normGrad turns the numerators num (m, dv) of queries i0.. (in sc.dn,
// rows dv apart) and their denominators den (before eps) into the
// gradients of out_i = num_i r_i, r_i = 1/(den_i + eps):
//
//	dnum_i = dout_i r_i              (in place of num_i)
//	dden_i = -(dout_i · num_i) r_i²  (sc.dd[i])
func normGrad[T float32 | float64](hd linearHead[T], sc *linearScratch[T], i0, m int, den func(i int) T) {
	E := hd.d.E
	for i := range m {
		r := 1 / (den(i) + T(LinearEps))
		num := sc.dn[(i0+i)*E:][:E]
		do := hd.dout[(i0+i)*hd.lde:][:E]
		sc.dd[i0+i] = -dot(do, num) * r * r
		for e, g := range do {
			num[e] = g * r
		}
	}
}

// linearCausalGrad is the chunked backward pass of one head. With dnum_i
// and dden_i the gradients of each query's numerator and denominator
// (normGrad; dnum = dout and dden = 0 without Normalize), the weights'
// gradient is dA_ij = dnum_i · v_j + dden_i on the visible entries, and
//
//	dq_i = sum_j dA_ij k_j = dnum_i S_iᵀ + dden_i z_i + (dA_c K_c)_i
//	dk_j = sum_i dA_ij q_i = R_j v_j + y_j + (dA_cᵀ Q_c)_j
//	dv_j = sum_i A_ij dnum_i = R_jᵀ k_j + (A_cᵀ dnum_c)_j
//
// where R_j = sum of q_i dnum_iᵀ and y_j = sum of q_i dden_i over the
// queries i of the chunks after j's. So a forward sweep over the chunks
// (S and z carried forward, as in linearCausal) gives dnum, dden and dq,
// and a backward sweep (R and y carried backward) gives dk and dv; each
// recomputes its chunk's (C, C) weights rather than keep them, so the
// memory stays O(n dv) beside the (dφ, dv) states. Hidden keys get zero
// gradients; S, z, R and y are accumulated in the data's dtype.
func linearCausalGrad[T float32 | float64](hd linearHead[T], sc *linearScratch[T]) {
	d, ldf, lde := hd.d, hd.ldf, hd.lde
	F, E, C := d.F, d.E, d.C
	gemm := sc.ws.Gemm
	clear(sc.s)
	clear(sc.z)
	for c0 := 0; c0 < d.Sq; c0 += C { // forward sweep: dnum, dden, dq
		m := min(C, d.Sq-c0)
		kc := max(0, min(m, hd.l-c0))
		seen := min(c0, hd.l)
		qc, kk, vc, dqc := hd.q[c0*ldf:], hd.k[c0*ldf:], hd.v[c0*lde:], hd.dq[c0*ldf:]
		a, da := sc.a[:m*kc], sc.da[:m*kc]
		if d.Normalize { // num_c = Q_c S + A_c V_c into sc.dn, then dnum, dden
			if kc > 0 {
				gemm(false, true, m, kc, F, 1, qc, ldf, kk, ldf, 0, a, kc)
				maskCausal(a, m, kc)
			}
			num := sc.dn[c0*E:]
			if seen > 0 {
				gemm(false, false, m, E, F, 1, qc, ldf, sc.s, E, 0, num, E)
			} else {
				clear(num[:m*E])
			}
			if kc > 0 {
				gemm(false, false, m, E, kc, 1, a, kc, vc, lde, 1, num, E)
			}
			normGrad(hd, sc, c0, m, func(i int) T {
				var den T
				if seen > 0 {
					den = dot(qc[i*ldf:][:F], sc.z)
				}
				for _, x := range a[i*kc:][:kc] {
					den += x
				}
				return den
			})
		}
		dn, ldn := hd.dnum(sc, c0)
		if seen > 0 { // dq_c = dnum_c Sᵀ + dden_c zᵀ
			gemm(false, true, m, F, E, 1, dn, ldn, sc.s, E, 0, dqc, ldf)
			if d.Normalize {
				for i := range m {
					g := sc.dd[c0+i]
					for f, z := range sc.z {
						dqc[i*ldf+f] += g * z
					}
				}
			}
		} else {
			zeroRows(dqc, 0, m, F, ldf)
		}
		if kc > 0 { // dq_c += dA_c K_c
			linearWeightsGrad(hd, sc, da, c0, m, kc)
			gemm(false, false, m, F, kc, 1, da, kc, kk, ldf, 1, dqc, ldf)
			gemm(true, false, F, E, kc, 1, kk, ldf, vc, lde, 1, sc.s, E)
			addColSums(sc.z, kk, kc, F, ldf)
		}
	}
	clear(sc.r)
	clear(sc.y)
	for c0 := (d.Sq - 1) / C * C; c0 >= 0; c0 -= C { // backward sweep: dk, dv
		m := min(C, d.Sq-c0)
		kc := max(0, min(m, hd.l-c0))
		later := c0+m < d.Sq // R and y hold queries of later chunks
		qc, kk, vc, dkc, dvc := hd.q[c0*ldf:], hd.k[c0*ldf:], hd.v[c0*lde:], hd.dk[c0*ldf:], hd.dv[c0*lde:]
		dn, ldn := hd.dnum(sc, c0)
		if kc > 0 {
			if later { // dk_c = V_c Rᵀ + y, dv_c = K_c R
				gemm(false, true, kc, F, E, 1, vc, lde, sc.r, E, 0, dkc, ldf)
				gemm(false, false, kc, E, F, 1, kk, ldf, sc.r, E, 0, dvc, lde)
				if d.Normalize {
					for j := range kc {
						for f, y := range sc.y {
							dkc[j*ldf+f] += y
						}
					}
				}
			} else {
				zeroRows(dkc, 0, kc, F, ldf)
				zeroRows(dvc, 0, kc, E, lde)
			}
			a, da := sc.a[:m*kc], sc.da[:m*kc]
			gemm(false, true, m, kc, F, 1, qc, ldf, kk, ldf, 0, a, kc)
			maskCausal(a, m, kc)
			linearWeightsGrad(hd, sc, da, c0, m, kc)
			gemm(true, false, kc, F, m, 1, da, kc, qc, ldf, 1, dkc, ldf) // dk_c += dA_cᵀ Q_c
			gemm(true, false, kc, E, m, 1, a, kc, dn, ldn, 1, dvc, lde)  // dv_c += A_cᵀ dnum_c
		}
		zeroRows(dkc, kc, m, F, ldf) // hidden keys
		zeroRows(dvc, kc, m, E, lde)
		if c0 > 0 && min(c0, hd.l) > 0 { // R += Q_cᵀ dnum_c, y += Q_cᵀ dden_c, for the keys before the chunk
			gemm(true, false, F, E, m, 1, qc, ldf, dn, ldn, 1, sc.r, E)
			if d.Normalize {
				for i := range m {
					g := sc.dd[c0+i]
					for f, x := range qc[i*ldf:][:F] {
						sc.y[f] += x * g
					}
				}
			}
		}
	}
}

// linearWeightsGrad writes into da the gradient of chunk c0's visible
// weights, dA = (dnum_c V_cᵀ + dden_c 1ᵀ) ⊙ causal, (m, kc).
func linearWeightsGrad[T float32 | float64](hd linearHead[T], sc *linearScratch[T], da []T, c0, m, kc int) {
	dn, ldn := hd.dnum(sc, c0)
	sc.ws.Gemm(false, true, m, kc, hd.d.E, 1, dn, ldn, hd.v[c0*hd.lde:], hd.lde, 0, da, kc)
	if hd.d.Normalize {
		for i := range m {
			g := sc.dd[c0+i]
			for j := range da[i*kc:][:kc] {
				da[i*kc+j] += g
			}
		}
	}
	maskCausal(da, m, kc)
}

// linearFullGrad is the non-causal backward pass of one head, one state
// S, z over the l visible keys and one R = Qᵀ dnum, y = Qᵀ dden over all
// queries:
//
//	dq = dnum Sᵀ + dden zᵀ
//	dk_j = R v_j + y,  dv_j = Rᵀ k_j    (j < l; 0 for hidden keys)
func linearFullGrad[T float32 | float64](hd linearHead[T], sc *linearScratch[T]) {
	d, ldf, lde := hd.d, hd.ldf, hd.lde
	F, E := d.F, d.E
	if hd.l == 0 {
		zeroRows(hd.dq, 0, d.Sq, F, ldf)
		zeroRows(hd.dk, 0, d.Sk, F, ldf)
		zeroRows(hd.dv, 0, d.Sk, E, lde)
		return
	}
	gemm := sc.ws.Gemm
	gemm(true, false, F, E, hd.l, 1, hd.k, ldf, hd.v, lde, 0, sc.s, E)
	if d.Normalize {
		clear(sc.z)
		addColSums(sc.z, hd.k, hd.l, F, ldf)
		gemm(false, false, d.Sq, E, F, 1, hd.q, ldf, sc.s, E, 0, sc.dn, E) // num
		normGrad(hd, sc, 0, d.Sq, func(i int) T { return dot(hd.q[i*ldf:][:F], sc.z) })
	}
	dn, ldn := hd.dnum(sc, 0)
	gemm(false, true, d.Sq, F, E, 1, dn, ldn, sc.s, E, 0, hd.dq, ldf)
	gemm(true, false, F, E, d.Sq, 1, hd.q, ldf, dn, ldn, 0, sc.r, E)
	gemm(false, true, hd.l, F, E, 1, hd.v, lde, sc.r, E, 0, hd.dk, ldf)
	gemm(false, false, hd.l, E, F, 1, hd.k, ldf, sc.r, E, 0, hd.dv, lde)
	if d.Normalize {
		clear(sc.y)
		for i := range d.Sq {
			g := sc.dd[i]
			for f, x := range hd.q[i*ldf:][:F] {
				hd.dq[i*ldf+f] += g * sc.z[f]
				sc.y[f] += x * g
			}
		}
		for j := range hd.l {
			for f, y := range sc.y {
				hd.dk[j*ldf+f] += y
			}
		}
	}
	zeroRows(hd.dk, hd.l, d.Sk, F, ldf)
	zeroRows(hd.dv, hd.l, d.Sk, E, lde)
}

func (op linAttnOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.linearattention %+v %d %p/%d", op.dims, op.out, op.lengths, len(op.lengths))
}
func (op linAttnOp) Hashcode() uint32 { return hashOf(op) }

func (op linAttnOp) String() string {
	return [...]string{"qkv.LinearAttention", "qkv.LinearAttentionGrad", "qkv.LinearAttentionGradQ",
		"qkv.LinearAttentionGradK", "qkv.LinearAttentionGradV"}[op.out]
}

// DiffWRT: the output is differentiable in φq, φk and v; the gradient
// steps are not differentiated again.
func (op linAttnOp) DiffWRT(inputs int) []bool { return diffAll(inputs, op.out == linForward) }

// SymDiff returns dφq, dφk and dv: one op computes them stacked, three
// copy them out.
func (op linAttnOp) SymDiff(inputs G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	if op.out != linForward {
		return nil, fmt.Errorf("graph: %v is not differentiable", op)
	}
	if len(inputs) != 3 {
		return nil, fmt.Errorf("graph: %v: want 3 inputs, got %d", op, len(inputs))
	}
	stacked, err := apply(linAttnOp{dims: op.dims, out: linGrad, lengths: op.lengths}, inputs[0], inputs[1], inputs[2], grad)
	if err != nil {
		return nil, err
	}
	grads := make(G.Nodes, 3)
	for i, which := range []int{linGradQ, linGradK, linGradV} {
		if grads[i], err = apply(linAttnOp{dims: op.dims, out: which}, stacked); err != nil {
			return nil, err
		}
	}
	return grads, nil
}
