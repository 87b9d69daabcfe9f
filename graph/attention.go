package graph

import (
	"fmt"
	"hash"
	"iter"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	fastgemm "github.com/qkv-dev/qkv/internal/gemm"
	"github.com/qkv-dev/qkv/internal/gemm/par"
	"github.com/qkv-dev/qkv/internal/vec"
)

// fusedAttention is Attend's Fused implementation, in two custom ops:
//
//	P   = attnWeights(q, k, [mask], [bias], [sinks])   (B, H, Sq, Sk)
//	out = attnOutput(P, v, [keep])                     (B, Sq, D)
//
// Each is one op forward and one per input backward, computed head by head
// in plain loops on the (B, S, D) layout, instead of gorgonia's reshapes,
// transposes, batched matmuls and broadcasts: the same arithmetic without
// copying the heads around. The tests hold both steps to plain loops, to
// the composed graph and to finite differences.
func fusedAttention(q, k, v *G.Node, s Spec, d attnDims) (out, weights *G.Node, err error) {
	var run *modRun
	if s.active() {
		run = newModRun(s, d.Sq, d.Sk)
	}
	d.Causal = run.causalOnly()
	wop := attentionOp{dims: d, out: attnWeights, mod: run, mask: s.Mask}
	if weights, err = apply(wop, wop.args(map[role]*G.Node{roleQ: q, roleK: k, roleMask: s.Mask.bias(), roleBias: s.Bias, roleSinks: s.Sinks})...); err != nil {
		return nil, nil, fmt.Errorf("weights: %w", err)
	}
	oop := attentionOp{dims: d, out: attnOutput}
	if out, err = apply(oop, oop.args(map[role]*G.Node{roleP: weights, roleV: v, roleKeep: s.Keep})...); err != nil {
		return nil, nil, err
	}
	return out, weights, nil
}

// attnDims are the sizes of one attention and which optional inputs it has.
type attnDims struct {
	B, Sq, Sk, D, H int
	// KV is the number of key/value heads, H without grouped-query
	// attention; k and v are (B, Sk, KV*dk).
	KV              int
	Masked, Dropped bool
	// Bias is the rank of the score bias: 0 without one, 3 for (H, Sq, Sk)
	// shared by the batch, 4 for (B, H, Sq, Sk).
	Bias int
	// Scored: a score modifier's derivative enters the gradients of q and k.
	// Sinks: one sink logit per head joins each softmax.
	Scored, Sinks bool
	// Causal: the modifiers are the Causal mask alone, at the default
	// positions, so every op of the attention, not only those that hold
	// the modifiers, may bound query i's keys at i (softmaxCausal,
	// causalBlocks).
	Causal bool
}

// kd is the width of k and v, KV*dk.
func (d attnDims) kd() int { return d.KV * (d.D / d.H) }

// kvHead is the KV head that query head h reads.
func (d attnDims) kvHead(h int) int { return h / (d.H / d.KV) }

// biasBlock is the index of the (Sq, Sk) block of the score bias that head h
// of sequence b adds.
func (d attnDims) biasBlock(b, h int) int {
	if d.Bias == 4 {
		return b*d.H + h
	}
	return h
}

// attentionDims checks the shapes and dtypes of q, k, v and of s's inputs
// against each other and returns the attention's sizes.
func attentionDims(q, k, v *G.Node, s Spec) (attnDims, error) {
	heads, mask, bias, keep := s.Heads, s.Mask, s.Bias, s.Keep
	qs, ks, vs := q.Shape(), k.Shape(), v.Shape()
	if len(qs) != 3 || len(ks) != 3 || !ks.Eq(vs) || ks[0] != qs[0] {
		return attnDims{}, shapeErrorf("q %v, k %v, v %v: want (B, Sq, D), (B, Sk, KVHeads*dk), (B, Sk, KVHeads*dk)", qs, ks, vs)
	}
	d := attnDims{B: qs[0], Sq: qs[1], Sk: ks[1], D: qs[2], H: heads, Masked: mask != nil, Dropped: keep != nil,
		Scored: s.ScoreMod != nil, Sinks: s.Sinks != nil}
	if heads <= 0 || d.D%heads != 0 {
		return attnDims{}, shapeErrorf("width %d is not divisible by %d heads", d.D, heads)
	}
	if err := s.checkMods(heads, d.B, d.Sq, d.Sk, q.Dtype()); err != nil {
		return attnDims{}, err
	}
	d.KV = s.kvHeads(heads)
	if ks[2] != d.kd() {
		if d.KV == d.H {
			return attnDims{}, shapeErrorf("q %v, k %v, v %v: want (B, Sq, D), (B, Sk, D), (B, Sk, D)", qs, ks, vs)
		}
		return attnDims{}, shapeErrorf("k and v are %v, want width KVHeads*dk = %d*%d = %d", ks, d.KV, d.D/d.H, d.kd())
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
			return attnDims{}, shapeErrorf("mask is (B, Sq, Sk) = (%d, %d, %d), want (%d, %d, %d)", mask.B, mask.Sq, mask.Sk, d.B, d.Sq, d.Sk)
		}
		if mask.Bias.Dtype() != q.Dtype() {
			return attnDims{}, fmt.Errorf("mask is %v, q is %v", mask.Bias.Dtype(), q.Dtype())
		}
	}
	if bias != nil {
		switch bs := bias.Shape(); {
		case bs.Eq(tensor.Shape{d.H, d.Sq, d.Sk}):
			d.Bias = 3
		case bs.Eq(tensor.Shape{d.B, d.H, d.Sq, d.Sk}):
			d.Bias = 4
		default:
			return attnDims{}, shapeErrorf("score bias %q is %v, want (H, Sq, Sk) = (%d, %d, %d) or (B, H, Sq, Sk) = (%d, %d, %d, %d)",
				bias.Name(), bs, d.H, d.Sq, d.Sk, d.B, d.H, d.Sq, d.Sk)
		}
		if bias.Dtype() != q.Dtype() {
			return attnDims{}, fmt.Errorf("score bias %q is %v, q is %v", bias.Name(), bias.Dtype(), q.Dtype())
		}
	}
	if keep != nil && (!keep.Shape().Eq(tensor.Shape{d.B, d.H, d.Sq, d.Sk}) || keep.Dtype() != q.Dtype()) {
		return attnDims{}, shapeErrorf("dropout keep-mask %v %v, want %v (%d, %d, %d, %d)", keep.Dtype(), keep.Shape(), q.Dtype(), d.B, d.H, d.Sq, d.Sk)
	}
	// The weights (B, H, Sq, Sk) and runAttention's per-head buffers are
	// allocated when the graph runs, where a failed make cannot be caught:
	// check their sizes now.
	if err := CheckElements(d.B, d.H, d.Sq, d.Sk); err != nil {
		return attnDims{}, fmt.Errorf("weights (B, H, Sq, Sk): %w", err)
	}
	if err := CheckElements(max(d.Sq, d.Sk), max(d.D/d.H, d.Sk)); err != nil {
		return attnDims{}, fmt.Errorf("per-head buffer: %w", err)
	}
	return d, nil
}

// What an attentionOp computes, and from which inputs ([x] when present):
const (
	attnWeights   = iota // P (B, H, Sq, Sk) from q, k, [mask], [bias], [sinks]
	attnOutput           // out (B, Sq, D) from P, v, [keep]
	attnGradQ            // dq (B, Sq, D) from P, dP, k, [deriv]
	attnGradK            // dk (B, Sk, KV*dk) from P, dP, q, [deriv]
	attnGradP            // dP (B, H, Sq, Sk) from dout (B, Sq, D), v, [keep]
	attnGradV            // dv (B, Sk, KV*dk) from P, dout, [keep]
	attnGradBias         // dbias, the bias's shape, from P, dP
	attnModDeriv         // deriv (B, H, Sq, Sk), the score modifier's derivative, from q, k, [mask]
	attnGradSinks        // dsinks (H) from P, dP
)

// attentionOp is one step of Attention or of its gradient; which one is out.
// mod, for the steps that call modifiers, is nil without them; mask, for
// the steps that read the mask, is the MaskNode whose value it is, and
// lengths its key lengths in one run (MaskNode.setLengths).
type attentionOp struct {
	pureOp
	dims    attnDims
	out     int
	mod     *modRun
	mask    *MaskNode
	lengths []int
	buf     *output
}

func (op attentionOp) withOutput(b *output) G.Op { op.buf = b; return op }

// roles lists the op's inputs, in order ([x] when present).
func (op attentionOp) roles() roleList {
	d := op.dims
	var l roleList
	switch op.out {
	case attnWeights: // q, k, [mask], [bias], [sinks]
		l.add(roleQ, true)
		l.add(roleK, true)
		l.add(roleMask, d.Masked)
		l.add(roleBias, d.Bias != 0)
		l.add(roleSinks, d.Sinks)
	case attnModDeriv: // q, k, [mask]
		l.add(roleQ, true)
		l.add(roleK, true)
		l.add(roleMask, d.Masked)
	case attnGradQ, attnGradK: // P, dP, k or q, [deriv]
		l.add(roleP, true)
		l.add(roleDP, true)
		l.add(roleK, op.out == attnGradQ)
		l.add(roleQ, op.out == attnGradK)
		l.add(roleDeriv, d.Scored)
	case attnGradBias, attnGradSinks: // P, dP
		l.add(roleP, true)
		l.add(roleDP, true)
	case attnOutput: // P, v, [keep]
		l.add(roleP, true)
		l.add(roleV, true)
		l.add(roleKeep, d.Dropped)
	case attnGradV: // P, dout, [keep]
		l.add(roleP, true)
		l.add(roleDOut, true)
		l.add(roleKeep, d.Dropped)
	case attnGradP: // dout, v, [keep]
		l.add(roleDOut, true)
		l.add(roleV, true)
		l.add(roleKeep, d.Dropped)
	}
	return l
}

// rank is the number of dimensions of an input of role r. gorgonia does not
// compare these with the nodes the op is applied to (the ranks of a
// declared type are not unified), so TestOpDeclaredTypes does.
func (op attentionOp) rank(r role) int {
	switch r {
	case roleP, roleDP, roleKeep, roleDeriv:
		return 4
	case roleBias:
		return op.dims.Bias
	case roleSinks:
		return 1
	}
	return 3
}

// args returns the op's arguments from nodes by role.
func (op attentionOp) args(nodes map[role]*G.Node) G.Nodes { return nodesFor(op.roles(), nodes) }

// shape is the output's shape, in buf: Do asks for it at every run.
func (op attentionOp) shape(buf *[4]int) tensor.Shape {
	d := op.dims
	s := tensor.Shape(buf[:0])
	switch op.out {
	case attnWeights, attnGradP, attnModDeriv:
		return append(s, d.B, d.H, d.Sq, d.Sk)
	case attnGradK, attnGradV:
		return append(s, d.B, d.Sk, d.kd())
	case attnGradBias:
		if d.Bias == 4 {
			return append(s, d.B, d.H, d.Sq, d.Sk)
		}
		return append(s, d.H, d.Sq, d.Sk)
	case attnGradSinks:
		return append(s, d.H)
	}
	return append(s, d.B, d.Sq, d.D)
}

func (op attentionOp) Arity() int {
	l := op.roles()
	return l.n
}

func (op attentionOp) Type() hm.Type {
	l := op.roles()
	ranks := make([]int, l.n)
	for i, r := range l.all() {
		ranks[i] = op.rank(r)
	}
	var out [4]int
	return opType(ranks, op.shape(&out).Dims())
}

func (op attentionOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	var buf [4]int
	return op.shape(&buf).Clone(), nil
}

func (op attentionOp) Do(vals ...G.Value) (G.Value, error) {
	var buf [4]int
	op.lengths = maskLengths(op.mask, op.roles(), vals)
	v, err := runKernel(op, vals, op.Arity(), op.shape(&buf), op.buf, op.out == attnGradBias)
	if err == nil {
		err = modErr(op, op)
	}
	return v, err
}

// modErr returns, as an error naming by, the failure of op's score
// modifier kept since the last run, or nil. Generic, so that passing by
// allocates nothing: only a failure turns it into an interface.
func modErr[O fmt.Stringer](op attentionOp, by O) error {
	if op.mod != nil && op.mod.fail.pending() {
		return op.mod.fail.take(by)
	}
	return nil
}

func (op attentionOp) run64(in [][]float64, out []float64) { runAttention(op, in, out) }
func (op attentionOp) run32(in [][]float32, out []float32) { runAttention(op, in, out) }

// runAttention runs op head by head, the (sequence, head) pairs split over
// the cores, each writing only its own part of out. It works in the data's
// dtype, on the heads where they lie: head h of sequence b of a (B, n, D)
// tensor is an (n, dk) matrix starting at (b n D + h dk) with rows D apart,
// which the GEMM reads and writes in place.
func runAttention[T float32 | float64](op attentionOp, in [][]T, out []T) {
	j := jobOf[attentionJob[T]](op.buf)
	j.op, j.in, j.out, j.withK = op, in, out, nil
	j.run()
}

// run runs the job's op over its items.
func (j *attentionJob[T]) run() {
	op, d := j.op, j.op.dims
	// The multiply-adds of a head's two products, for every head.
	workers := par.WorkersFor(2 * d.B * d.H * d.Sq * d.Sk * (d.D / d.H))
	for len(j.scratch) < workers {
		j.scratch = append(j.scratch, &headScratch[T]{blocks: make([]T, 2*d.Sq*d.Sk)})
	}
	items := d.B * d.H
	switch {
	case op.out == attnGradBias && d.Bias == 3, op.out == attnGradSinks:
		items = d.H
	case (op.out == attnGradK || op.out == attnGradV) && d.KV < d.H:
		items = d.B * d.KV
	}
	par.Run(items, workers, j)
}

// attentionJob is runAttention's work; what an item is depends on op.
type attentionJob[T float32 | float64] struct {
	op      attentionOp
	in      [][]T
	out     []T
	withK   *gradK[T]        // for q's gradient, k's too (gradQKOp): &k; else nil
	k       gradK[T]         // withK's, kept here so that a run allocates none
	after   [2]headsAfter[T] // for dP, the ops run after each head's (gradPQKOp): the first nAfter
	nAfter  int
	scratch []*headScratch[T] // one per worker
}

// headsAfter is another attention op run on each head after the job's
// own: its op, inputs and output, with k's gradient when op is q's.
type headsAfter[T float32 | float64] struct {
	op  attentionOp
	in  [][]T
	out []T
	k   gradK[T]
}

// gradK is what q's gradient needs to form k's from the same dS: q, and
// k's gradient's output.
type gradK[T float32 | float64] struct{ q, dk []T }

func (j *attentionJob[T]) Item(w, item int) {
	d, sc := j.op.dims, j.scratch[w]
	switch {
	case j.op.out == attnGradBias && d.Bias == 3:
		// A bias shared by the batch collects every sequence's gradient in
		// one block per head: one item per head, adding the sequences in
		// order, so no two goroutines write a block and the sum is the same
		// from run to run.
		for b := 0; b < d.B; b++ {
			attendHead(j.op, j.in, j.out, sc, b, item, nil)
		}
	case j.op.out == attnGradSinks: // one item per head
		l := j.op.roles()
		sinkGrad(d, inputOf(l, j.in, roleP), inputOf(l, j.in, roleDP), j.out, item)
	case (j.op.out == attnGradK || j.op.out == attnGradV) && d.KV < d.H:
		// The query heads of a group add into one KV head: one item per
		// (sequence, KV head), its query heads in order.
		group := d.H / d.KV
		b, g := item/d.KV, item%d.KV
		for h := g * group; h < (g+1)*group; h++ {
			attendHead(j.op, j.in, j.out, sc, b, h, nil)
		}
	default: // one item per (sequence, head)
		attendHead(j.op, j.in, j.out, sc, item/d.H, item%d.H, j.withK)
		for i := range j.nAfter {
			a := &j.after[i]
			withK := &a.k
			if a.op.out != attnGradQ {
				withK = nil
			}
			attendHead(a.op, a.in, a.out, sc, item/d.H, item%d.H, withK)
		}
	}
}

// headScratch is one worker's buffers: two (Sq, Sk) blocks, and the GEMM's
// packed panels.
type headScratch[T float32 | float64] struct {
	blocks []T
	ws     fastgemm.Workspace[T]
}

// attendHead computes op's output for head h of sequence b; for q's
// gradient with withK, k's gradient too, from the same dS.
func attendHead[T float32 | float64](op attentionOp, in [][]T, out []T, sc *headScratch[T], b, h int, withK *gradK[T]) {
	scratch := sc.blocks
	d := op.dims
	dk, kd, g := d.D/d.H, d.kd(), d.kvHead(h)
	scale := T(1 / math.Sqrt(float64(dk)))
	block := d.Sq * d.Sk
	// head returns head h of sequence b of a (B, n, D) tensor, rows D apart;
	// kvHead its KV head of a (B, n, KV*dk) tensor.
	head := func(x []T, n int) []T { return heads(x, b, n, d.D, h, dk, 0) }
	kvHead := func(x []T, n int) []T { return heads(x, b, n, kd, g, dk, 0) }
	// first is 0 for the first query head of a group, 1 for the others,
	// which add their gradient of k and v into the group's.
	first := T(0)
	if h%(d.H/d.KV) != 0 {
		first = 1
	}
	// weights returns the (Sq, Sk) block of head h of sequence b of an
	// (B, H, Sq, Sk) tensor.
	weights := func(x []T) []T { return x[(b*d.H+h)*block:][:block] }
	// x returns the op's input of role r, nil if it has none.
	roles := op.roles()
	x := func(r role) []T { return inputOf(roles, in, r) }
	// dropped returns P * keep in scratch, or P without dropout.
	dropped := func(p []T) []T {
		if !d.Dropped {
			return p
		}
		pk := scratch[:block]
		for i, k := range weights(x(roleKeep)) {
			pk[i] = p[i] * k
		}
		return pk
	}
	// modded returns dS times the score modifier's derivative.
	modded := func(ds []T) []T {
		if d.Scored {
			for i, der := range weights(x(roleDeriv)) {
				ds[i] *= der
			}
		}
		return ds
	}
	// mask is sequence b's (Sq, Sk) block, nil when there is none to add.
	mask := seqMask(x(roleMask), op.lengths, b, d.Sq, d.Sk)
	gemm := sc.ws.GemmTriangle // the heads are already spread over the cores
	// triangle is what a product may skip under a causal mask alone: the
	// weights of query i are 0 past key i, so of S and dP only the tiles
	// that reach key i are wanted, and the sums of O, dQ (P and dS
	// rows, A[i][q] = 0 for q > i) and dV, dK (their transposes) skip
	// the zeros (fastgemm.GemmTriangle: the same bits). Off places a
	// block's diagonal.
	triangle := func(shape fastgemm.TriangleShape, off int) fastgemm.Triangle {
		if !d.Causal {
			return fastgemm.Triangle{}
		}
		return fastgemm.Triangle{Shape: shape, Off: off}
	}
	// blocks are the query rows [i0, i1) each product is cut into: under
	// a causal mask alone on long rows, row i0..i1's keys end at i1, so
	// each block multiplies only those (about half of the n x n products);
	// otherwise one block of every row, keys to Sk. See causalBlocks.
	blocks := causalBlocks(d.Sq, d.Sk, d.Causal)
	// gradKFrom adds dS^T Q into dK (the KV head's rows of k's gradient).
	gradKFrom := func(ds, q, dkv []T) {
		for r := range blocks { // dK[j0:j1] += dS[first:, j0:j1]^T Q[first:]
			gemm(triangle(fastgemm.UpperA, r.j0-r.first), true, false, r.j1-r.j0, dk, d.Sq-r.first, 1, ds[r.first*d.Sk+r.j0:], d.Sk, q[r.first*d.D:], d.D, first, dkv[r.j0*kd:], kd)
		}
	}
	switch op.out {
	case attnWeights: // P = softmax(mods(Q K^T * scale + mask) + bias | sink)   (Sq, Sk)
		p := weights(out)
		q, k := head(x(roleQ), d.Sq), kvHead(x(roleK), d.Sk)
		for r := range blocks { // S[i0:i1, :keys] = Q[i0:i1] K[:keys]^T
			gemm(triangle(fastgemm.LowerC, r.i0), false, true, r.i1-r.i0, r.keys, dk, scale, q[r.i0*d.D:], d.D, k, kd, 0, p[r.i0*d.Sk:], d.Sk)
		}
		var bias []T
		if bs := x(roleBias); bs != nil {
			bias = bs[d.biasBlock(b, h)*block:][:block]
		}
		sink := math.Inf(-1)
		if sinks := x(roleSinks); sinks != nil {
			sink = float64(sinks[h])
		}
		if d.Causal {
			softmaxCausal(p, mask, bias, sink, d.Sk)
			break
		}
		if op.mod != nil {
			modRows(op.mod, p, nil, mask, b, h, d.Sk)
			mask = nil // added by modRows
		}
		softmaxHead(p, mask, bias, sink, d.Sk)
	case attnModDeriv: // deriv = mods'(Q K^T * scale + mask), 0 where hidden  (Sq, Sk)
		s := scratch[:block]
		gemm(fastgemm.Triangle{}, false, true, d.Sq, d.Sk, dk, scale, head(x(roleQ), d.Sq), d.D, kvHead(x(roleK), d.Sk), kd, 0, s, d.Sk)
		modRows(op.mod, s, weights(out), mask, b, h, d.Sk)
	case attnOutput: // out = (P * keep) V                                (Sq, dk)
		p, v, o := dropped(weights(x(roleP))), kvHead(x(roleV), d.Sk), head(out, d.Sq)
		for r := range blocks { // O[i0:i1] = P[i0:i1, :keys] V[:keys]
			gemm(triangle(fastgemm.LowerA, r.i0), false, false, r.i1-r.i0, dk, r.keys, 1, p[r.i0*d.Sk:], d.Sk, v, kd, 0, o[r.i0*d.D:], d.D)
		}
	case attnGradP: // dP = (dout V^T) * keep                              (Sq, Sk)
		dp, do, v := weights(out), head(x(roleDOut), d.Sq), kvHead(x(roleV), d.Sk)
		// dP[i0:i1, :keys] = dO[i0:i1] V[:keys]^T, 0 past keys: nothing
		// ever writes there, and the output is zero when it is allocated
		// (output.get), so it stays 0 from run to run without being
		// cleared at each (that was 2% of a step at 1024 positions).
		for r := range blocks {
			gemm(triangle(fastgemm.LowerC, r.i0), false, true, r.i1-r.i0, r.keys, dk, 1, do[r.i0*d.D:], d.D, v, kd, 0, dp[r.i0*d.Sk:], d.Sk)
		}
		if d.Dropped {
			for i, k := range weights(x(roleKeep)) {
				dp[i] *= k
			}
		}
	case attnGradV: // dV += (P * keep)^T dout                              (Sk, dk)
		p, do, dv := dropped(weights(x(roleP))), head(x(roleDOut), d.Sq), kvHead(out, d.Sk)
		for r := range blocks { // dV[j0:j1] += P[first:, j0:j1]^T dO[first:]
			gemm(triangle(fastgemm.UpperA, r.j0-r.first), true, false, r.j1-r.j0, dk, d.Sq-r.first, 1, p[r.first*d.Sk+r.j0:], d.Sk, do[r.first*d.D:], d.D, first, dv[r.j0*kd:], kd)
		}
	case attnGradQ: // dQ = dS K, dS = P * (dP - rowsum(P * dP)) * mods' * scale   (Sq, dk)
		ds := modded(scoresGrad(weights(x(roleP)), weights(x(roleDP)), scratch[block:], scale, d.Sk, d.Causal))
		k, dq := kvHead(x(roleK), d.Sk), head(out, d.Sq)
		for r := range blocks { // dQ[i0:i1] = dS[i0:i1, :keys] K[:keys]
			gemm(triangle(fastgemm.LowerA, r.i0), false, false, r.i1-r.i0, dk, r.keys, 1, ds[r.i0*d.Sk:], d.Sk, k, kd, 0, dq[r.i0*d.D:], d.D)
		}
		if withK != nil { // and dK from the same dS (gradQKOp)
			gradKFrom(ds, head(withK.q, d.Sq), kvHead(withK.dk, d.Sk))
		}
	case attnGradK: // dK += dS^T Q                                          (Sk, dk)
		ds := modded(scoresGrad(weights(x(roleP)), weights(x(roleDP)), scratch[block:], scale, d.Sk, d.Causal))
		gradKFrom(ds, head(x(roleQ), d.Sq), kvHead(out, d.Sk))
	case attnGradBias: // dbias = P * (dP - rowsum(P * dP)), the bias is not scaled
		ds := scoresGrad(weights(x(roleP)), weights(x(roleDP)), scratch[block:], 1, d.Sk, d.Causal)
		dst := out[d.biasBlock(b, h)*block:][:block]
		for i, g := range ds {
			dst[i] += g
		}
	}
}

// modRows applies the modifiers of r to the (Sq, n) scores s of head h of
// sequence b, after adding mask (a block of s's shape, or nil): see modRow.
// der, if not nil, receives the derivatives.
//
// Each row is asked of the mask modifier in runs of modSpan keys, as flash
// asks its tiles: a run it calls AllHidden is hidden without a call per
// entry, and an AllVisible one without asking Visible; a Partial one is
// halved (modKeys). So a causal mask costs Visible calls only for the
// modLeaf keys around the diagonal.
func modRows[T float32 | float64](r *modRun, s, der, mask []T, b, h, n int) {
	for i := 0; i*n < len(s); i++ {
		row := s[i*n : (i+1)*n]
		if mask != nil {
			for j, m := range mask[i*n : (i+1)*n] {
				row[j] += m
			}
		}
		var dr []T
		if der != nil {
			dr = der[i*n : (i+1)*n]
		}
		for j0 := 0; j0 < n; j0 += modSpan {
			modKeys(r, row, dr, b, h, i, j0, min(j0+modSpan, n))
		}
	}
}

// modKeys applies the modifiers to keys [j0, j1) of row i (row and dr are
// the whole row). A run the mask modifier calls Partial is halved until its
// halves are AllHidden or AllVisible or modLeaf keys wide, so a causal row
// asks Visible of at most modLeaf keys around the diagonal instead of the
// whole run: per row O(log modSpan) Block calls, not O(modSpan) Visible
// calls.
func modKeys[T float32 | float64](r *modRun, row, dr []T, b, h, i, j0, j1 int) {
	var dc []T
	if dr != nil {
		dc = dr[j0:j1]
	}
	switch cov := r.coverage(b, h, i, i+1, j0, j1); {
	case cov == AllHidden:
		for c := range row[j0:j1] {
			row[j0+c] = T(math.Inf(-1))
		}
		clear(dc)
	case cov == AllVisible && r.score == nil && dc == nil:
		// nothing to hide or change; a -Inf from mask stays -Inf
	case cov == Partial && j1-j0 > modLeaf:
		mid := (j0 + j1) / 2
		modKeys(r, row, dr, b, h, i, j0, mid)
		modKeys(r, row, dr, b, h, i, mid, j1)
	default:
		modRow(r, row[j0:j1], dc, b, h, i, j0, cov)
	}
}

// modSpan is the number of keys of a row that modRows asks the mask
// modifier about at once, and modLeaf the narrowest run it halves a Partial
// one into.
const (
	modSpan = 64
	modLeaf = 8
)

// sinkGrad writes the gradient of head h's sink logit from the weights P
// and their gradient dP (B, H, Sq, Sk): with p_sink = 1 - rowsum(P), the
// sink's weight, a row adds -p_sink * rowsum(P * dP). The sequences and
// rows are added in order, so the sum is the same from run to run.
func sinkGrad[T float32 | float64](d attnDims, p, dp, out []T, h int) {
	var sum float64
	for b := 0; b < d.B; b++ {
		blk := (b*d.H + h) * d.Sq * d.Sk
		for i := 0; i < d.Sq; i++ {
			pr, dr := p[blk+i*d.Sk:][:d.Sk], dp[blk+i*d.Sk:][:d.Sk]
			var mass float64
			for _, x := range pr {
				mass += float64(x)
			}
			sum -= (1 - mass) * float64(vec.Dot(pr, dr))
		}
	}
	out[h] = T(sum)
}

// softmaxHead turns scores s (rows of n) into softmax(s + mask + bias) in
// place, row by row; mask and bias are blocks of s's shape, or nil, and sink
// the logit that joins every row's denominator (-Inf for none). A hidden
// entry's mask is -Inf, so its weight is exp(-Inf) = 0 whatever its score
// and bias. Without a bias nothing is added, so the weights are those of
// scores and mask alone, bit for bit.
func softmaxHead[T float32 | float64](s, mask, bias []T, sink float64, n int) {
	for _, add := range [][]T{mask, bias} {
		if add != nil {
			vec.Lin(s, s, add, 1, 1, 0) // s + add, the bits of s[i] += add[i]
		}
	}
	var group rowGroup[T]
	for i := 0; i*n < len(s); i++ {
		group.add(s[i*n:(i+1)*n], sink)
	}
	group.flush(sink)
}

// rowGroup gathers rows for softmaxRows, rowGroupSize at a time.
type rowGroup[T float32 | float64] struct {
	rows [rowGroupSize][]T
	n    int
}

// rowGroupSize is how many rows softmaxRows takes a phase at a time.
const rowGroupSize = 8

// add adds a row, and runs the group once it is full.
func (g *rowGroup[T]) add(row []T, sink float64) {
	g.rows[g.n] = row
	if g.n++; g.n == rowGroupSize {
		g.flush(sink)
	}
}

// flush runs the rows gathered so far.
func (g *rowGroup[T]) flush(sink float64) {
	softmaxRows(g.rows[:g.n], sink)
	g.n = 0
}

// softmaxRows turns each row of scores into its softmax in place,
// subtracting the row's max first. Entries at -Inf (hidden by a mask) get
// exactly exp(-Inf) = 0. A row whose every entry is -Inf, a query that may
// see nothing, is all 0 rather than 0/0 = NaN: such a row then contributes
// nothing downstream, and its gradient P * (dP - rowsum(P * dP)) is 0 too.
// A finite sink joins the max and the denominator, exp(sink - max), and is
// then dropped: the row sums to 1 - p_sink, and a row that sees nothing is
// all sink, 0 again. float32 rows take internal/vec's eight-lane
// exponential; float64 rows math.Exp, summed in float64.
//
// It goes a phase over every row before the next: the maxes, then the
// exponentials and their sums, then the scaling. Each row alone is a chain
// of waits (a reduction, exponentials of its result, a reduction, a
// division) over a few vectors, which the core does not overlap with the
// next row's; the rows of one phase do not wait on each other. Each row
// gets the same calls on the same values as alone: the same bits.
func softmaxRows[T float32 | float64](rows [][]T, sink float64) {
	var m, inv [rowGroupSize]T
	for r, s := range rows {
		m[r] = rowShift(s, sink)
	}
	for r, s := range rows {
		if math.IsInf(float64(m[r]), -1) {
			clear(s)
			continue
		}
		inv[r] = expShiftRow(s, m[r], sink)
	}
	for r, s := range rows {
		if !math.IsInf(float64(m[r]), -1) {
			vec.Lin(s, s, s, inv[r], 0, 0) // inv s[j] + 0 s[j] + 0: inv s[j], the exponentials being finite
		}
	}
}

// rowShift is what softmaxRows subtracts from a row before exponentiating:
// its max, or a larger sink; -Inf for a row that sees nothing.
func rowShift[T float32 | float64](s []T, sink float64) T {
	m := vec.Max(s)
	if !math.IsInf(sink, -1) && float64(m) < sink {
		m = T(sink)
	}
	return m
}

// expShiftRow sets s to exp(s - m) and returns 1 / (its sum + exp(sink - m)).
func expShiftRow[T float32 | float64](s []T, m T, sink float64) T {
	hasSink := !math.IsInf(sink, -1)
	if s32, ok := any(s).([]float32); ok {
		sum := vec.ExpShiftSum(s32, s32, float32(m))
		if hasSink {
			sum += float32(math.Exp(sink - float64(m)))
		}
		return T(1 / sum)
	}
	var sum float64
	for j, v := range s {
		e := math.Exp(float64(v - m))
		s[j] = T(e)
		sum += e
	}
	if hasSink {
		sum += math.Exp(sink - float64(m))
	}
	return T(1 / sum)
}

// softmaxCausal is modRows with the Causal modifier alone followed by
// softmaxHead, on a row's visible keys only: row i's keys after i are
// hidden by its bounds, as flash's loops do, instead of being set to -Inf
// and exponentiated to 0 (at 65 positions that was most of the op's time).
// Each row's softmax still runs over causalSpan(i, n) keys, hiding those
// between i and it, so that every vec kernel reads the same keys in the
// same lanes as over the whole row: the weights are the same bits.
func softmaxCausal[T float32 | float64](s, mask, bias []T, sink float64, n int) {
	var group rowGroup[T]
	for i := 0; i*n < len(s); i++ {
		row := s[i*n : (i+1)*n]
		v := causalSpan(i, n)
		for _, add := range [][]T{mask, bias} {
			if add != nil {
				vec.Lin(row[:v], row[:v], add[i*n:i*n+v], 1, 1, 0)
			}
		}
		for j := i + 1; j < v; j++ {
			row[j] = T(math.Inf(-1))
		}
		clear(row[v:])
		group.add(row[:v], sink)
	}
	group.flush(sink)
}

// rowBlock is one block of attendHead's products: query rows [i0, i1) and
// the keys [0, keys) they see, for the products with a row per query (S,
// O, dP, dQ); key rows [j0, j1) and the first query that sees them, for
// those with a row per key (dV, dK).
type rowBlock struct{ i0, i1, keys, j0, j1, first int }

// causalRows and causalMinRows: causalBlocks cuts rows of at least
// causalMinRows keys into blocks of causalRows rows. Shorter rows stay one
// block, whose few hidden products cost less than the extra calls (at the
// nanoGPT preset's 65 positions a second block would be a single row).
// causalRows is a multiple of 16, so that every row's causalSpan ends
// within its block's keys.
const (
	causalRows    = 64
	causalMinRows = 2 * causalRows
)

// causalBlocks returns attendHead's row blocks for sq queries and sk keys:
// with causal (the Causal modifier alone, sq = sk at least causalMinRows),
// blocks of causalRows rows, block [i0, i1) reading keys [0, i1) and, for
// dV and dK, queries from i0 (the earlier ones do not see its keys);
// otherwise the single block of every row and key. The products then
// skip only terms whose weight is 0: a sum over at most 256 terms
// (internal/gemm's block of the shared dimension) is the same bits, a
// longer one is cut into blocks elsewhere and may differ in its last
// places.
func causalBlocks(sq, sk int, causal bool) iter.Seq[rowBlock] {
	return func(yield func(rowBlock) bool) {
		if !causal || !causalCut(sq, sk) {
			yield(rowBlock{0, sq, sk, 0, sk, 0})
			return
		}
		for i0 := 0; i0 < sq; i0 += causalRows {
			i1 := min(i0+causalRows, sq)
			if !yield(rowBlock{i0, i1, i1, i0, i1, i0}) {
				return
			}
		}
	}
}

// causalCut reports whether causalBlocks cuts sq queries over sk keys into
// blocks of causalRows.
func causalCut(sq, sk int) bool { return sq == sk && sq >= causalMinRows }

// blockKeys is the number of keys of the causal block (causalBlocks) that
// query i of sq, over sk keys, falls in.
func blockKeys(i, sq, sk int) int {
	if !causalCut(sq, sk) {
		return sk
	}
	return min(sk, (i/causalRows+1)*causalRows)
}

// FusedCausalPairs is the number of (query, key) pairs whose dk
// multiply-adds the fused attention computes over n positions under the
// Causal modifier alone, in dtype dt, summed over a head's six products
// (S = Q Kᵀ and O = P V forward, dP, dV, dQ and dK backward): each block
// of causalBlocks, of it the kernels' tiles GemmTriangle computes
// (fastgemm.TriangleWork): of S and dP the tiles that reach the diagonal,
// of the others each tile's sum up to (or from) it. A FLOP count for the
// fused op's rate (qkv bench) counts these; with no kernels, every pair of
// the blocks in each product (6 n² below causalMinRows).
func FusedCausalPairs(n int, dt tensor.Dtype) float64 {
	work := fastgemm.TriangleWork[float32]
	if dt == tensor.Float64 {
		work = fastgemm.TriangleWork[float64]
	}
	var pairs float64
	for r := range causalBlocks(n, n, true) {
		rows, keys := r.i1-r.i0, r.j1-r.j0
		pairs += 2 * work(fastgemm.Triangle{Shape: fastgemm.LowerC, Off: r.i0}, rows, r.keys, 1)              // S, dP
		pairs += 2 * work(fastgemm.Triangle{Shape: fastgemm.LowerA, Off: r.i0}, rows, 1, r.keys)              // O, dQ
		pairs += 2 * work(fastgemm.Triangle{Shape: fastgemm.UpperA, Off: r.j0 - r.first}, keys, 1, n-r.first) // dV, dK
	}
	return pairs
}

// causalSpan is the number of keys of row i of n that softmaxCausal and
// scoresGrad treat under a causal mask: i+1 rounded up to a multiple of
// every vec kernel's register width (16 float32 lanes), at most n. The keys
// past i+1 are hidden, so their weights are 0 and they add 0 to a row's
// sums.
func causalSpan(i, n int) int { return min(n, (i+1+15)/16*16) }

// scoresGrad returns, in ds, dS = P * (dP - rowsum(P * dP)) * scale: the
// gradient of the scores from that of the weights. With causal (the Causal
// modifier alone), row i's keys past causalSpan(i, n), whose weights are 0,
// get 0 without reading dP, up to its block's last key (causalBlocks): the
// products of dq and dk read no further along the row. (Clearing the rest
// of each row too was 2% of a step at 1024 positions.)
func scoresGrad[T float32 | float64](p, dp, ds []T, scale T, n int, causal bool) []T {
	ds = ds[:len(p)]
	rows := len(p) / n
	for i := range rows {
		v, keys := n, n
		if causal {
			v, keys = causalSpan(i, n), blockKeys(i, rows, n)
		}
		pr, dr := p[i*n:i*n+v], dp[i*n:i*n+v]
		vec.MulDiff(ds[i*n:i*n+v], pr, dr, vec.Dot(pr, dr), scale)
		clear(ds[i*n+v : i*n+keys])
	}
	return ds
}

func (op attentionOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.attention %+v %d", op.dims, op.out)
	if op.mod != nil {
		fmt.Fprintf(h, " %s", op.mod.key)
	}
}
func (op attentionOp) Hashcode() uint32 { return hashOf(op) }

func (op attentionOp) String() string {
	return [...]string{"qkv.AttentionWeights", "qkv.AttentionMix", "qkv.AttentionGradQ", "qkv.AttentionGradK",
		"qkv.AttentionGradP", "qkv.AttentionGradV", "qkv.AttentionGradBias", "qkv.AttentionModDeriv",
		"qkv.AttentionGradSinks"}[op.out]
}

// DiffWRT: the weights are differentiable in q, k, the score bias and the
// sinks, the output in P and v; the mask and the dropout keep-mask are
// constants. Gradient ops are not differentiated again.
func (op attentionOp) DiffWRT(inputs int) []bool {
	d := make([]bool, inputs)
	if op.out != attnWeights && op.out != attnOutput {
		return d
	}
	l := op.roles()
	for i, r := range l.all() {
		d[i] = r == roleQ || r == roleK || r == roleBias || r == roleSinks || r == roleP || r == roleV
	}
	return d
}

// SymDiff returns the gradients of the inputs as attentionOps over the
// forward values and the incoming gradient.
func (op attentionOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	l := op.roles()
	byRole := map[role]*G.Node{}
	for i, r := range l.all() {
		byRole[r] = inputs[i]
	}
	grads := make(G.Nodes, len(inputs))
	// grad makes the gradient op which from nodes by role and puts it at
	// the input of role r.
	gradOf := func(r role, which int, nodes map[role]*G.Node) error {
		g := attentionOp{dims: op.dims, out: which, mod: op.mod.forOp()}
		n, err := apply(g, g.args(nodes)...)
		if err != nil {
			return err
		}
		grads[l.index(r)] = n
		return nil
	}
	switch op.out {
	case attnWeights: // output P, grad dP
		var deriv *G.Node
		if op.dims.Scored {
			dop := attentionOp{dims: op.dims, out: attnModDeriv, mod: op.mod.forOp(), mask: op.mask}
			var err error
			if deriv, err = apply(dop, dop.args(byRole)...); err != nil {
				return nil, err
			}
		}
		from := map[role]*G.Node{roleP: output, roleDP: grad, roleQ: byRole[roleQ], roleK: byRole[roleK], roleDeriv: deriv}
		for _, g := range []struct {
			r       role
			which   int
			present bool
		}{{roleQ, attnGradQ, true}, {roleK, attnGradK, true}, {roleBias, attnGradBias, op.dims.Bias != 0}, {roleSinks, attnGradSinks, op.dims.Sinks}} {
			if g.present {
				if err := gradOf(g.r, g.which, from); err != nil {
					return nil, err
				}
			}
		}
	case attnOutput: // grad dout
		from := map[role]*G.Node{roleDOut: grad, roleP: byRole[roleP], roleV: byRole[roleV], roleKeep: byRole[roleKeep]}
		if err := gradOf(roleP, attnGradP, from); err != nil {
			return nil, err
		}
		if err := gradOf(roleV, attnGradV, from); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("graph: %v is not differentiable", op)
	}
	return grads, nil
}
