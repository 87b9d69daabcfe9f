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
//	P_h = softmax(Q_h K_h^T / sqrt(dk) + mask)   (B, H, Sq, Sk)
//	out = Concat(P_1 V_1, ..., P_H V_H)           (B, Sq, D)
//
// It returns out and the weights P. mask (B, Sq, Sk) may be nil; keep, the
// keep-mask of attention dropout (B, H, Sq, Sk), may be nil too, else out uses
// P * keep in place of P.
//
// The softmax subtracts each row's own max; hidden keys get weight exactly 0;
// a query that may see no key gets all-zero weights, not NaN.
//
// It is one op forward and one per input backward, computed head by head in
// plain loops, instead of gorgonia's reshape, transpose, batched matmul and
// broadcast ops: the same arithmetic in a fraction of the time and memory,
// with no copies of the heads. Its gradients are checked against finite
// differences and its forward against plain loops in the tests.
func Attention(q, k, v *G.Node, heads int, mask *MaskNode, keep *G.Node) (out, weights *G.Node, err error) {
	d, err := attentionDims(q, k, v, heads, mask, keep)
	if err != nil {
		return nil, nil, fmt.Errorf("graph: attention: %w", err)
	}
	inputs := G.Nodes{q, k, v}
	if mask != nil {
		inputs = append(inputs, mask.Bias)
	}
	if keep != nil {
		inputs = append(inputs, keep)
	}
	op := attentionOp{dims: d, out: attnOutput}
	if out, err = G.ApplyOp(op, inputs...); err != nil {
		return nil, nil, fmt.Errorf("graph: attention: %w", err)
	}
	op.out = attnWeights
	if weights, err = G.ApplyOp(op, inputs...); err != nil {
		return nil, nil, fmt.Errorf("graph: attention weights: %w", err)
	}
	return out, weights, nil
}

// attnDims are the sizes of one attention op and which optional inputs it has.
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

// What an attentionOp computes: the forward output, the weights, or the
// gradient with respect to q, k or v (the incoming gradient then comes last
// among its inputs).
const (
	attnOutput = iota
	attnWeights
	attnGradQ
	attnGradK
	attnGradV
)

// attentionOp is every attention computation: inputs q, k, v[, bias][, keep]
// and, for gradients, dout.
type attentionOp struct {
	dims attnDims
	out  int
}

func (op attentionOp) Arity() int {
	n := 3
	if op.dims.Masked {
		n++
	}
	if op.dims.Dropped {
		n++
	}
	if op.out >= attnGradQ {
		n++
	}
	return n
}

func (op attentionOp) shape() tensor.Shape {
	d := op.dims
	switch op.out {
	case attnWeights:
		return tensor.Shape{d.B, d.H, d.Sq, d.Sk}
	case attnGradK, attnGradV:
		return tensor.Shape{d.B, d.Sk, d.D}
	}
	return tensor.Shape{d.B, d.Sq, d.D}
}

func (op attentionOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	in := make([]hm.Type, 0, op.Arity()+1)
	for i := 0; i < op.Arity(); i++ {
		dims := 3
		if op.dims.Dropped && i == 3+btoi(op.dims.Masked) {
			dims = 4
		}
		in = append(in, &G.TensorType{Dims: dims, Of: a})
	}
	in = append(in, &G.TensorType{Dims: op.shape().Dims(), Of: a})
	return hm.NewFnType(in...)
}

func (op attentionOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.shape(), nil }

func (op attentionOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != op.Arity() {
		return nil, fmt.Errorf("graph: attention: want %d inputs, got %d", op.Arity(), len(vals))
	}
	dt := vals[0].Dtype()
	for _, v := range vals {
		if _, ok := v.(*tensor.Dense); !ok || v.Dtype() != dt {
			return nil, fmt.Errorf("graph: attention: inputs must be dense %v tensors, got %T %v", dt, v, v.Dtype())
		}
	}
	out := tensor.New(tensor.Of(dt), tensor.WithShape(op.shape()...))
	switch dt {
	case tensor.Float64:
		runAttention(op, typed[float64](vals), out.Data().([]float64))
	case tensor.Float32:
		runAttention(op, typed[float32](vals), out.Data().([]float32))
	default:
		return nil, fmt.Errorf("graph: attention: dtype %v is not supported", dt)
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

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// heads holds one op's inputs by role, for the per-head loops.
type heads[T float32 | float64] struct {
	attnDims
	q, k, v, bias, keep, dout []T
	dk                        int
	scale                     float64
}

func runAttention[T float32 | float64](op attentionOp, in [][]T, out []T) {
	a := heads[T]{attnDims: op.dims, q: in[0], k: in[1], v: in[2], dk: op.dims.D / op.dims.H}
	a.scale = 1 / math.Sqrt(float64(a.dk))
	i := 3
	if a.Masked {
		a.bias, i = in[i], i+1
	}
	if a.Dropped {
		a.keep, i = in[i], i+1
	}
	if op.out >= attnGradQ {
		a.dout = in[i]
	}
	p := make([]float64, a.Sq*a.Sk)  // P of one head
	ds := make([]float64, a.Sq*a.Sk) // dL/dscores of one head
	for b := 0; b < a.B; b++ {
		for h := 0; h < a.H; h++ {
			a.probs(b, h, p)
			switch op.out {
			case attnOutput:
				a.applyWeights(b, h, p, out)
			case attnWeights:
				for i, w := range p {
					out[(b*a.H+h)*a.Sq*a.Sk+i] = T(w)
				}
			case attnGradV:
				a.gradV(b, h, p, out)
			case attnGradQ, attnGradK:
				a.gradScores(b, h, p, ds)
				a.gradQK(b, h, ds, op.out == attnGradQ, out)
			}
		}
	}
}

// probs fills p (Sq x Sk) with P = softmax(Q K^T * scale + bias) of sequence
// b and head h, subtracting each row's max; hidden keys (bias < 0) get 0 and a
// row with no visible key is all 0.
func (a *heads[T]) probs(b, h int, p []float64) {
	for i := 0; i < a.Sq; i++ {
		row := p[i*a.Sk : (i+1)*a.Sk]
		qi := a.q[(b*a.Sq+i)*a.D+h*a.dk:][:a.dk]
		m := math.Inf(-1)
		for j := range row {
			if a.bias != nil && a.bias[(b*a.Sq+i)*a.Sk+j] < 0 {
				row[j] = math.Inf(-1)
				continue
			}
			kj := a.k[(b*a.Sk+j)*a.D+h*a.dk:][:a.dk]
			var s float64
			for c, x := range qi {
				s += float64(x) * float64(kj[c])
			}
			row[j] = s * a.scale
			m = math.Max(m, row[j])
		}
		if math.IsInf(m, -1) {
			clear(row)
			continue
		}
		var sum float64
		for j, s := range row {
			row[j] = math.Exp(s - m) // exp(-Inf) = 0 for hidden keys
			sum += row[j]
		}
		for j := range row {
			row[j] /= sum
		}
	}
}

// dropped returns P[i, j] times the dropout keep-mask, the weight V is
// averaged with.
func (a *heads[T]) dropped(b, h, i, j int, p []float64) float64 {
	w := p[i*a.Sk+j]
	if a.keep != nil {
		w *= float64(a.keep[((b*a.H+h)*a.Sq+i)*a.Sk+j])
	}
	return w
}

// applyWeights writes out[b, i, head h] = sum_j P[i, j] V[b, j, head h].
func (a *heads[T]) applyWeights(b, h int, p []float64, out []T) {
	acc := make([]float64, a.dk)
	for i := 0; i < a.Sq; i++ {
		clear(acc)
		for j := 0; j < a.Sk; j++ {
			w := a.dropped(b, h, i, j, p)
			if w == 0 {
				continue
			}
			vj := a.v[(b*a.Sk+j)*a.D+h*a.dk:][:a.dk]
			for c, x := range vj {
				acc[c] += w * float64(x)
			}
		}
		o := out[(b*a.Sq+i)*a.D+h*a.dk:][:a.dk]
		for c := range o {
			o[c] = T(acc[c])
		}
	}
}

// gradV writes dV[b, j, head h] = sum_i P[i, j] dout[b, i, head h].
func (a *heads[T]) gradV(b, h int, p []float64, out []T) {
	acc := make([]float64, a.dk)
	for j := 0; j < a.Sk; j++ {
		clear(acc)
		for i := 0; i < a.Sq; i++ {
			w := a.dropped(b, h, i, j, p)
			if w == 0 {
				continue
			}
			di := a.dout[(b*a.Sq+i)*a.D+h*a.dk:][:a.dk]
			for c, x := range di {
				acc[c] += w * float64(x)
			}
		}
		o := out[(b*a.Sk+j)*a.D+h*a.dk:][:a.dk]
		for c := range o {
			o[c] = T(acc[c])
		}
	}
}

// gradScores fills ds with dL/d(Q K^T) of one head, scale included:
// dP = dout V^T (times the keep-mask), dS = P * (dP - rowsum(P * dP)).
func (a *heads[T]) gradScores(b, h int, p, ds []float64) {
	for i := 0; i < a.Sq; i++ {
		di := a.dout[(b*a.Sq+i)*a.D+h*a.dk:][:a.dk]
		var dot float64
		for j := 0; j < a.Sk; j++ {
			var dp float64
			if p[i*a.Sk+j] != 0 {
				vj := a.v[(b*a.Sk+j)*a.D+h*a.dk:][:a.dk]
				for c, x := range di {
					dp += float64(x) * float64(vj[c])
				}
				if a.keep != nil {
					dp *= float64(a.keep[((b*a.H+h)*a.Sq+i)*a.Sk+j])
				}
			}
			ds[i*a.Sk+j] = dp
			dot += p[i*a.Sk+j] * dp
		}
		for j := 0; j < a.Sk; j++ {
			ds[i*a.Sk+j] = p[i*a.Sk+j] * (ds[i*a.Sk+j] - dot) * a.scale
		}
	}
}

// gradQK writes dQ = dS K (wantQ) or dK = dS^T Q for head h of sequence b.
func (a *heads[T]) gradQK(b, h int, ds []float64, wantQ bool, out []T) {
	rows, cols, other, otherLen := a.Sq, a.Sk, a.k, a.Sk
	if !wantQ {
		rows, cols, other, otherLen = a.Sk, a.Sq, a.q, a.Sq
	}
	acc := make([]float64, a.dk)
	for r := 0; r < rows; r++ {
		clear(acc)
		for c := 0; c < cols; c++ {
			var g float64
			if wantQ {
				g = ds[r*a.Sk+c] // dS[r, c]
			} else {
				g = ds[c*a.Sk+r] // dS^T[r, c]
			}
			if g == 0 {
				continue
			}
			x := other[(b*otherLen+c)*a.D+h*a.dk:][:a.dk]
			for e, xv := range x {
				acc[e] += g * float64(xv)
			}
		}
		o := out[(b*rows+r)*a.D+h*a.dk:][:a.dk]
		for e := range o {
			o[e] = T(acc[e])
		}
	}
}

func (op attentionOp) ReturnsPtr() bool     { return false }
func (op attentionOp) CallsExtern() bool    { return false }
func (op attentionOp) OverwritesInput() int { return -1 }

func (op attentionOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.attention %+v out=%d", op.dims, op.out)
}
func (op attentionOp) Hashcode() uint32 { return hashOf(op) }

func (op attentionOp) String() string {
	return [...]string{"qkv.Attention", "qkv.AttentionWeights", "qkv.AttentionGradQ", "qkv.AttentionGradK", "qkv.AttentionGradV"}[op.out]
}

// DiffWRT: q, k and v; the mask and the dropout keep-mask are constants.
func (op attentionOp) DiffWRT(inputs int) []bool {
	d := make([]bool, inputs)
	if op.out == attnOutput {
		d[0], d[1], d[2] = true, true, true
	}
	return d
}

// SymDiff returns dq, dk, dv, each an attentionOp over the same inputs and
// the incoming gradient. Only the output is differentiable: the weights are
// for inspection.
func (op attentionOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	if op.out != attnOutput {
		return nil, fmt.Errorf("graph: %v is not differentiable", op)
	}
	args := append(append(G.Nodes(nil), inputs...), grad)
	grads := make(G.Nodes, len(inputs))
	for i, which := range []int{attnGradQ, attnGradK, attnGradV} {
		g, err := G.ApplyOp(attentionOp{dims: op.dims, out: which}, args...)
		if err != nil {
			return nil, err
		}
		grads[i] = g
	}
	return grads, nil
}
