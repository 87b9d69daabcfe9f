package graph

import (
	"cmp"
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// gradQKOp is the Machine's form of a fused attention's gradients of q and
// k (fuseAttentionGrads): one pass per head forms dS = P (dP - rowsum(P
// dP)) once, as each of the two ops did, and multiplies it by K and by Q,
// while the head's P, dP and dS are still in cache. dK goes into k's
// gradient op's buffer, whose step then returns it (filledAttentionOp).
// The products are the two ops', so the values are the same bits. Its
// inputs are q's gradient's (P, dP, K, [deriv]), then Q; it returns q's
// gradient, or with returnsK k's (the step it runs at is k's).
type gradQKOp struct {
	attentionOp             // q's gradient
	k           attentionOp // k's gradient
	returnsK    bool
}

func (op gradQKOp) Arity() int { return op.attentionOp.Arity() + 1 }

func (op gradQKOp) String() string { return "qkv.AttentionGradQ+K" }

func (op gradQKOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != op.Arity() {
		return nil, fmt.Errorf("graph: %v: want %d inputs, got %d", op, op.Arity(), len(vals))
	}
	var buf [4]int
	dq, err := runKernel(op, vals, op.Arity(), op.shape(&buf), op.buf, false)
	if err != nil {
		return nil, err
	}
	if err := modErr(op.attentionOp, op); err != nil {
		return nil, err
	}
	if op.returnsK {
		return op.k.buf.get(dq.Dtype(), op.k.shape(&buf), false), nil
	}
	return dq, nil
}

func (op gradQKOp) run64(in [][]float64, out []float64) { runGradQK(op, in, out) }
func (op gradQKOp) run32(in [][]float32, out []float32) { runGradQK(op, in, out) }

func runGradQK[T float32 | float64](op gradQKOp, in [][]T, out []T) {
	var buf [4]int
	j := jobOf[attentionJob[T]](op.buf)
	q := in[len(in)-1]
	dk := elements[T](op.k.buf.get(dtypeOf[T](), op.k.shape(&buf), false))
	j.k = gradK[T]{q, dk}
	j.op, j.in, j.out, j.withK = op.attentionOp, in[:len(in)-1], out, &j.k
	j.run()
	j.withK, j.k = nil, gradK[T]{}
}

// dtypeOf is T's tensor dtype.
func dtypeOf[T float32 | float64]() tensor.Dtype {
	if _, ok := any(T(0)).(float32); ok {
		return tensor.Float32
	}
	return tensor.Float64
}

// gradPQKOp is the Machine's form of a fused attention's dP = dO V^T
// followed by gradQKOp's work, head by head (fuseAttentionGrads): each
// head's dS is formed from its dP while that is still in cache, not after
// the dP of every head has been written and evicted. dP is still this op's
// output, the weights' gradient that a caller may read; the gradients of q
// and k go into their ops' buffers, whose steps then return them
// (filledAttentionOp). Where v's gradient comes after dP, it is computed
// in the same pass too, from the head's P and dO (v). Each value is the
// unfused ops' (the same products of the same operands), so the bits are
// the same. Its inputs are dP's (dO, V, [keep]), then gradQKOp's but dP
// (P, K, [deriv], Q).
type gradPQKOp struct {
	attentionOp // dP's
	qk          gradQKOp
	v           *attentionOp // v's gradient, also run after each head's dP where not nil
}

func (op gradPQKOp) Arity() int { return op.attentionOp.Arity() + op.qk.Arity() - 1 }

func (op gradPQKOp) String() string {
	if op.v != nil {
		return "qkv.AttentionGradP+Q+K+V"
	}
	return "qkv.AttentionGradP+Q+K"
}

func (op gradPQKOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != op.Arity() {
		return nil, fmt.Errorf("graph: %v: want %d inputs, got %d", op, op.Arity(), len(vals))
	}
	var buf [4]int
	own := op.attentionOp.Arity()
	op.lengths = maskLengths(op.mask, op.roles(), vals[:own])
	dp, err := runKernel(op, vals, op.Arity(), op.shape(&buf), op.buf, false)
	if err != nil {
		return nil, err
	}
	if err := cmp.Or(modErr(op.attentionOp, op), modErr(op.qk.attentionOp, op)); err != nil { // (v's reads no modifier)
		return nil, err
	}
	return dp, nil
}

func (op gradPQKOp) run64(in [][]float64, out []float64) { runGradPQK(op, in, out) }
func (op gradPQKOp) run32(in [][]float32, out []float32) { runGradPQK(op, in, out) }

func runGradPQK[T float32 | float64](op gradPQKOp, in [][]T, out []T) {
	var buf [4]int
	own := op.attentionOp.Arity()
	rest := in[own:] // P, K, [deriv], Q
	j := jobOf[attentionJob[T]](op.buf)
	a := &j.after[0]
	// q's gradient reads P, dP, K, [deriv]: dP is this op's output.
	a.in = append(append(a.in[:0], rest[0], out), rest[1:len(rest)-1]...)
	a.op = op.qk.attentionOp
	a.out = elements[T](a.op.buf.get(dtypeOf[T](), a.op.shape(&buf), false))
	a.k = gradK[T]{rest[len(rest)-1], elements[T](op.qk.k.buf.get(dtypeOf[T](), op.qk.k.shape(&buf), false))}
	j.nAfter = 1
	if op.v != nil {
		// v's gradient reads P, dO and [keep]: dP's inputs 0 and 2.
		v := &j.after[1]
		v.in = append(append(v.in[:0], rest[0]), in[0])
		if op.dims.Dropped {
			v.in = append(v.in, in[2])
		}
		v.op = *op.v
		v.out = elements[T](v.op.buf.get(dtypeOf[T](), v.op.shape(&buf), false))
		j.nAfter = 2
	}
	j.op, j.in, j.out, j.withK = op.attentionOp, in[:own], out, nil
	j.run()
	for i := range j.after {
		clear(j.after[i].in)
		j.after[i] = headsAfter[T]{in: j.after[i].in[:0]}
	}
	j.nAfter = 0
}

// filledAttentionOp is an attention gradient whose output a fused op
// (gradQKOp, gradPQKOp) computes at an earlier step: its Do returns that
// output. Its last input is that step's node, read only to run after it.
type filledAttentionOp struct{ attentionOp }

func (op filledAttentionOp) String() string {
	return op.attentionOp.String() + " (computed by a fused op)"
}

func (op filledAttentionOp) Arity() int { return op.attentionOp.Arity() + 1 }

// fillFrom makes s, an attention gradient's step, a filledAttentionOp
// returning what the fused op at step by computes: s reads by's node too,
// to run after it.
func (s *step) fillFrom(by *step) {
	s.rewrite(filledAttentionOp{s.op.(attentionOp)}, append(append([]*G.Node(nil), s.in...), by.node))
}

func (op filledAttentionOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != op.Arity() || vals[0] == nil {
		return nil, fmt.Errorf("graph: %v: want %d inputs, got %d", op, op.Arity(), len(vals))
	}
	var buf [4]int
	return op.buf.get(vals[0].Dtype(), op.shape(&buf), false), nil
}

// fuseAttentionGrads runs each fused attention's gradients of q and k over
// the same P and dP (and modifier derivative) as one gradQKOp, at the step
// of whichever comes first, the other step returning what it computed
// after it; only where every query head has its own KV head (k's gradient
// is not summed over a group's heads).
func (m *Machine) fuseAttentionGrads() {
	type key struct{ p, dp *G.Node }
	grads := map[key][2]int{} // the steps of q's and k's gradients, +1
	index := make(map[*G.Node]int, len(m.steps))
	for i, s := range m.steps {
		index[s.node] = i
		op, ok := s.op.(attentionOp)
		if !ok || (op.out != attnGradQ && op.out != attnGradK) || op.dims.KV != op.dims.H {
			continue
		}
		k := key{s.in[0], s.in[1]}
		g := grads[k]
		g[op.out-attnGradQ] = i + 1
		grads[k] = g
	}
	for _, g := range grads {
		if g[0] == 0 || g[1] == 0 {
			continue
		}
		sq, sk := &m.steps[g[0]-1], &m.steps[g[1]-1]
		opQ, opK := sq.op.(attentionOp), sk.op.(attentionOp)
		if opQ.dims != opK.dims || len(sq.in) != len(sk.in) || opQ.dims.Scored && sq.in[3] != sk.in[3] {
			continue
		}
		in := append(append([]*G.Node(nil), sq.in...), sk.in[2]) // P, dP, K, [deriv], Q
		first, later := sq, sk
		if g[1] < g[0] {
			first, later = sk, sq
		}
		first.rewrite(gradQKOp{opQ, opK, first == sk}, in)
		later.fillFrom(first)
		m.fuseGradP(first, index)
	}
}

// fuseGradP moves the gradQKOp of step s into the step of its dP, as a
// gradPQKOp, where that step is the dP op of the same attention (its dims)
// and every other input of s runs before it (a score modifier's
// derivative may not), and leaves s a filledAttentionOp returning what it
// computed (s still reads dP, so it runs after). index is each step's
// position by its node.
func (m *Machine) fuseGradP(s *step, index map[*G.Node]int) {
	qk := s.op.(gradQKOp)
	at, ok := index[s.in[1]]
	if !ok {
		return
	}
	dp := &m.steps[at]
	op, ok := dp.op.(attentionOp)
	if !ok || op.out != attnGradP || op.dims != qk.dims {
		return
	}
	in := append(append([]*G.Node(nil), dp.in...), s.in[0]) // dO, V, [keep], P
	in = append(in, s.in[2:]...)                            // K, [deriv], Q
	for _, n := range in {
		if i, ok := index[n]; ok && i > at {
			return
		}
	}
	fused := gradPQKOp{attentionOp: op, qk: qk}
	// v's gradient (P, dO, [keep]) too, where its step comes after dP's.
	for i := at + 1; i < len(m.steps); i++ {
		sv := &m.steps[i]
		v, ok := sv.op.(attentionOp)
		if ok && v.out == attnGradV && v.dims == op.dims && sv.in[0] == s.in[0] && sv.in[1] == dp.in[0] &&
			(!op.dims.Dropped || sv.in[2] == dp.in[2]) {
			fused.v = &v
			sv.fillFrom(dp)
			break
		}
	}
	dp.rewrite(fused, in)
	s.op = filledAttentionOp{qk.attentionOp}
	if qk.returnsK {
		s.op = filledAttentionOp{qk.k}
	}
}
