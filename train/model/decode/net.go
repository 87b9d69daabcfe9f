package decode

import (
	"fmt"
	"math"
	"runtime"

	"github.com/qkv-dev/qkv/internal/vec"
	"github.com/qkv-dev/qkv/layers"
)

// packed is a weight W (in, out), y = x·W, in panels of 16 columns: panel
// p holds W[i][16p : 16p+16] for i = 0, 1, …, in-1 one after the other,
// columns past out zero.
type packed[T float32 | float64] struct {
	in, out, np int
	w           []T
}

// pack copies W, (in, out) row-major, or its transpose (out, in) if
// transposed, into panels.
func pack[T float32 | float64](src []T, in, out int, transposed bool) packed[T] {
	np := (out + panelW - 1) / panelW
	p := packed[T]{in: in, out: out, np: np, w: make([]T, np*in*panelW)}
	for i := range in {
		for j := range out {
			v := src[i*out+j]
			if transposed {
				v = src[j*in+i]
			}
			p.w[(j/panelW)*in*panelW+i*panelW+j%panelW] = v
		}
	}
	return p
}

// kChunk is how many rows of W a pass over the panels takes, so that the
// panels a batch of rows shares stay in the first-level cache.
const kChunk = 128

// apply sets y[r·ldy+16q : r·ldy+16q+16] += x[r·ldx : r·ldx+in]·W's
// panel q for the m rows r and the panels q0 ≤ q < q1, every row reading
// each block of W while it is in cache. Panels 0 … 4⌊np/4⌋-1 go four at a
// time, two rows at a time (mv4x2; mv4 for an odd row left), the rest one
// at a time (mv1), whatever the range: q0 and q1 are bounds of units
// (unitPanel), so that a panel's columns come out the same whichever
// range, and so whichever core, computes them.
func (p *packed[T]) apply(y []T, ldy int, x []T, ldx int, m, q0, q1 int) {
	ps := p.in * panelW
	g4 := min(q1, p.np/4*4)
	for k0 := 0; k0 < p.in; k0 += kChunk {
		kn := min(kChunk, p.in-k0)
		q := q0
		for ; q+4 <= g4; q += 4 {
			w := p.w[q*ps+k0*panelW:]
			r := 0
			for ; r+2 <= m; r += 2 {
				mv4x2(y[r*ldy+q*panelW:], y[(r+1)*ldy+q*panelW:], x[r*ldx+k0:], x[(r+1)*ldx+k0:], w, kn, ps)
			}
			if r < m {
				mv4(y[r*ldy+q*panelW:], x[r*ldx+k0:], w, kn, ps)
			}
		}
		for ; q < q1; q++ {
			w := p.w[q*ps+k0*panelW:]
			for r := range m {
				mv1(y[r*ldy+q*panelW:], x[r*ldx+k0:], w, kn)
			}
		}
	}
}

// units is the number of units of work in a weight of np panels: its
// groups of four panels (mv4) and the panels left (mv1).
func units(np int) int { return np/4 + np%4 }

// unitPanel is the first panel of unit u of a weight of np panels, or np
// for u = units(np).
func unitPanel(np, u int) int {
	if g := np / 4; u > g {
		return 4*g + u - g
	}
	return 4 * u
}

// block is one Transformer block's weights; a nil bias is none.
type block[T float32 | float64] struct {
	ln1g, ln1b, ln2g, ln2b []T
	qkv                    packed[T] // wq | wk | wv, (D, 3D)
	bqkv                   []T
	wo                     packed[T]
	bo                     []T
	w1                     packed[T]
	b1                     []T
	w2                     packed[T]
	b2                     []T
}

// net is the fast decoder of one dtype.
type net[T float32 | float64] struct {
	d, h, dk, dkp, hidden, vocab, l, lp, rows, chunk int
	dp, qkvp, hp, vp                                 int // padded widths of x, qkv, the hidden layer and the logits
	postLN, gelu                                     bool
	eps                                              float64
	scale                                            T

	tok, pos   []T // (vocab, D) and (L, D), pos nil without positions
	blocks     []block[T]
	lnfg, lnfb []T // nil for post-LN
	head       packed[T]
	headB      []T

	// The caches, per block: keys transposed, kt[((r·H+h)·lp/16 + p/16)·dk·16 + i·16 + p%16]
	// the feature i of head h of row r's key at position p; values
	// vc[((r·H+h)·dkp/16 + i/16)·lp·16 + p·16 + i%16].
	kt, vc [][]T

	// Activations of up to rows·chunk tokens at once, and each
	// goroutine's scratch for one head's attention (this one's, the
	// helper's).
	x, hb, qkv, att, ff []T
	scr                 []scratch[T]
	lg                  []T // (rows, vp)
	out                 [][]float64

	// The split of each phase of a step between two cores (team.go): on
	// when cores is 2 and GOMAXPROCS lets Go run two goroutines at once,
	// for chunks of at least minMACs multiply-adds in their products
	// (macs a token), with the team's back-off if backOff; team is nil
	// until a chunk is split, the phase in jb.
	cores, minMACs, macs int
	backOff              bool
	// headGroups, if not 0, is the number of groups of four of Wqkv's
	// panels in each of q, k and v, each group holding whole heads: then
	// a unit of one phase computes a group's queries, keys and values and
	// those heads' attention (phaseHeads), without a hand-over between.
	headGroups int
	team       *team
	jb         job[T]
}

// scratch is one head's scaled query, scores and weighted values.
type scratch[T float32 | float64] struct{ qs, s, o []T }

// phase names the parallel phases of a step.
type phase int

const (
	phaseQKV    phase = iota // in·Wqkv into qkv
	phaseAttend              // keys and values cached, attention into att
	phaseHeads               // both, by groups of heads (headGroups)
	phaseWo                  // att·Wo added to sum
	phaseFF1                 // in·W1 into ff, activated
	phaseFF2                 // ff·W2 added to sum
	phaseHead                // the last tokens' in·Whead into lg
)

// job is the phase a team runs: its inputs and the tokens of the chunk.
type job[T float32 | float64] struct {
	phase     phase
	split     bool // between two cores
	b         *block[T]
	bi        int
	m, tn, t0 int
	lens      []int
	in, sum   []T
}

// newNet copies the parameters of the decoder of m, by name, out of vals.
func newNet[T float32 | float64](m layers.StackConfig, rows int, vals map[string]any) (*net[T], error) {
	get := func(name string, size int, optional bool) ([]T, error) {
		v, ok := vals[name]
		if !ok {
			if optional {
				return nil, nil
			}
			return nil, fmt.Errorf("%w %q", errMissing, name)
		}
		s, ok := v.([]T)
		if !ok {
			var zero T
			return nil, fmt.Errorf("decode: param %q is %T, the model's dtype wants []%T", name, v, zero)
		}
		if len(s) != size {
			return nil, fmt.Errorf("decode: param %q has %d values, want %d", name, len(s), size)
		}
		return s, nil
	}
	d, h := m.Dim, m.Heads
	up := func(n int) int { return (n + panelW - 1) / panelW * panelW }
	n := &net[T]{d: d, h: h, dk: d / h, hidden: m.Hidden, vocab: m.Vocab, l: m.MaxLen, rows: rows,
		postLN: m.PostLN, gelu: m.Activation == layers.ActivationGELU, eps: 1e-5,
		scale: T(m.AttnScale.Factor(d, h))}
	n.dkp, n.lp, n.dp, n.qkvp, n.hp, n.vp = up(n.dk), up(n.l), up(d), up(3*d), up(m.Hidden), up(m.Vocab)
	n.chunk = min(n.l, 64)
	var err error
	if n.tok, err = get("tok_emb.table", m.Vocab*d, false); err != nil {
		return nil, err
	}
	switch m.Positions {
	case "", layers.PositionsLearned:
		if n.pos, err = get("pos_emb.table", m.MaxLen*d, false); err != nil {
			return nil, err
		}
	case layers.PositionsSinusoidal:
		n.pos = make([]T, m.MaxLen*d)
		for p := 0; p < m.MaxLen; p++ {
			for i := 0; i < d; i++ {
				angle := float64(p) / math.Pow(10000, float64(i-i%2)/float64(d))
				if i%2 == 0 {
					n.pos[p*d+i] = T(math.Sin(angle))
				} else {
					n.pos[p*d+i] = T(math.Cos(angle))
				}
			}
		}
	}
	padded := func(s []T, size int) []T {
		if s == nil {
			return nil
		}
		out := make([]T, size)
		copy(out, s)
		return out
	}
	for i := range m.Layers {
		name := func(s string) string { return fmt.Sprintf("blocks.%d.%s", i, s) }
		var b block[T]
		for _, ln := range []struct {
			g, b *[]T
			name string
		}{{&b.ln1g, &b.ln1b, "ln1"}, {&b.ln2g, &b.ln2b, "ln2"}} {
			if *ln.g, err = get(name(ln.name+".gain"), d, false); err != nil {
				return nil, err
			}
			if *ln.b, err = get(name(ln.name+".bias"), d, m.BiasFreeNorm); err != nil {
				return nil, err
			}
		}
		// wq | wk | wv side by side: one (D, 3D) product per step.
		qkv := make([]T, d*3*d)
		var bqkv []T
		if m.Bias {
			bqkv = make([]T, n.qkvp)
		}
		for j, w := range []string{"q", "k", "v"} {
			wt, err := get(name("attn.w"+w), d*d, false)
			if err != nil {
				return nil, err
			}
			for r := range d {
				copy(qkv[r*3*d+j*d:r*3*d+(j+1)*d], wt[r*d:(r+1)*d])
			}
			if m.Bias {
				bt, err := get(name("attn.b"+w), d, false)
				if err != nil {
					return nil, err
				}
				copy(bqkv[j*d:], bt)
			}
		}
		b.qkv, b.bqkv = pack(qkv, d, 3*d, false), bqkv
		for _, lin := range []struct {
			p        *packed[T]
			bias     *[]T
			w, bn    string
			in, outw int
		}{{&b.wo, &b.bo, "attn.wo", "attn.bo", d, d}, {&b.w1, &b.b1, "ff.w1", "ff.b1", d, m.Hidden}, {&b.w2, &b.b2, "ff.w2", "ff.b2", m.Hidden, d}} {
			w, err := get(name(lin.w), lin.in*lin.outw, false)
			if err != nil {
				return nil, err
			}
			*lin.p = pack(w, lin.in, lin.outw, false)
			if m.Bias {
				bias, err := get(name(lin.bn), lin.outw, false)
				if err != nil {
					return nil, err
				}
				*lin.bias = padded(bias, up(lin.outw))
			}
		}
		n.blocks = append(n.blocks, b)
	}
	if !m.PostLN {
		if n.lnfg, err = get("ln_f.gain", d, false); err != nil {
			return nil, err
		}
		if n.lnfb, err = get("ln_f.bias", d, m.BiasFreeNorm); err != nil {
			return nil, err
		}
	}
	if m.TieEmbeddings {
		n.head = pack(n.tok, d, m.Vocab, true) // logits = x·tableᵀ
	} else {
		w, err := get("head.w", d*m.Vocab, false)
		if err != nil {
			return nil, err
		}
		n.head = pack(w, d, m.Vocab, false)
		b, err := get("head.b", m.Vocab, false)
		if err != nil {
			return nil, err
		}
		n.headB = padded(b, n.vp)
	}
	n.tok = append([]T(nil), n.tok...) // the decoder keeps its own copy
	if n.pos != nil {
		n.pos = append([]T(nil), n.pos...)
	}
	for range m.Layers {
		n.kt = append(n.kt, make([]T, rows*h*n.lp*n.dk))
		n.vc = append(n.vc, make([]T, rows*h*n.dkp*n.lp))
	}
	mx := rows * n.chunk
	n.x, n.hb, n.att = make([]T, mx*n.dp), make([]T, mx*n.dp), make([]T, mx*n.dp)
	n.qkv, n.ff = make([]T, mx*n.qkvp), make([]T, mx*n.hp)
	for _, b := range n.blocks {
		for _, p := range []packed[T]{b.qkv, b.wo, b.w1, b.w2} {
			n.macs += p.in * p.np * panelW
		}
	}
	if d%(4*panelW) == 0 && (4*panelW)%n.dk == 0 {
		n.headGroups = d / (4 * panelW)
	}
	n.scr = []scratch[T]{n.newScratch(), n.newScratch()}
	n.setCores(runtime.NumCPU(), minSplitMACs, true)
	n.lg = make([]T, rows*n.vp)
	n.out = make([][]float64, rows)
	for r := range n.out {
		n.out[r] = make([]float64, m.Vocab)
	}
	return n, nil
}

func (n *net[T]) logits(r int) []float64 { return n.out[r] }

func (n *net[T]) cacheBytes() int {
	var zero T
	size := 0
	for i := range n.kt {
		size += len(n.kt[i]) + len(n.vc[i])
	}
	return size * int(sizeOf(zero))
}

func sizeOf[T float32 | float64](T) uintptr {
	var z T
	if _, ok := any(z).(float32); ok {
		return 4
	}
	return 8
}

// run feeds n tokens per row, chunk at a time.
func (n *net[T]) run(toks []int, cnt int, lens []int) {
	for t0 := 0; t0 < cnt; t0 += n.chunk {
		tn := min(n.chunk, cnt-t0)
		n.runChunk(toks, cnt, t0, tn, lens, t0+tn == cnt)
	}
}

// minSplitMACs is the fewest multiply-adds a chunk's products take for the
// decoder to split its phases between two cores: below it, the hand-overs
// (about twenty a step) would cost more than the second core saves.
const minSplitMACs = 1 << 18

// setCores makes the decoder split chunks of at least minMACs
// multiply-adds between two cores if cores (the machine's) is 2 or more,
// with the team's back-off or without.
func (n *net[T]) setCores(cores, minMACs int, backOff bool) {
	n.cores, n.minMACs, n.backOff = min(cores, 2), minMACs, backOff
	if n.team != nil {
		n.team.backOff = backOff
	}
}

// newScratch allocates one goroutine's scratch.
func (n *net[T]) newScratch() scratch[T] {
	return scratch[T]{make([]T, n.dk), make([]T, n.lp), make([]T, n.dkp)}
}

// runChunk feeds tokens t0 … t0+tn-1 of each row's cnt: token m = r·tn + t
// is toks[r·cnt + t0 + t] at position lens[r] + t0 + t. The products and
// the attention run as phases split between cores (parallel), the
// LayerNorms and biases between them on this goroutine.
func (n *net[T]) runChunk(toks []int, cnt, t0, tn int, lens []int, last bool) {
	d, dp := n.d, n.dp
	m := n.rows * tn
	n.jb = job[T]{split: n.splits(m), m: m, tn: tn, t0: t0, lens: lens}
	if n.jb.split {
		defer n.team.judge()
	}
	for i := range m {
		r, p := n.posOf(i)
		id := toks[r*cnt+t0+i%tn]
		x := n.x[i*dp : i*dp+d]
		copy(x, n.tok[id*d:(id+1)*d])
		if n.pos != nil {
			vec.Lin(x, x, n.pos[p*d:(p+1)*d], 1, 1, 0)
		}
	}
	for bi := range n.blocks {
		b := &n.blocks[bi]
		n.jb.b, n.jb.bi = b, bi
		// Attention: its input is LN1(x) pre-LN, x post-LN.
		in := n.sublayerInput(m, b.ln1g, b.ln1b)
		for i := range m {
			setBias(n.qkv[i*n.qkvp:(i+1)*n.qkvp], b.bqkv)
		}
		n.jb.in = in
		if n.headGroups > 0 && n.jb.split {
			n.parallel(phaseHeads)
		} else {
			n.parallel(phaseQKV)
			n.parallel(phaseAttend)
		}
		// x + Attn·Wo + bo.
		n.residual(m, b.bo, phaseWo, b.ln1g, b.ln1b)
		// The feed-forward layer, likewise.
		in = n.sublayerInput(m, b.ln2g, b.ln2b)
		for i := range m {
			setBias(n.ff[i*n.hp:(i+1)*n.hp], b.b1)
		}
		n.jb.in = in
		n.parallel(phaseFF1)
		n.residual(m, b.b2, phaseFF2, b.ln2g, b.ln2b)
	}
	if !last {
		return
	}
	// The head, on each row's last token only.
	in := n.x
	for r := range n.rows {
		i := r*tn + tn - 1
		if n.lnfg != nil {
			n.norm(n.hb[i*dp:i*dp+d], n.x[i*dp:i*dp+d], n.lnfg, n.lnfb)
			in = n.hb
		}
		setBias(n.lg[r*n.vp:(r+1)*n.vp], n.headB)
	}
	n.jb.in = in
	n.parallel(phaseHead)
	for r := range n.rows {
		for v, x := range n.lg[r*n.vp : r*n.vp+n.vocab] {
			n.out[r][v] = float64(x)
		}
	}
}

// splits reports whether a chunk of m tokens is split between two cores:
// on a machine of two, with GOMAXPROCS (read at every chunk) at least 2,
// for enough work, and unless the team backs off (team.use).
func (n *net[T]) splits(m int) bool {
	if n.cores < 2 || m*n.macs < n.minMACs || runtime.GOMAXPROCS(0) < 2 {
		return false
	}
	if n.team == nil {
		n.team = newTeam(func(unit, who int) { n.span(unit, unit+1, who) })
		n.team.backOff = n.backOff
	}
	return n.team.use()
}

// posOf returns the row and position of the chunk's token i.
func (n *net[T]) posOf(i int) (r, p int) {
	r = i / n.jb.tn
	return r, n.jb.lens[r] + n.jb.t0 + i%n.jb.tn
}

// parallel runs phase ph of the current job: in one call on this
// goroutine, or unit by unit between it and the team's helper.
func (n *net[T]) parallel(ph phase) {
	n.jb.phase = ph
	u := n.units()
	if !n.jb.split || u > maxUnits {
		n.span(0, u, 0)
		return
	}
	n.team.run(u)
}

// units is the number of units of the current phase: the weight's
// (units), or the (row, head) pairs of the attention.
func (n *net[T]) units() int {
	switch n.jb.phase {
	case phaseQKV:
		return units(n.jb.b.qkv.np)
	case phaseAttend:
		return n.rows * n.h
	case phaseHeads:
		return n.headGroups
	case phaseWo:
		return units(n.jb.b.wo.np)
	case phaseFF1:
		return units(n.jb.b.w1.np)
	case phaseFF2:
		return units(n.jb.b.w2.np)
	default:
		return units(n.head.np)
	}
}

// span runs units u0 … u1-1 of the current phase, with the scratch of
// goroutine who (0 this one, 1 the helper). Each output element is
// computed by the same calls, in the same order, whatever the units
// around it: the results do not depend on the split.
func (n *net[T]) span(u0, u1, who int) {
	j := &n.jb
	b, dp, m := j.b, n.dp, j.m
	bounds := func(p *packed[T]) (int, int) { return unitPanel(p.np, u0), unitPanel(p.np, u1) }
	switch j.phase {
	case phaseQKV:
		q0, q1 := bounds(&b.qkv)
		b.qkv.apply(n.qkv, n.qkvp, j.in, dp, m, q0, q1)
	case phaseAttend:
		n.attendHeads(u0, u1, &n.scr[who])
	case phaseHeads:
		// Group g's panels of q, k and v: the same mv4 calls as the whole
		// product makes for them; then its heads' attention, every row's.
		hg, g4 := n.h/n.headGroups, 4*n.headGroups
		for g := u0; g < u1; g++ {
			for s := range 3 {
				q0 := 4*g + s*g4
				b.qkv.apply(n.qkv, n.qkvp, j.in, dp, m, q0, q0+4)
			}
			for r := range n.rows {
				n.attendHeads(r*n.h+g*hg, r*n.h+(g+1)*hg, &n.scr[who])
			}
		}
	case phaseWo:
		q0, q1 := bounds(&b.wo)
		b.wo.apply(j.sum, dp, n.att, dp, m, q0, q1)
	case phaseFF1:
		q0, q1 := bounds(&b.w1)
		b.w1.apply(n.ff, n.hp, j.in, dp, m, q0, q1)
		// The activation of these panels' columns: elementwise, so the
		// same values as over the whole row.
		if c0, c1 := q0*panelW, min(q1*panelW, n.hidden); c0 < c1 {
			for i := range m {
				n.activate(n.ff[i*n.hp+c0 : i*n.hp+c1])
			}
		}
	case phaseFF2:
		q0, q1 := bounds(&b.w2)
		b.w2.apply(j.sum, dp, n.ff, n.hp, m, q0, q1)
	case phaseHead:
		q0, q1 := bounds(&n.head)
		n.head.apply(n.lg, n.vp, j.in[(j.tn-1)*dp:], j.tn*dp, n.rows, q0, q1)
	}
}

// setBias sets y to bias, or to 0 for a nil bias.
func setBias[T float32 | float64](y, bias []T) {
	if bias == nil {
		clear(y)
		return
	}
	copy(y, bias)
}

// norm sets y = LayerNorm(x)·gain + bias (bias nil: none), with graph's
// arithmetic: the biased variance of x minus its mean, eps inside the root.
// sublayerInput returns the input of a sublayer over the chunk's m rows:
// LN(x) with gain and bias, in hb, pre-LN; x itself post-LN.
func (n *net[T]) sublayerInput(m int, gain, bias []T) []T {
	if n.postLN {
		return n.x
	}
	d, dp := n.d, n.dp
	for i := range m {
		n.norm(n.hb[i*dp:i*dp+d], n.x[i*dp:i*dp+d], gain, bias)
	}
	return n.hb
}

// residual adds a sublayer's output projection to the residual stream of
// the chunk's m rows: x + out·W + bias (bias nil for none), the product
// being p. Pre-LN it sums into x; post-LN into hb, then normalised into
// x with gain and bias (the sublayer's LayerNorm).
func (n *net[T]) residual(m int, bias []T, p phase, gain, lnBias []T) {
	d, dp := n.d, n.dp
	sum := n.x
	if n.postLN {
		copy(n.hb[:m*dp], n.x[:m*dp])
		sum = n.hb
	}
	if bias != nil {
		for i := range m {
			vec.Lin(sum[i*dp:i*dp+d], sum[i*dp:i*dp+d], bias, 1, 1, 0)
		}
	}
	n.jb.sum = sum
	n.parallel(p)
	if n.postLN {
		for i := range m {
			n.norm(n.x[i*dp:i*dp+d], n.hb[i*dp:i*dp+d], gain, lnBias)
		}
	}
}

func (n *net[T]) norm(y, x, gain, bias []T) {
	vec.Normalise(x, y, n.eps)
	vec.MulAdd(y, y, gain, bias)
}

// activate applies the feed-forward activation to h in place.
func (n *net[T]) activate(h []T) {
	if !n.gelu {
		vec.ReLU(h, h)
		return
	}
	switch h := any(h).(type) {
	case []float32:
		vec.GELU(h, h)
	case []float64:
		vec.GELU64(h, h)
	}
}

// attendHeads caches the keys and values of the chunk's tokens and
// writes their attention into att, for the (row, head) pairs u0 … u1-1
// (u = r·H + h), with scratch sc.
func (n *net[T]) attendHeads(u0, u1 int, sc *scratch[T]) {
	bi, tn := n.jb.bi, n.jb.tn
	for u := u0; u < u1; u++ {
		r, hh := u/n.h, u%n.h
		for i := r * tn; i < (r+1)*tn; i++ {
			_, p := n.posOf(i)
			n.store(bi, r, hh, p, n.qkv[i*n.qkvp:])
		}
		for i := r * tn; i < (r+1)*tn; i++ {
			_, p := n.posOf(i)
			n.attend(bi, r, hh, p+1, n.qkv[i*n.qkvp:], n.att[i*n.dp:], sc)
		}
	}
}

// store writes head hh's key and value in qkv (q | k | v) of row r at
// position p into block bi's caches.
func (n *net[T]) store(bi, r, hh, p int, qkv []T) {
	d, dk, kt, vc := n.d, n.dk, n.kt[bi], n.vc[bi]
	k := qkv[d+hh*dk : d+(hh+1)*dk]
	v := qkv[2*d+hh*dk : 2*d+(hh+1)*dk]
	kb := ((r*n.h+hh)*(n.lp/panelW)+p/panelW)*dk*panelW + p%panelW
	for i, x := range k {
		kt[kb+i*panelW] = x
	}
	vb := (r*n.h + hh) * (n.dkp / panelW) * n.lp * panelW
	for i, x := range v {
		vc[vb+(i/panelW)*n.lp*panelW+p*panelW+i%panelW] = x
	}
}

// attend writes into att[hh·dk : (hh+1)·dk] row r's attention of block bi,
// head hh, for the query in qkv over its first cnt positions.
func (n *net[T]) attend(bi, r, hh, cnt int, qkv, att []T, sc *scratch[T]) {
	dk := n.dk
	np := (cnt + panelW - 1) / panelW
	kstride, vstride := dk*panelW, n.lp*panelW
	q := qkv[hh*dk : (hh+1)*dk]
	vec.Lin(sc.qs, q, q, n.scale, 0, 0)
	s := sc.s[:np*panelW]
	clear(s)
	kt := n.kt[bi][(r*n.h+hh)*(n.lp/panelW)*kstride:]
	panels(s, sc.qs, kt, dk, np, kstride)
	s = s[:cnt]
	top := s[0]
	for _, x := range s[1:] {
		top = max(top, x)
	}
	var sum T
	switch s := any(s).(type) {
	case []float32:
		sum = T(vec.ExpShiftSum(s, s, float32(top)))
	case []float64:
		var t float64
		for j, x := range s {
			s[j] = math.Exp(x - float64(top))
			t += s[j]
		}
		sum = T(t)
	}
	clear(sc.o)
	vc := n.vc[bi][(r*n.h+hh)*(n.dkp/panelW)*vstride:]
	panels(sc.o, s, vc, cnt, n.dkp/panelW, vstride)
	vec.Lin(att[hh*dk:(hh+1)*dk], sc.o[:dk], sc.o[:dk], 1/sum, 0, 0)
}
