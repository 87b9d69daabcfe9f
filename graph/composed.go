package graph

import (
	"errors"
	"fmt"
	"hash"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// composedAttention is Attend's Composed implementation: the formula built
// only from gorgonia graph ops, so that gorgonia's autodiff derives the
// backward pass. It is the formula's home: read it first.
//
//	P_h = softmax(mods(Q_h K_h^T / sqrt(dk) + mask) + bias_h)   weights (B, H, Sq, Sk)
//	out = Concat(P_1 V_1, ..., P_H V_H)                         (B, Sq, D)
//
// q is (B, Sq, D), k and v (B, Sk, G*dk), dk = D/heads, and head h reads
// columns [h*dk, (h+1)*dk). The modifiers of the spec enter as
//
//	K, V  = K E, V E          E (G*dk, H*dk) a constant 0/1 matrix: KV head h/(H/G) for head h
//	s     = mods(s)           -Inf where hidden, Score.Mod elsewhere; its gradient is
//	                          gorgonia's HadamardProd of the incoming one with Mod's derivative
//	P     = softmax([s | sink_h])[:, :Sk]   the sink column joins each row, then is dropped
//
// The modifiers run in one element-wise op (qkv.ScoreMods) because they are
// Go functions of positions, not graph ops.
//
// The fused op and flash attention compute the same thing faster and in
// less memory: composed_test.go checks the fused op equal to this function,
// outputs, weights and gradients, for every mask, bias and dropout; flash's
// tests check it equal to the fused op. This one spends memory freely:
// every step below is a node whose value, (B*H, Sq, Sk) for the scores and
// each softmax step, is kept for the backward pass.
//
// gorgonia v0.9.18's SoftMax forward and its reductions along the middle axes
// of 4-D tensors are wrong (defects_test.go), so the heads are folded into the
// batch, (B*H, S, dk), and the softmax is composed from reductions along the
// last axis of 3-D tensors, which are right; Reshape copies (reshape.go).
func composedAttention(q, k, v *G.Node, spec Spec, d attnDims) (out, weights *G.Node, err error) {
	B, H, Sq, Sk, dk := d.B, d.H, d.Sq, d.Sk, d.D/d.H
	mask, bias, keep := spec.Mask, spec.Bias, spec.Keep
	c := composer{dt: q.Dtype()}

	if d.KV < H { // grouped-query: each KV head repeated for its query heads
		k = c.expandKV(k, d) // (B, Sk, D)
		v = c.expandKV(v, d) // (B, Sk, D)
	}
	Q := c.splitHeads(q, H) // (B*H, Sq, dk)
	K := c.splitHeads(k, H) // (B*H, Sk, dk)
	V := c.splitHeads(v, H) // (B*H, Sk, dk)

	s := c.matmul(Q, K, true)                // Q K^T  (B*H, Sq, Sk)
	s = c.scale(s, 1/math.Sqrt(float64(dk))) // / sqrt(dk)
	if mask != nil {
		// + mask, the same (Sq, Sk) for every head of a sequence: -Inf hides.
		s = c.addBroadcast(s, mask.Bias, tensor.Shape{B, H, Sq * Sk}, 1)
	}
	if spec.active() { // hide by position (Causal, Window, ...), then modify what is visible
		s = c.modScores(s, newModRun(spec, Sq, Sk), B, H)
	}
	switch d.Bias {
	case 3: // + bias_h, the same (H, Sq, Sk) for every sequence
		s = c.addBroadcast(s, bias, tensor.Shape{B, H * Sq * Sk}, 0)
	case 4: // + bias (B, H, Sq, Sk), one (Sq, Sk) block per sequence and head
		s = c.binary(G.Add, s, c.reshape(bias, tensor.Shape{B * H, Sq, Sk}))
	}
	var P *G.Node
	if spec.Sinks != nil {
		// [s | sink_h] (B*H, Sq, Sk+1), softmax, and the sink column dropped
		s = c.binary(func(s, col *G.Node) (*G.Node, error) { return G.Concat(2, s, col) }, s, c.sinkColumn(spec.Sinks, B, Sq))
		P = c.unary(func(p *G.Node) (*G.Node, error) { return G.Slice(p, nil, nil, G.S(0, Sk)) }, c.softmax(s))
		P = c.reshape(P, tensor.Shape{B * H, Sq, Sk}) // a copy of the slice; rows sum to 1 - p_sink
	} else {
		P = c.softmax(s) // (B*H, Sq, Sk): rows sum to 1, or are 0 where no key is visible
	}
	weights = c.reshape(P, tensor.Shape{B, H, Sq, Sk})
	if keep != nil { // dropout: P * keep
		P = c.binary(G.HadamardProd, P, c.reshape(keep, tensor.Shape{B * H, Sq, Sk}))
	}

	O := c.matmul(P, V, false)  // P V  (B*H, Sq, dk)
	out = c.mergeHeads(O, B, H) // Concat(heads)  (B, Sq, D)
	if c.err != nil {
		return nil, nil, c.err
	}
	return out, weights, nil
}

// composer builds the steps of composedAttention and keeps the first error,
// so that the function reads as the formula instead of as error checks: once
// an error is kept, every later step returns nil without touching the graph,
// and composedAttention returns the error.
type composer struct {
	dt  tensor.Dtype
	err error
}

// ok reports whether no step failed yet and every node given is there.
func (c *composer) ok(nodes ...*G.Node) bool {
	for _, n := range nodes {
		if n == nil && c.err == nil {
			c.err = errors.New("internal: a step returned no node")
		}
	}
	return c.err == nil
}

// do keeps err and returns n (nil after any error).
func (c *composer) do(n *G.Node, err error) *G.Node {
	if c.err == nil && err != nil {
		c.err = err
	}
	if c.err != nil {
		return nil
	}
	return n
}

// unary applies f to x unless a step failed.
func (c *composer) unary(f func(*G.Node) (*G.Node, error), x *G.Node) *G.Node {
	if !c.ok(x) {
		return nil
	}
	return c.do(f(x))
}

// binary applies f to a and b unless a step failed.
func (c *composer) binary(f func(a, b *G.Node) (*G.Node, error), a, b *G.Node) *G.Node {
	if !c.ok(a, b) {
		return nil
	}
	return c.do(f(a, b))
}

// matmul returns the batched product a b, or a b^T with transB.
func (c *composer) matmul(a, b *G.Node, transB bool) *G.Node {
	return c.binary(func(a, b *G.Node) (*G.Node, error) { return G.BatchedMatMul(a, b, false, transB) }, a, b)
}

// scale returns x * f, f a constant of x's dtype.
func (c *composer) scale(x *G.Node, f float64) *G.Node {
	return c.binary(G.Mul, x, Scalar(c.dt, f))
}

// rowwise applies a broadcast op f to x (N, Sq, Sk) and r (N, Sq), r
// repeated along x's last axis.
func (c *composer) rowwise(f func(a, b *G.Node, left, right []byte) (*G.Node, error), x, r *G.Node) *G.Node {
	return c.binary(func(x, r *G.Node) (*G.Node, error) { return f(x, r, nil, []byte{2}) }, x, r)
}

// reduce applies a reduction f (G.Max, G.Sum) along the last axis of a 3-D x.
func (c *composer) reduce(f func(*G.Node, ...int) (*G.Node, error), x *G.Node) *G.Node {
	return c.unary(func(x *G.Node) (*G.Node, error) { return f(x, 2) }, x)
}

// reshape is the copying Reshape (gorgonia's aliases its input).
func (c *composer) reshape(x *G.Node, to tensor.Shape) *G.Node {
	if !c.ok(x) {
		return nil
	}
	return c.do(Reshape(x, to))
}

// splitHeads turns x (B, S, D) into (B*H, S, dk): head h of sequence b is
// block b*H+h, so that the heads are one more batch of matrices.
func (c *composer) splitHeads(x *G.Node, heads int) *G.Node {
	s := x.Shape()
	b, n, dk := s[0], s[1], s[2]/heads
	x = c.reshape(x, tensor.Shape{b, n, heads, dk})     // (B, S, H, dk)
	x = c.unary(transpose12, x)                         // (B, H, S, dk)
	return c.reshape(x, tensor.Shape{b * heads, n, dk}) // (B*H, S, dk)
}

// mergeHeads is splitHeads backwards: (B*H, S, dk) to (B, S, H*dk), the
// heads side by side along the last axis, in order.
func (c *composer) mergeHeads(x *G.Node, b, heads int) *G.Node {
	if !c.ok(x) {
		return nil
	}
	s := x.Shape()
	n, dk := s[1], s[2]
	x = c.reshape(x, tensor.Shape{b, heads, n, dk})     // (B, H, S, dk)
	x = c.unary(transpose12, x)                         // (B, S, H, dk)
	return c.reshape(x, tensor.Shape{b, n, heads * dk}) // (B, S, D)
}

// transpose12 swaps the middle axes of a 4-D x, (B, S, H, dk) <-> (B, H, S, dk).
func transpose12(x *G.Node) (*G.Node, error) { return G.Transpose(x, 0, 2, 1, 3) }

// addBroadcast returns s + x where x is repeated along one axis: s is viewed
// as the shape view, x as view without that axis. The mask (B, Sq*Sk) is
// repeated over the heads of (B, H, Sq*Sk) (axis 1), a shared bias
// (H*Sq*Sk) over the sequences of (B, H*Sq*Sk) (axis 0). Both views are at
// most 3-D, where gorgonia's broadcast gradients are right; the gradient of
// the shared bias is summed over the batch.
func (c *composer) addBroadcast(s, x *G.Node, view tensor.Shape, axis int) *G.Node {
	if !c.ok(s, x) {
		return nil
	}
	back := s.Shape().Clone()
	small := append(view[:axis:axis], view[axis+1:]...)
	sum := c.binary(func(s, x *G.Node) (*G.Node, error) {
		return G.BroadcastAdd(s, x, nil, []byte{byte(axis)})
	}, c.reshape(s, view), c.reshape(x, small))
	return c.reshape(sum, back)
}

// softmax returns the softmax of x (N, Sq, Sk) along its last axis, stably:
//
//	m = max(rowmax(x), lowest)   the row's max, finite even for a row of -Inf
//	e = exp(x - m)               in [0, 1]; 0 for a hidden key, exp(-Inf)
//	z = max(rowsum(e), 1/2)      >= 1 when a key is visible (the max gives exp(0) = 1)
//	P = e / z                    0 for a row with no visible key, not 0/0
//
// gorgonia's SoftMax seeds every row's max with the first element of the
// whole tensor (defects_test.go), so it is composed from Max, Sub, Exp, Sum
// and Div along the last axis of 3-D tensors, which are right. The two
// floors change nothing in a row with a visible key: its max is its largest
// visible score, above lowest, and its sum at least 1, above 1/2, so neither
// floor is ever the larger and the gradient flows as without them. In a row
// that sees nothing the floors are the larger: no gradient reaches the
// row's -Inf scores, and every gradient of the row is 0.
func (c *composer) softmax(x *G.Node) *G.Node {
	lowest := -math.MaxFloat64
	if c.dt == tensor.Float32 {
		lowest = -math.MaxFloat32
	}
	m := c.atLeast(c.reduce(G.Max, x), lowest)           // (N, Sq)
	e := c.unary(G.Exp, c.rowwise(G.BroadcastSub, x, m)) // (N, Sq, Sk)
	z := c.atLeast(c.reduce(G.Sum, e), 0.5)              // (N, Sq)
	return c.rowwise(G.BroadcastHadamardDiv, e, z)       // (N, Sq, Sk)
}

// atLeast returns max(x, floor) element-wise for a 2-D x, as the max along
// the last axis of x stacked beside a constant of floor: gorgonia has no
// element-wise max of two nodes, and its Max passes the gradient to x where
// x is the larger and to the constant elsewhere.
func (c *composer) atLeast(x *G.Node, floor float64) *G.Node {
	if !c.ok(x) {
		return nil
	}
	s := x.Shape()
	col := tensor.Shape{s[0], s[1], 1}
	vals := make([]float64, col.TotalSize())
	for i := range vals {
		vals[i] = floor
	}
	f := G.NewConstant(NewDense(c.dt, col, vals), G.WithName(fmt.Sprintf("floor %g %v", floor, col)), G.In(x.Graph()))
	both := c.binary(func(x, f *G.Node) (*G.Node, error) { return G.Concat(2, x, f) }, c.reshape(x, col), f) // (N, Sq, 2)
	return c.reduce(G.Max, both)
}

// expandKV returns x (B, S, KV*dk) with each KV head repeated for the query
// heads that read it, (B, S, H*dk), as x E for the constant 0/1 matrix E
// (KV*dk, H*dk) that copies column g*dk+c of x to h*dk+c, g = h/(H/KV):
// PyTorch's repeat_interleave. Its gradient, dx = dy E^T, sums each group's
// heads. gorgonia's Mul is 2-D only, so x is viewed as (B*S, KV*dk).
func (c *composer) expandKV(x *G.Node, d attnDims) *G.Node {
	if !c.ok(x) {
		return nil
	}
	dk, s := d.D/d.H, x.Shape()
	e := make([]float64, d.kd()*d.D)
	for h := 0; h < d.H; h++ {
		for col := 0; col < dk; col++ {
			e[(d.kvHead(h)*dk+col)*d.D+h*dk+col] = 1
		}
	}
	E := G.NewConstant(NewDense(c.dt, tensor.Shape{d.kd(), d.D}, e), G.WithName(fmt.Sprintf("repeat KV %d->%d heads of %d", d.KV, d.H, dk)), G.In(x.Graph()))
	x = c.binary(G.Mul, c.reshape(x, tensor.Shape{s[0] * s[1], d.kd()}), E) // (B*S, D)
	return c.reshape(x, tensor.Shape{s[0], s[1], d.D})
}

// sinkColumn returns the sink logits (H) as the column (B*H, Sq, 1) that
// joins the scores: row i of head h of every sequence holds sink_h. It is
// R sinks for the constant 0/1 matrix R (B*H*Sq, H), so the sinks'
// gradient, R^T dcol, sums the column's over sequences and rows.
func (c *composer) sinkColumn(sinks *G.Node, b, sq int) *G.Node {
	if !c.ok(sinks) {
		return nil
	}
	h := sinks.Shape()[0]
	r := make([]float64, b*h*sq*h)
	for row := 0; row < b*h*sq; row++ {
		r[row*h+row/sq%h] = 1
	}
	R := G.NewConstant(NewDense(c.dt, tensor.Shape{b * h * sq, h}, r), G.WithName(fmt.Sprintf("sink rows %dx%d", b*h*sq, h)), G.In(sinks.Graph()))
	col := c.binary(G.Mul, R, c.reshape(sinks, tensor.Shape{h, 1})) // (B*H*Sq, 1)
	return c.reshape(col, tensor.Shape{b * h, sq, 1})
}

// modScores applies the modifiers of r to the scores s (B*H, Sq, Sk) in one
// element-wise op: -Inf where hidden, Score.Mod where visible. Its
// gradient is gorgonia's HadamardProd of the incoming gradient with the
// modifier's derivative (0 where hidden), a second output of the same op.
func (c *composer) modScores(s *G.Node, r *modRun, b, h int) *G.Node {
	if !c.ok(s) {
		return nil
	}
	return c.do(apply(scoreModsOp{run: r, b: b, h: h, shape: s.Shape().Clone()}, s))
}

// scoreModsOp is modScores' op: the modified scores, or (deriv) their
// derivatives with respect to the scores.
type scoreModsOp struct {
	pureOp
	run   *modRun
	b, h  int
	shape tensor.Shape // (B*H, Sq, Sk)
	deriv bool
	buf   *output
}

func (op scoreModsOp) withOutput(b *output) G.Op { op.buf = b; return op }
func (op scoreModsOp) Arity() int                { return 1 }
func (op scoreModsOp) Type() hm.Type             { return opType([]int{3}, 3) }
func (op scoreModsOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.shape.Clone(), nil
}

func (op scoreModsOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) == 1 && vals[0] != nil && !vals[0].Shape().Eq(op.shape) {
		return nil, fmt.Errorf("graph: %v: input is %v, want %v", op, vals[0].Shape(), op.shape)
	}
	v, err := runKernel(op, vals, 1, op.shape, op.buf, false)
	if err == nil {
		err = op.run.fail.take(op)
	}
	return v, err
}

func (op scoreModsOp) run64(in [][]float64, out []float64) { runScoreMods(op, in[0], out) }
func (op scoreModsOp) run32(in [][]float32, out []float32) { runScoreMods(op, in[0], out) }

// runScoreMods modifies each (Sq, Sk) block of head h of sequence b on its
// own goroutine.
func runScoreMods[T float32 | float64](op scoreModsOp, s, out []T) {
	block := op.shape[1] * op.shape[2]
	parallel(op.b*op.h, func() any { return nil }, func(_ any, item int) {
		src, dst := s[item*block:][:block], out[item*block:][:block]
		copy(dst, src)
		if op.deriv {
			modRows(op.run, src, dst, nil, item/op.h, item%op.h, op.shape[2])
			return
		}
		modRows(op.run, dst, nil, nil, item/op.h, item%op.h, op.shape[2])
	})
}

func (op scoreModsOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.scoremods %v %d %d %v %s", op.shape, op.b, op.h, op.deriv, op.run.key)
}
func (op scoreModsOp) Hashcode() uint32 { return hashOf(op) }

func (op scoreModsOp) String() string {
	if op.deriv {
		return "qkv.ScoreModsDeriv"
	}
	return "qkv.ScoreMods"
}

// DiffWRT: the modified scores are differentiable in the scores; the
// derivatives are not differentiated again.
func (op scoreModsOp) DiffWRT(int) []bool { return []bool{!op.deriv} }

// SymDiff returns ds = dy ∘ Mod'(s), a gorgonia HadamardProd.
func (op scoreModsOp) SymDiff(inputs G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	if op.deriv {
		return nil, fmt.Errorf("graph: %v is not differentiable", op)
	}
	op.deriv = true
	der, err := apply(op, inputs[0])
	if err != nil {
		return nil, err
	}
	ds, err := G.HadamardProd(grad, der)
	if err != nil {
		return nil, err
	}
	return G.Nodes{ds}, nil
}
