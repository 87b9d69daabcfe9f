package graph

import (
	"fmt"
	"hash"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Attention returns scaled dot-product attention of H heads over projected
// queries q (B, Sq, D), keys k (B, Sk, D) and values v (B, Sk, D), with
// dk = D/H and head h reading columns [h*dk, (h+1)*dk):
//
//	P_h = softmax(Q_h K_h^T / sqrt(dk) + mask)   weights (B, H, Sq, Sk)
//	out = Concat(P_1 V_1, ..., P_H V_H)           (B, Sq, D)
//
// mask (B, Sq, Sk) may be nil; keep, the keep-mask of attention dropout
// (B, H, Sq, Sk), may be nil too, else out uses P * keep in place of P.
//
// The softmax subtracts each row's own max; hidden keys get weight exactly 0;
// a query that may see no key gets all-zero weights, not NaN.
//
// Each of the two steps is one op forward and one per input backward,
// computed head by head in plain loops on the (B, S, D) layout, instead of
// gorgonia's reshapes, transposes, batched matmuls and broadcasts: the same
// arithmetic without copying the heads around. The tests check both steps
// against plain loops and their gradients against finite differences.
func Attention(q, k, v *G.Node, heads int, mask *MaskNode, keep *G.Node) (out, weights *G.Node, err error) {
	d, err := attentionDims(q, k, v, heads, mask, keep)
	if err != nil {
		return nil, nil, fmt.Errorf("graph: attention: %w", err)
	}
	scoreIn := G.Nodes{q, k}
	if mask != nil {
		scoreIn = append(scoreIn, mask.Bias)
	}
	if weights, err = G.ApplyOp(attentionOp{dims: d, out: attnWeights}, scoreIn...); err != nil {
		return nil, nil, fmt.Errorf("graph: attention weights: %w", err)
	}
	mixIn := G.Nodes{weights, v}
	if keep != nil {
		mixIn = append(mixIn, keep)
	}
	if out, err = G.ApplyOp(attentionOp{dims: d, out: attnOutput}, mixIn...); err != nil {
		return nil, nil, fmt.Errorf("graph: attention: %w", err)
	}
	return out, weights, nil
}

// attnDims are the sizes of one attention and which optional inputs it has.
type attnDims struct {
	B, Sq, Sk, D, H int
	Masked, Dropped bool
}

func attentionDims(q, k, v *G.Node, heads int, mask *MaskNode, keep *G.Node) (attnDims, error) {
	qs, ks, vs := q.Shape(), k.Shape(), v.Shape()
	if len(qs) != 3 || len(ks) != 3 || !ks.Eq(vs) || ks[0] != qs[0] || ks[2] != qs[2] {
		return attnDims{}, fmt.Errorf("q %v, k %v, v %v: want (B, Sq, D), (B, Sk, D), (B, Sk, D)", qs, ks, vs)
	}
	d := attnDims{B: qs[0], Sq: qs[1], Sk: ks[1], D: qs[2], H: heads, Masked: mask != nil, Dropped: keep != nil}
	if heads <= 0 || d.D%heads != 0 {
		return attnDims{}, fmt.Errorf("width %d is not divisible by %d heads", d.D, heads)
	}
	if err := CheckFloat(q.Dtype()); err != nil {
		return attnDims{}, err
	}
	for _, n := range []*G.Node{k, v} {
		if n.Dtype() != q.Dtype() {
			return attnDims{}, fmt.Errorf("q is %v but %q is %v", q.Dtype(), n.Name(), n.Dtype())
		}
	}
	if mask != nil {
		if mask.B != d.B || mask.Sq != d.Sq || mask.Sk != d.Sk {
			return attnDims{}, fmt.Errorf("mask is (B, Sq, Sk) = (%d, %d, %d), want (%d, %d, %d)", mask.B, mask.Sq, mask.Sk, d.B, d.Sq, d.Sk)
		}
		if mask.Bias.Dtype() != q.Dtype() {
			return attnDims{}, fmt.Errorf("mask is %v, q is %v", mask.Bias.Dtype(), q.Dtype())
		}
	}
	if keep != nil && (!keep.Shape().Eq(tensor.Shape{d.B, d.H, d.Sq, d.Sk}) || keep.Dtype() != q.Dtype()) {
		return attnDims{}, fmt.Errorf("dropout keep-mask %v %v, want %v (%d, %d, %d, %d)", keep.Dtype(), keep.Shape(), q.Dtype(), d.B, d.H, d.Sq, d.Sk)
	}
	return d, nil
}

// What an attentionOp computes, and from which inputs ([x] when present):
const (
	attnWeights = iota // P from q, k, [bias]
	attnOutput         // out from P, v, [keep]
	attnGradQ          // dq from P, dP, k
	attnGradK          // dk from P, dP, q
	attnGradP          // dP from dout, v, [keep]
	attnGradV          // dv from P, dout, [keep]
)

// attentionOp is one step of Attention or of its gradient; which one is out.
type attentionOp struct {
	dims attnDims
	out  int
}

// inputs lists the number of dimensions of each input.
func (op attentionOp) inputs() []int {
	d := op.dims
	switch op.out {
	case attnWeights:
		if d.Masked {
			return []int{3, 3, 3}
		}
		return []int{3, 3}
	case attnOutput, attnGradP:
		if d.Dropped {
			return []int{4, 3, 4}
		}
		return []int{4, 3}
	case attnGradV:
		if d.Dropped {
			return []int{4, 3, 4}
		}
		return []int{4, 3}
	}
	return []int{4, 4, 3} // attnGradQ, attnGradK
}

func (op attentionOp) shape() tensor.Shape {
	d := op.dims
	switch op.out {
	case attnWeights, attnGradP:
		return tensor.Shape{d.B, d.H, d.Sq, d.Sk}
	case attnGradK, attnGradV:
		return tensor.Shape{d.B, d.Sk, d.D}
	}
	return tensor.Shape{d.B, d.Sq, d.D}
}

func (op attentionOp) Arity() int { return len(op.inputs()) }

func (op attentionOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	var ts []hm.Type
	for _, dims := range op.inputs() {
		ts = append(ts, &G.TensorType{Dims: dims, Of: a})
	}
	return hm.NewFnType(append(ts, &G.TensorType{Dims: op.shape().Dims(), Of: a})...)
}

func (op attentionOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.shape(), nil }

func (op attentionOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != op.Arity() {
		return nil, fmt.Errorf("graph: %v: want %d inputs, got %d", op, op.Arity(), len(vals))
	}
	dt := vals[0].Dtype()
	for _, v := range vals {
		if _, ok := v.(*tensor.Dense); !ok || v.Dtype() != dt {
			return nil, fmt.Errorf("graph: %v: inputs must be dense %v tensors, got %T %v", op, dt, v, v.Dtype())
		}
	}
	out := tensor.New(tensor.Of(dt), tensor.WithShape(op.shape()...))
	switch dt {
	case tensor.Float64:
		runAttention(op, typed[float64](vals), out.Data().([]float64))
	case tensor.Float32:
		runAttention(op, typed[float32](vals), out.Data().([]float32))
	default:
		return nil, fmt.Errorf("graph: %v: dtype %v is not supported", op, dt)
	}
	return out, nil
}

func typed[T float32 | float64](vals []G.Value) [][]T {
	out := make([][]T, len(vals))
	for i, v := range vals {
		out[i] = v.Data().([]T)
	}
	return out
}

// heads indexes one batch of attention: (B, S, D) tensors whose head h is
// columns [h*dk, (h+1)*dk), and (B, H, Sq, Sk) weights.
type heads struct {
	attnDims
	dk    int
	scale float64
}

// row returns the dk values of head h at position i of sequence b of an
// (B, n, D) tensor x.
func row[T float32 | float64](a heads, x []T, n, b, i, h int) []T {
	return x[(b*n+i)*a.D+h*a.dk:][:a.dk]
}

// pRow returns row i of head h of sequence b of (B, H, Sq, Sk) weights.
func pRow[T float32 | float64](a heads, p []T, b, h, i int) []T {
	return p[((b*a.H+h)*a.Sq+i)*a.Sk:][:a.Sk]
}

func dot[T float32 | float64](x, y []T) float64 {
	var s float64
	for i, v := range x {
		s += float64(v) * float64(y[i])
	}
	return s
}

func runAttention[T float32 | float64](op attentionOp, in [][]T, out []T) {
	a := heads{attnDims: op.dims, dk: op.dims.D / op.dims.H}
	a.scale = 1 / math.Sqrt(float64(a.dk))
	var keep []T
	if a.Dropped && len(in) == 3 && op.out != attnGradQ && op.out != attnGradK {
		keep = in[2]
	}
	for b := 0; b < a.B; b++ {
		for h := 0; h < a.H; h++ {
			switch op.out {
			case attnWeights:
				var bias []T
				if a.Masked {
					bias = in[2]
				}
				weightsHead(a, in[0], in[1], bias, out, b, h)
			case attnOutput:
				mixHead(a, in[0], in[1], keep, out, b, h)
			case attnGradP:
				gradPHead(a, in[0], in[1], keep, out, b, h)
			case attnGradV:
				gradVHead(a, in[0], in[1], keep, out, b, h)
			case attnGradQ, attnGradK:
				gradQKHead(a, in[0], in[1], in[2], op.out == attnGradQ, out, b, h)
			}
		}
	}
}

// weightsHead writes P = softmax(Q K^T * scale + bias) for sequence b, head
// h, subtracting each row's max. Hidden keys (bias < 0) get 0; a row with no
// visible key is all 0.
func weightsHead[T float32 | float64](a heads, q, k, bias, p []T, b, h int) {
	s := make([]float64, a.Sk)
	for i := 0; i < a.Sq; i++ {
		qi, pi := row(a, q, a.Sq, b, i, h), pRow(a, p, b, h, i)
		m := math.Inf(-1)
		for j := range s {
			if bias != nil && bias[(b*a.Sq+i)*a.Sk+j] < 0 {
				s[j] = math.Inf(-1)
				continue
			}
			s[j] = dot(qi, row(a, k, a.Sk, b, j, h)) * a.scale
			m = math.Max(m, s[j])
		}
		if math.IsInf(m, -1) {
			clear(pi)
			continue
		}
		var sum float64
		for j := range s {
			s[j] = math.Exp(s[j] - m) // exp(-Inf) = 0 for hidden keys
			sum += s[j]
		}
		for j := range s {
			pi[j] = T(s[j] / sum)
		}
	}
}

// weight is P[i, j], times the dropout keep-mask when there is one: the
// weight value j gets in the average of query i.
func weight[T float32 | float64](a heads, p, keep []T, b, h, i, j int) float64 {
	w := float64(pRow(a, p, b, h, i)[j])
	if keep != nil {
		w *= float64(pRow(a, keep, b, h, i)[j])
	}
	return w
}

// mixHead writes out[b, i, head h] = sum_j P[i, j] V[b, j, head h].
func mixHead[T float32 | float64](a heads, p, v, keep, out []T, b, h int) {
	acc := make([]float64, a.dk)
	for i := 0; i < a.Sq; i++ {
		clear(acc)
		for j := 0; j < a.Sk; j++ {
			if w := weight(a, p, keep, b, h, i, j); w != 0 {
				for c, x := range row(a, v, a.Sk, b, j, h) {
					acc[c] += w * float64(x)
				}
			}
		}
		for c := range acc {
			row(a, out, a.Sq, b, i, h)[c] = T(acc[c])
		}
	}
}

// gradPHead writes dP[i, j] = dout[b, i, head h] . V[b, j, head h] (times the
// keep-mask).
func gradPHead[T float32 | float64](a heads, dout, v, keep, dp []T, b, h int) {
	for i := 0; i < a.Sq; i++ {
		di, dpi := row(a, dout, a.Sq, b, i, h), pRow(a, dp, b, h, i)
		for j := range dpi {
			g := dot(di, row(a, v, a.Sk, b, j, h))
			if keep != nil {
				g *= float64(pRow(a, keep, b, h, i)[j])
			}
			dpi[j] = T(g)
		}
	}
}

// gradVHead writes dV[b, j, head h] = sum_i P[i, j] dout[b, i, head h].
func gradVHead[T float32 | float64](a heads, p, dout, keep, dv []T, b, h int) {
	acc := make([]float64, a.dk)
	for j := 0; j < a.Sk; j++ {
		clear(acc)
		for i := 0; i < a.Sq; i++ {
			if w := weight(a, p, keep, b, h, i, j); w != 0 {
				for c, x := range row(a, dout, a.Sq, b, i, h) {
					acc[c] += w * float64(x)
				}
			}
		}
		for c := range acc {
			row(a, dv, a.Sk, b, j, h)[c] = T(acc[c])
		}
	}
}

// gradQKHead writes dQ = dS K (wantQ) or dK = dS^T Q, where
// dS = P * (dP - rowsum(P * dP)) * scale is the gradient of the scores.
func gradQKHead[T float32 | float64](a heads, p, dp, other []T, wantQ bool, out []T, b, h int) {
	ds := make([]float64, a.Sq*a.Sk)
	for i := 0; i < a.Sq; i++ {
		pi, dpi := pRow(a, p, b, h, i), pRow(a, dp, b, h, i)
		rowDot := dot(pi, dpi)
		for j := range pi {
			ds[i*a.Sk+j] = float64(pi[j]) * (float64(dpi[j]) - rowDot) * a.scale
		}
	}
	acc := make([]float64, a.dk)
	if wantQ {
		for i := 0; i < a.Sq; i++ {
			clear(acc)
			for j := 0; j < a.Sk; j++ {
				if g := ds[i*a.Sk+j]; g != 0 {
					for c, x := range row(a, other, a.Sk, b, j, h) {
						acc[c] += g * float64(x)
					}
				}
			}
			for c := range acc {
				row(a, out, a.Sq, b, i, h)[c] = T(acc[c])
			}
		}
		return
	}
	for j := 0; j < a.Sk; j++ {
		clear(acc)
		for i := 0; i < a.Sq; i++ {
			if g := ds[i*a.Sk+j]; g != 0 {
				for c, x := range row(a, other, a.Sq, b, i, h) {
					acc[c] += g * float64(x)
				}
			}
		}
		for c := range acc {
			row(a, out, a.Sk, b, j, h)[c] = T(acc[c])
		}
	}
}

func (op attentionOp) ReturnsPtr() bool     { return false }
func (op attentionOp) CallsExtern() bool    { return false }
func (op attentionOp) OverwritesInput() int { return -1 }

func (op attentionOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "qkv.attention %+v %d", op.dims, op.out) }
func (op attentionOp) Hashcode() uint32      { return hashOf(op) }

func (op attentionOp) String() string {
	return [...]string{"qkv.AttentionWeights", "qkv.AttentionMix", "qkv.AttentionGradQ", "qkv.AttentionGradK", "qkv.AttentionGradP", "qkv.AttentionGradV"}[op.out]
}

// DiffWRT: the weights are differentiable in q and k, the output in P and v;
// the mask and the dropout keep-mask are constants. Gradient ops are not
// differentiated again.
func (op attentionOp) DiffWRT(inputs int) []bool {
	d := make([]bool, inputs)
	if op.out == attnWeights || op.out == attnOutput {
		d[0], d[1] = true, true
	}
	return d
}

// SymDiff returns the gradients of the inputs as attentionOps over the
// forward values and the incoming gradient.
func (op attentionOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	grads := make(G.Nodes, len(inputs))
	apply := func(which int, args ...*G.Node) (*G.Node, error) {
		return G.ApplyOp(attentionOp{dims: op.dims, out: which}, args...)
	}
	var err error
	switch op.out {
	case attnWeights: // inputs q, k, [bias]; output P; grad dP
		if grads[0], err = apply(attnGradQ, output, grad, inputs[1]); err != nil {
			return nil, err
		}
		grads[1], err = apply(attnGradK, output, grad, inputs[0])
	case attnOutput: // inputs P, v, [keep]; grad dout
		rest := inputs[2:]
		if grads[0], err = apply(attnGradP, append(G.Nodes{grad, inputs[1]}, rest...)...); err != nil {
			return nil, err
		}
		grads[1], err = apply(attnGradV, append(G.Nodes{inputs[0], grad}, rest...)...)
	default:
		return nil, fmt.Errorf("graph: %v is not differentiable", op)
	}
	if err != nil {
		return nil, err
	}
	return grads, nil
}
