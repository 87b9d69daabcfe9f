package graph

import (
	"fmt"
	"hash"
	"math"
	"runtime"
	"sync/atomic"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	fastgemm "github.com/qkv-dev/qkv/internal/gemm"
	"github.com/qkv-dev/qkv/internal/vec"
)

// flashAttention is Attend's Flash implementation: the output (B, Sq, D)
// of the same function as the fused op's, without ever forming the
// (Sq, Sk) weights:
//
//	out_h = softmax(mods(Q_h K_h^T / sqrt(dk) + mask)) V_h,   dk = D/heads
//
// The forward pass walks the keys in tiles of s.Tile, keeping for each
// query a running max m and sum l of the exponentials (the online softmax),
// and keeps only the output and each row's log-sum-exp L = m + log(l). The
// backward pass recomputes each tile's weights P = exp(S - L) from q, k and
// L, and with D_i = rowsum(dO ∘ O)_i gives dS = P ∘ (dO V^T - D) and from it
// dQ, dK and dV. So the memory of forward and backward is O((Sq + Sk) D)
// where the fused op's is O(B H Sq Sk); the price is computing the scores
// twice.
//
// A tile that the mask modifier's Block calls AllHidden is skipped, forward
// and backward, so a sliding window of w keys costs O(Sq w), not O(Sq Sk);
// an AllVisible tile asks no entry. Causal() at default positions is
// lowered further: tiles above the diagonal are never visited and each
// row of the diagonal tile stops at its query. The sinks start each row's
// running max and sum (m = sink, l = 1), and their gradient comes from each
// row's L and D_i alone: -exp(sink_h - L_i) D_i summed over rows.
//
// Work is split over batch × heads × query blocks (forward) and batch ×
// heads (backward) on runtime.GOMAXPROCS goroutines. Every output element
// is written by one goroutine in a fixed order, so results do not depend on
// scheduling. Each tile's products are GEMMs in the data's dtype on the
// heads where they lie, as the fused op's are; each row's running max and
// sum and its log-sum-exp are float64.
func flashAttention(q, k, v *G.Node, s Spec, a attnDims) (out *G.Node, err error) {
	tile := s.Tile
	if tile == 0 {
		tile = DefaultFlashTile
	}
	mods := s // the modifiers, Causal() lowered to the loop bounds
	causal := false
	if mods.QueryPos == nil && mods.KeyPos == nil {
		mods.MaskMod, causal = withoutCausal(mods.MaskMod)
	}
	d := flashDims{B: a.B, Sq: a.Sq, Sk: a.Sk, D: a.D, H: a.H, KV: a.KV, TQ: min(tile, a.Sq), TK: min(tile, a.Sk),
		Masked: s.Mask != nil, Causal: causal, Sinks: a.Sinks}
	// The packed forward value and the packed gradients are allocated when the
	// graph runs, where a failed make cannot be caught: check them now.
	if err := CheckElements(d.B, d.Sq, d.D+2*d.H); err != nil {
		return nil, fmt.Errorf("output and log-sum-exp: %w", err)
	}
	if err := CheckElements(d.B, d.Sq+2*d.Sk, d.D); err != nil {
		return nil, fmt.Errorf("gradients: %w", err)
	}
	var run *modRun
	if mods.active() {
		run = newModRun(mods, d.Sq, d.Sk)
	}
	fop := flashOp{dims: d, out: flashForward, mod: run, mask: s.Mask}
	packed, err := apply(fop, fop.args(map[role]*G.Node{roleQ: q, roleK: k, roleV: v, roleMask: s.Mask.bias(), roleSinks: mods.Sinks})...)
	if err != nil {
		return nil, err
	}
	return apply(flashOp{dims: d, out: flashOutput}, packed)
}

// withoutCausal returns m without Causal() and whether it held it: m
// itself, or one member of an And. Flash hides the future by its loop
// bounds, which are query and key indices: only for default positions.
func withoutCausal(m MaskMod) (MaskMod, bool) {
	switch m := m.(type) {
	case causalMod:
		return nil, true
	case andMod:
		var rest []MaskMod
		for _, x := range m {
			if _, ok := x.(causalMod); !ok {
				rest = append(rest, x)
			}
		}
		if len(rest) < len(m) {
			return And(rest...), true
		}
	}
	return m, false
}

// flashDims are the sizes of one flash attention and its options. TQ and
// TK are the query and key tiles: the option's tile, cut to Sq and Sk.
type flashDims struct {
	B, Sq, Sk, D, H, KV, TQ, TK int
	Masked, Causal, Sinks       bool
}

// kd is the width of k and v, KV*dk; kvHead the KV head query head h reads.
func (d flashDims) kd() int          { return d.KV * (d.D / d.H) }
func (d flashDims) kvHead(h int) int { return h / (d.H / d.KV) }

// lse is the width of the log-sum-exp columns of the packed forward value:
// two per head, L's float value and the rounding error of that value, so
// that a float32 graph keeps L to about float64 precision. The backward pass
// computes exp(S - L) for scores of any size (1e3 and more), and a float32 L
// would make every weight off by up to |L| * 6e-8 relative.
func (d flashDims) lse() int { return 2 * d.H }

// What a flashOp computes, and from which inputs ([x] when present). The
// forward pass is two ops so that gorgonia's autodiff hands the backward the
// log-sum-exp: flashForward's value packs, for each query row, the output
// (D columns) and then L (2H columns); flashOutput copies the output out of
// it. The gradient of flashOutput pads dO to the packed width (flashPad),
// flashGrad computes dQ, dK and dV in one pass into one (B, Sq+2Sk, D)
// value, and flashGradQ/K/V copy each out (dK and dV, KV*dk wide, fill
// the first KV*dk columns of their rows). flashGradSinks needs only each
// row's L and D_i, from the packed value and its gradient.
const (
	flashForward   = iota // packed (B, Sq, D+2H) from q, k, v, [mask], [sinks]
	flashOutput           // out (B, Sq, D) from packed
	flashPad              // dpacked (B, Sq, D+2H) from dout (B, Sq, D)
	flashGrad             // dq, dk, dv stacked (B, Sq+2Sk, D) from q, k, v, [mask], packed, dpacked
	flashGradQ            // dq (B, Sq, D) from the stacked gradients
	flashGradK            // dk (B, Sk, KV*dk) from the stacked gradients
	flashGradV            // dv (B, Sk, KV*dk) from the stacked gradients
	flashGradSinks        // dsinks (H) from packed, dpacked, sinks
)

// flashOp is one step of flash attention or of its gradient; which one is out.
// mod, for the steps that compute scores, is nil without modifiers; mask is
// the MaskNode whose value the steps that compute scores read, and lengths
// its key lengths in one run (MaskNode.setLengths).
type flashOp struct {
	dims    flashDims
	out     int
	mod     *modRun
	mask    *MaskNode
	lengths []int
	buf     *output
}

func (op flashOp) withOutput(b *output) G.Op { op.buf = b; return op }

// roles lists the op's inputs, in order ([x] when present). All are 3-D
// but the sinks (H); TestOpDeclaredTypes compares the declared ranks with
// the nodes the op is applied to.
func (op flashOp) roles() roleList {
	d := op.dims
	var l roleList
	switch op.out {
	case flashForward, flashGrad: // q, k, v, [mask], then [sinks] or packed, dpacked
		l.add(roleQ, true)
		l.add(roleK, true)
		l.add(roleV, true)
		l.add(roleMask, d.Masked)
		l.add(roleSinks, d.Sinks && op.out == flashForward)
		l.add(rolePacked, op.out == flashGrad)
		l.add(roleDPacked, op.out == flashGrad)
	case flashGradSinks: // packed, dpacked, sinks
		l.add(rolePacked, true)
		l.add(roleDPacked, true)
		l.add(roleSinks, true)
	case flashOutput:
		l.add(rolePacked, true)
	case flashPad:
		l.add(roleDOut, true)
	case flashGradQ, flashGradK, flashGradV:
		l.add(roleStacked, true)
	}
	return l
}

// args returns the op's arguments from nodes by role.
func (op flashOp) args(nodes map[role]*G.Node) G.Nodes { return nodesFor(op.roles(), nodes) }

func (op flashOp) shape() tensor.Shape {
	d := op.dims
	switch op.out {
	case flashForward, flashPad:
		return tensor.Shape{d.B, d.Sq, d.D + d.lse()}
	case flashGrad:
		return tensor.Shape{d.B, d.Sq + 2*d.Sk, d.D}
	case flashGradK, flashGradV:
		return tensor.Shape{d.B, d.Sk, d.kd()}
	case flashGradSinks:
		return tensor.Shape{d.H}
	}
	return tensor.Shape{d.B, d.Sq, d.D}
}

func (op flashOp) Arity() int {
	l := op.roles()
	return l.n
}

func (op flashOp) Type() hm.Type {
	l := op.roles()
	ranks := make([]int, l.n)
	for i, r := range l.all() {
		ranks[i] = 3
		if r == roleSinks {
			ranks[i] = 1
		}
	}
	return opType(ranks, op.shape().Dims())
}

func (op flashOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.shape(), nil }

func (op flashOp) Do(vals ...G.Value) (G.Value, error) {
	// Shapes are checked here too: gorgonia's type check ignores them, and
	// a wrong size would index out of range in a worker goroutine.
	if len(vals) == op.Arity() {
		for i, v := range vals {
			if want := op.inputShape(i); v != nil && !v.Shape().Eq(want) {
				return nil, fmt.Errorf("graph: %v: input %d is %v, want %v", op, i, v.Shape(), want)
			}
		}
	}
	op.lengths = maskLengths(op.mask, op.roles(), vals)
	v, err := runKernel(op, vals, op.Arity(), op.shape(), op.buf, true)
	if err == nil && op.mod != nil {
		err = op.mod.fail.take(op)
	}
	return v, err
}

func (op flashOp) run64(in [][]float64, out []float64) { runFlash(op, in, out) }
func (op flashOp) run32(in [][]float32, out []float32) { runFlash(op, in, out) }

// inputShape is the shape input i of op must have.
func (op flashOp) inputShape(i int) tensor.Shape {
	d := op.dims
	l := op.roles()
	switch l.r[i] {
	case roleQ, roleDOut:
		return tensor.Shape{d.B, d.Sq, d.D}
	case roleK, roleV:
		return tensor.Shape{d.B, d.Sk, d.kd()}
	case roleMask:
		return tensor.Shape{d.B, d.Sq, d.Sk}
	case roleSinks:
		return tensor.Shape{d.H}
	case rolePacked, roleDPacked:
		return tensor.Shape{d.B, d.Sq, d.D + d.lse()}
	}
	return tensor.Shape{d.B, d.Sq + 2*d.Sk, d.D} // the stacked gradients
}

func (op flashOp) ReturnsPtr() bool     { return false }
func (op flashOp) CallsExtern() bool    { return false }
func (op flashOp) OverwritesInput() int { return -1 }

func (op flashOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.flash %+v %d", op.dims, op.out)
	if op.mod != nil {
		fmt.Fprintf(h, " %s", op.mod.key)
	}
}
func (op flashOp) Hashcode() uint32 { return hashOf(op) }

func (op flashOp) String() string {
	return [...]string{"qkv.FlashAttention", "qkv.FlashOutput", "qkv.FlashPad", "qkv.FlashGrad",
		"qkv.FlashGradQ", "qkv.FlashGradK", "qkv.FlashGradV", "qkv.FlashGradSinks"}[op.out]
}

// DiffWRT: the forward op is differentiable in q, k, v and the sinks (not
// the mask), flashOutput in the packed value; gradient ops are not
// differentiated again.
func (op flashOp) DiffWRT(inputs int) []bool {
	d := make([]bool, inputs)
	if op.out != flashForward && op.out != flashOutput {
		return d
	}
	l := op.roles()
	for i, r := range l.all() {
		d[i] = r != roleMask
	}
	return d
}

// SymDiff returns the gradients of the inputs as flashOps over the forward
// values and the incoming gradient.
func (op flashOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	l := op.roles()
	byRole := map[role]*G.Node{rolePacked: output, roleDPacked: grad, roleDOut: grad}
	for i, r := range l.all() {
		byRole[r] = inputs[i]
	}
	apply := func(which int) (*G.Node, error) {
		g := flashOp{dims: op.dims, out: which, mod: op.mod.forOp(), mask: op.mask}
		return apply(g, g.args(byRole)...)
	}
	switch op.out {
	case flashOutput: // input packed; grad dout
		dp, err := apply(flashPad)
		if err != nil {
			return nil, err
		}
		return G.Nodes{dp}, nil
	case flashForward: // output packed; grad dpacked
		var err error
		if byRole[roleStacked], err = apply(flashGrad); err != nil {
			return nil, err
		}
		grads := make(G.Nodes, len(inputs))
		for _, g := range []struct {
			r     role
			which int
		}{{roleQ, flashGradQ}, {roleK, flashGradK}, {roleV, flashGradV}, {roleSinks, flashGradSinks}} {
			if i := l.index(g.r); i >= 0 {
				if grads[i], err = apply(g.which); err != nil {
					return nil, err
				}
			}
		}
		return grads, nil
	}
	return nil, fmt.Errorf("graph: %v is not differentiable", op)
}

// runFlash runs one step of op on inputs in, writing out (zeroed).
func runFlash[T float32 | float64](op flashOp, in [][]T, out []T) {
	d := op.dims
	w := d.D + d.lse()
	l := op.roles()
	x := func(r role) []T { return inputOf(l, in, r) }
	switch op.out {
	case flashForward:
		flashForwardKernel(d, op.mod, x(roleQ), x(roleK), x(roleV), x(roleMask), op.lengths, x(roleSinks), out)
	case flashOutput: // copy the first D columns of each packed row
		packed := x(rolePacked)
		for r := 0; r < d.B*d.Sq; r++ {
			copy(out[r*d.D:(r+1)*d.D], packed[r*w:r*w+d.D])
		}
	case flashPad: // dO in the first D columns, 0 for the log-sum-exp
		dout := x(roleDOut)
		for r := 0; r < d.B*d.Sq; r++ {
			copy(out[r*w:r*w+d.D], dout[r*d.D:(r+1)*d.D])
		}
	case flashGrad:
		flashBackwardKernel(d, op.mod, x(roleQ), x(roleK), x(roleV), x(roleMask), op.lengths, x(rolePacked), x(roleDPacked), out)
	case flashGradQ, flashGradK, flashGradV:
		rows, first, width := d.Sq, 0, d.D
		switch op.out {
		case flashGradK:
			rows, first, width = d.Sk, d.Sq, d.kd()
		case flashGradV:
			rows, first, width = d.Sk, d.Sq+d.Sk, d.kd()
		}
		stride := d.Sq + 2*d.Sk
		stacked := x(roleStacked)
		for b := 0; b < d.B; b++ {
			for r := 0; r < rows; r++ {
				copy(out[(b*rows+r)*width:][:width], stacked[(b*stride+first+r)*d.D:][:width])
			}
		}
	case flashGradSinks:
		flashSinkGrad(d, x(rolePacked), x(roleDPacked), x(roleSinks), out)
	}
}

// flashSinkGrad writes the gradient of each head's sink logit: every row i
// adds -p_sink D_i, p_sink = exp(sink_h - L_i) its sink's weight and
// D_i = rowsum(dO ∘ O)_i = sum_j P_ij dP_ij, the rows in order.
func flashSinkGrad[T float32 | float64](d flashDims, packed, dpacked, sinks, out []T) {
	dk, w := d.D/d.H, d.D+d.lse()
	for h := 0; h < d.H; h++ {
		var sum float64
		for r := 0; r < d.B*d.Sq; r++ {
			row, drow := packed[r*w:][:w], dpacked[r*w:][:w]
			L := float64(row[d.D+2*h]) + float64(row[d.D+2*h+1])
			var dot float64
			for c, o := range row[h*dk : (h+1)*dk] {
				dot += float64(drow[h*dk+c]) * float64(o)
			}
			sum -= math.Exp(float64(sinks[h])-L) * dot
		}
		out[h] = T(sum)
	}
}

// flashTiles counts the (query tile, key tile) pairs whose scores flash
// attention computes, forward and backward: the tests read it to see that
// tiles a mask modifier hides are skipped.
var flashTiles atomic.Int64

// keyEnd is the end (exclusive) of the keys query i may see among [j0, j1):
// with Causal, keys j > i are hidden.
func (d flashDims) keyEnd(i, j1 int) int {
	if d.Causal {
		return min(j1, i+1)
	}
	return j1
}

// flashScratch is one forward worker's buffers, O(TQ * dk) and
// O(TQ * TK).
type flashScratch[T float32 | float64] struct {
	acc  []T       // (tile, dk): the block's output, unnormalised
	s    []T       // (tile, tile): a tile's scores, then weights
	m, l []float64 // (tile): each row's running max and sum
	ws   fastgemm.Workspace[T]
}

// flashForwardKernel writes, for every sequence b, head h and query i, the
// output and the log-sum-exp L into the packed rows of out. Work items are
// (b, h, query block); each owns its block's output columns. For each key
// tile, the block's scores are one product Q K^T and its contribution to
// the output one product P V, on the packed GEMM, in the data's dtype and
// on the heads where they lie; the running max and sum are float64.
func flashForwardKernel[T float32 | float64](d flashDims, mod *modRun, qs, ks, vs, masks []T, lengths []int, sinks []T, out []T) {
	dk, kd := d.D/d.H, d.kd()
	scale := T(1 / math.Sqrt(float64(dk)))
	t, tk := d.TQ, d.TK
	blocks := (d.Sq + t - 1) / t
	w := d.D + d.lse()
	parallel(d.B*d.H*blocks, func() any {
		return &flashScratch[T]{acc: make([]T, t*dk), s: make([]T, t*tk), m: make([]float64, t), l: make([]float64, t)}
	}, func(sc any, item int) {
		s := sc.(*flashScratch[T])
		b, h, blk := item/(d.H*blocks), item/blocks%d.H, item%blocks
		i0, i1 := blk*t, min((blk+1)*t, d.Sq)
		nq := i1 - i0
		g := d.kvHead(h)
		q := heads(qs, b, d.Sq, d.D, h, dk, i0)
		mask := seqMask(masks, lengths, b, d.Sq, d.Sk) // (Sq, Sk), nil for none to add
		clear(s.acc[:nq*dk])
		for r := 0; r < nq; r++ {
			// A sink starts the row as if its column came first: max sink,
			// sum exp(sink - sink) = 1, and no value.
			s.m[r], s.l[r] = math.Inf(-1), 0
			if sinks != nil {
				s.m[r], s.l[r] = float64(sinks[h]), 1
			}
		}
		for j0 := 0; j0 < d.Sk; j0 += tk {
			if d.Causal && j0 > i1-1 {
				break // this tile and every later one are above the diagonal
			}
			j1 := min(j0+tk, d.Sk)
			cov := AllVisible
			if mod != nil {
				if cov = mod.coverage(b, h, i0, i1, j0, j1); cov == AllHidden {
					continue // the mask modifier hides every entry of the tile
				}
			}
			flashTiles.Add(1)
			nk := j1 - j0
			k, v := heads(ks, b, d.Sk, kd, g, dk, j0), heads(vs, b, d.Sk, kd, g, dk, j0)
			// S = Q K^T / sqrt(dk)                                 (nq, nk)
			s.ws.Gemm(false, true, nq, nk, dk, scale, q, d.D, k, kd, 0, s.s, nk)
			for r := 0; r < nq; r++ {
				i := i0 + r
				sr := s.s[r*nk : (r+1)*nk]
				visible := sr[:max(d.keyEnd(i, j1)-j0, 0)]
				if mask != nil { // visible + mask, the bits of visible[c] += m
					vec.Lin(visible, visible, mask[i*d.Sk+j0:], 1, 1, 0)
				}
				if mod != nil {
					modRow(mod, visible, nil, b, h, i, j0, cov)
				}
				mt := float64(vec.Max(visible))
				clear(sr[len(visible):]) // keys j > i: weight 0
				if math.IsInf(mt, -1) {
					clear(visible) // every key of this tile is hidden from query i
					continue
				}
				if mt > s.m[r] {
					// Rescale what was summed under the old max; exp(-Inf) = 0
					// on the first visible tile.
					alpha := T(math.Exp(s.m[r] - mt))
					s.l[r] *= float64(alpha)
					for c := range s.acc[r*dk : (r+1)*dk] {
						s.acc[r*dk+c] *= alpha
					}
					s.m[r] = mt
				}
				s.l[r] += expShift(visible, s.m[r], 1) // exactly 0 for a hidden key
			}
			// acc += P V                                            (nq, dk)
			s.ws.Gemm(false, false, nq, dk, nk, 1, s.s, nk, v, kd, 1, s.acc, dk)
		}
		for r := 0; r < nq; r++ {
			row := out[(b*d.Sq+i0+r)*w:][:w]
			o := row[h*dk : (h+1)*dk]
			lse := row[d.D+2*h : d.D+2*h+2]
			if s.l[r] == 0 { // a query that sees no key, and no sink
				clear(o)
				lse[0], lse[1] = T(math.Inf(-1)), 0
				continue
			}
			for c, a := range s.acc[r*dk : (r+1)*dk] {
				o[c] = T(float64(a) / s.l[r])
			}
			L := s.m[r] + math.Log(s.l[r])
			lse[0] = T(L)
			lse[1] = T(L - float64(lse[0]))
		}
	})
}

// expShift sets x[i] = exp(x[i] - shift) * factor in place and returns the
// sum of the exp(x[i] - shift): float32 on internal/vec's eight-lane
// exponential, float64 one element at a time with math.Exp. Entries of -Inf
// become exactly 0.
func expShift[T float32 | float64](x []T, shift, factor float64) float64 {
	var sum float64
	if x32, ok := any(x).([]float32); ok {
		sum = float64(vec.ExpShiftSum(x32, x32, float32(shift)))
	} else {
		for i, v := range x {
			e := math.Exp(float64(v) - shift)
			x[i] = T(e)
			sum += e
		}
	}
	if factor != 1 { // factor x[i] + 0 x[i] + 0: factor x[i], the exponentials being finite
		vec.Lin(x, x, x, T(factor), 0, 0)
	}
	return sum
}

// flashBackward is what the backward pass reads: the inputs in place, and
// each row's L and D_i, O((B H Sq)) float64 values, shared read-only by the
// workers.
type flashBackward[T float32 | float64] struct {
	d          flashDims
	mod        *modRun // the modifiers, or nil
	dk         int
	scale      T
	q, k, v    []T       // (B, Sq, D), (B, Sk, KV*dk), (B, Sk, KV*dk)
	do         []T       // (B, Sq, D + 2H): dO in the first D columns
	mask       []T       // (B, Sq, Sk), or nil
	lengths    []int     // the mask's key lengths (MaskNode.setLengths), or nil
	lse, delta []float64 // (B*H, Sq)
	out        []T       // (B, Sq+2Sk, D): dQ, dK, dV stacked per sequence
}

// flashBackwardKernel writes dQ, dK and dV, stacked per sequence as
// (Sq + 2Sk, D), into out (zeroed), adding each pair of tiles' products in
// place.
//
// dQ_i sums over keys and dK_j, dV_j over queries, so one goroutine cannot
// own both a query block and a key block. With at least as many (b, h) pairs
// as workers, each pair is one work item and computes all three in one pass.
// With fewer (one long sequence, one head), the pass is split in two so that
// both cores work: items (b, h, query block) compute dQ, then items
// (b, h, key block) compute dK and dV, recomputing each pair of tiles' S, P,
// dP and dS a second time (seven products per pair of tiles instead of
// five). Both ways every sum runs in the same order, so the results are the
// same bit for bit whatever the number of goroutines.
func flashBackwardKernel[T float32 | float64](d flashDims, mod *modRun, q, k, v, mask []T, lengths []int, packed, dpacked []T, out []T) {
	dk := d.D / d.H
	w := d.D + d.lse()
	bw := &flashBackward[T]{d: d, mod: mod, dk: dk, scale: T(1 / math.Sqrt(float64(dk))),
		q: q, k: k, v: v, do: dpacked, mask: mask, lengths: lengths, out: out,
		lse: make([]float64, d.B*d.H*d.Sq), delta: make([]float64, d.B*d.H*d.Sq),
	}
	// Each row's L, and D_i = rowsum(dO ∘ O)_i = sum_j P_ij dP_ij: the row's
	// term of the softmax gradient, from dk values instead of a row of P.
	for b := 0; b < d.B; b++ {
		for i := 0; i < d.Sq; i++ {
			row, drow := packed[(b*d.Sq+i)*w:][:w], dpacked[(b*d.Sq+i)*w:][:w]
			for h := 0; h < d.H; h++ {
				pair := b*d.H + h
				bw.lse[pair*d.Sq+i] = float64(row[d.D+2*h]) + float64(row[d.D+2*h+1])
				var dot float64
				for c, o := range row[h*dk : (h+1)*dk] {
					dot += float64(drow[h*dk+c]) * float64(o)
				}
				bw.delta[pair*d.Sq+i] = dot
			}
		}
	}
	t, tk := d.TQ, d.TK
	scratch := func() any { return newTileScratch[T](t * tk) }
	// The query heads of a KV group add into one dK and dV: an item that
	// writes them owns the group, (b, g), and walks its query heads in order.
	group := d.H / d.KV
	if kvPairs := d.B * d.KV; kvPairs >= runtime.GOMAXPROCS(0) {
		parallel(kvPairs, scratch, func(sc any, kv int) {
			for pair := kv * group; pair < (kv+1)*group; pair++ {
				bw.tiles(pair, 0, d.Sq, 0, d.Sk, true, true, sc.(*tileScratch[T]))
			}
		})
		return
	}
	qBlocks, kBlocks := (d.Sq+t-1)/t, (d.Sk+tk-1)/tk
	parallel(d.B*d.H*qBlocks, scratch, func(sc any, item int) {
		pair, blk := item/qBlocks, item%qBlocks
		bw.tiles(pair, blk*t, min((blk+1)*t, d.Sq), 0, d.Sk, true, false, sc.(*tileScratch[T]))
	})
	parallel(d.B*d.KV*kBlocks, scratch, func(sc any, item int) {
		kv, blk := item/kBlocks, item%kBlocks
		for pair := kv * group; pair < (kv+1)*group; pair++ {
			bw.tiles(pair, 0, d.Sq, blk*tk, min((blk+1)*tk, d.Sk), false, true, sc.(*tileScratch[T]))
		}
	})
}

// tileScratch is one backward goroutine's buffers for a pair of tiles.
type tileScratch[T float32 | float64] struct {
	s, dp, der []T // (TQ, TK): scores then weights, dP then dS, the score modifier's derivatives
	ws         fastgemm.Workspace[T]
}

// newTileScratch returns the buffers of n = TQ * TK values each.
func newTileScratch[T float32 | float64](n int) *tileScratch[T] {
	return &tileScratch[T]{s: make([]T, n), dp: make([]T, n), der: make([]T, n)}
}

// tiles adds into bw.out the gradients of the queries [i0, i1) (with
// wantQ) and of the keys [j0, j1) (with wantKV) of head pair (= b*H + h).
// It walks query tiles, then key tiles, each pair of tiles five products on
// the packed GEMM, read from and added to the heads where they lie:
//
//	S  = Q K^T / sqrt(dk),  P = exp(S - L)       (recomputed, ti x tj)
//	dP = dO V^T,            dS = P ∘ (dP - D) ∘ mods' / sqrt(dk)
//	dQ += dS K,  dK += dS^T Q,  dV += P^T dO
//
// Tiles start at multiples of the tile size whatever the ranges, and each
// gradient adds its tiles in ascending order, so the one-pass and two-pass
// backward agree bit for bit.
func (bw *flashBackward[T]) tiles(pair, i0, i1, j0, j1 int, wantQ, wantKV bool, sc *tileScratch[T]) {
	d, n, t, tk := bw.d, bw.dk, bw.d.TQ, bw.d.TK
	b, h := pair/d.H, pair%d.H
	kd, g := d.kd(), d.kvHead(h)
	w := d.D + d.lse()
	stride := d.Sq + 2*d.Sk // rows of one sequence's stacked gradients
	lse, delta := bw.lse[pair*d.Sq:][:d.Sq], bw.delta[pair*d.Sq:][:d.Sq]
	mask := seqMask(bw.mask, bw.lengths, b, d.Sq, d.Sk) // (Sq, Sk), nil for none to add
	s, dp, gemm := sc.s, sc.dp, sc.ws.Gemm
	for ti := i0; ti < i1; ti += t {
		ti1 := min(ti+t, i1)
		nq := ti1 - ti
		q, do := heads(bw.q, b, d.Sq, d.D, h, n, ti), heads(bw.do, b, d.Sq, w, h, n, ti)
		for tj := j0; tj < j1; tj += tk {
			if d.Causal && tj > ti1-1 {
				break // above the diagonal: every weight is 0
			}
			tj1 := min(tj+tk, j1)
			cov := AllVisible
			if bw.mod != nil {
				if cov = bw.mod.coverage(b, h, ti, ti1, tj, tj1); cov == AllHidden {
					continue // every weight is 0
				}
			}
			flashTiles.Add(1)
			nk := tj1 - tj
			k, v := heads(bw.k, b, d.Sk, kd, g, n, tj), heads(bw.v, b, d.Sk, kd, g, n, tj)
			gemm(false, true, nq, nk, n, bw.scale, q, d.D, k, kd, 0, s, nk) // S
			gemm(false, true, nq, nk, n, 1, do, w, v, kd, 0, dp, nk)        // dP
			for r := 0; r < nq; r++ {
				i := ti + r
				sr, dr := s[r*nk:(r+1)*nk], dp[r*nk:(r+1)*nk]
				L := lse[i]
				visible := max(d.keyEnd(i, tj1)-tj, 0)
				if math.IsInf(L, -1) {
					visible = 0 // a query that sees no key: no gradient
				}
				clear(sr[visible:]) // hidden: no weight, no gradient
				clear(dr[visible:])
				if mask != nil {
					vec.Lin(sr[:visible], sr[:visible], mask[i*d.Sk+tj:], 1, 1, 0)
				}
				var der []T
				if bw.mod != nil {
					der = sc.der[:visible]
					modRow(bw.mod, sr[:visible], der, b, h, i, tj, cov)
				}
				// P = exp(S - L), with L split as a float of T plus the rest,
				// so that a float32 L of 1e3 loses nothing.
				hi := T(L)
				expShift(sr[:visible], float64(hi), math.Exp(float64(hi)-L))
				vec.MulDiff(dr[:visible], sr[:visible], dr[:visible], T(delta[i]), bw.scale) // dS = P (dP - D_i) scale
				for c, x := range der {
					dr[c] *= x
				}
			}
			if wantQ { // dQ += dS K
				dq := heads(bw.out, b, stride, d.D, h, n, ti)
				gemm(false, false, nq, n, nk, 1, dp, nk, k, kd, 1, dq, d.D)
			}
			if wantKV { // dK += dS^T Q, dV += P^T dO
				dk := heads(bw.out, b, stride, d.D, g, n, d.Sq+tj)
				dv := heads(bw.out, b, stride, d.D, g, n, d.Sq+d.Sk+tj)
				gemm(true, false, nk, n, nq, 1, dp, nk, q, d.D, 1, dk, d.D)
				gemm(true, false, nk, n, nq, 1, s, nk, do, w, 1, dv, d.D)
			}
		}
	}
}
