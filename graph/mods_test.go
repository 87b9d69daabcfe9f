package graph

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The modifier tests compute every expected value from the definitions in
// plain loops over (b, h, i, j), written independently of mods.go: K and V
// expanded to the query heads by repeat_interleave, the sink as an explicit
// extra column of the softmax, ALiBi's slopes transcribed from the paper's
// get_slopes, the window as i-w < j <= i. A convention that differed (h % G,
// w+1 keys, capping after the mask, fairseq's +m j) fails them.

// modCase is one attention problem with modifiers.
type modCase struct {
	name             string
	b, sq, sk, heads int
	kv, dk           int // kv: KV heads, 0 for heads
	// hide, if not nil, says which (b, i, j) the MaskNode hides.
	hide func(b, i, j int) bool
	// mods returns the package's modifiers (Sinks is added by the runner
	// when sinks is set); visible and score are the reference's.
	mods    func() Spec
	visible func(b, h, i, j int) bool
	score   func(s float64, b, h, i, j int) float64
	sinks   bool
	// qpos and kpos are the positions the modifiers see, nil for 0..S-1.
	qpos, kpos []int
	amp        float64 // amplitude of q and k
	tile       int     // flash's tile
}

func (c modCase) kvHeads() int {
	if c.kv == 0 {
		return c.heads
	}
	return c.kv
}

// modInputs are the values of one problem: q, k, v, the sinks and the
// weights w of the cost sum(out ∘ w).
type modInputs struct{ q, k, v, sinks, w []float64 }

func newModInputs(c modCase, seed uint64) modInputs {
	rng := newRand(seed)
	amp := c.amp
	if amp == 0 {
		amp = 1.5
	}
	d, kd := c.heads*c.dk, c.kvHeads()*c.dk
	return modInputs{
		q: uniform(rng, c.b*c.sq*d, -amp, amp), k: uniform(rng, c.b*c.sk*kd, -amp, amp),
		v: uniform(rng, c.b*c.sk*kd, -1, 1), sinks: uniform(rng, c.heads, -1, 2),
		w: uniform(rng, c.b*c.sq*d, -1, 1),
	}
}

// refSlopes is get_slopes of the ALiBi paper's code (ofirpress/attention_with_linear_biases),
// transcribed line by line.
func refSlopes(n int) []float64 {
	powerOf2 := func(n int) []float64 {
		start := math.Pow(2, -math.Pow(2, -(math.Log2(float64(n))-3)))
		ratio := start
		out := make([]float64, n)
		for i := range out {
			out[i] = start * math.Pow(ratio, float64(i))
		}
		return out
	}
	if l := math.Log2(float64(n)); l == math.Floor(l) {
		return powerOf2(n)
	}
	closest := int(math.Pow(2, math.Floor(math.Log2(float64(n)))))
	out := powerOf2(closest)
	extra := refSlopes(2 * closest)
	for i := 0; i < len(extra) && len(out) < n; i += 2 {
		out = append(out, extra[i])
	}
	return out
}

// modsRef is attention with the modifiers from the definition: weights
// (B, H, Sq, Sk) and output (B, Sq, D).
func modsRef(c modCase, in modInputs) (out, weights []float64) {
	H, G, dk := c.heads, c.kvHeads(), c.dk
	D := H * dk
	// repeat_interleave: K and V of head h are those of KV head h / (H/G).
	expand := func(x []float64) []float64 {
		e := make([]float64, c.b*c.sk*D)
		for b := 0; b < c.b; b++ {
			for j := 0; j < c.sk; j++ {
				for g := 0; g < G; g++ {
					for r := 0; r < H/G; r++ {
						h := g*(H/G) + r
						copy(e[(b*c.sk+j)*D+h*dk:][:dk], x[(b*c.sk+j)*G*dk+g*dk:][:dk])
					}
				}
			}
		}
		return e
	}
	K, V := expand(in.k), expand(in.v)
	pos := func(p []int, b, n, i int) int {
		if p == nil {
			return i
		}
		return p[b*n+i]
	}
	out = make([]float64, c.b*c.sq*D)
	weights = make([]float64, c.b*H*c.sq*c.sk)
	for b := 0; b < c.b; b++ {
		for h := 0; h < H; h++ {
			for i := 0; i < c.sq; i++ {
				qi := pos(c.qpos, b, c.sq, i)
				// logits: the keys, then the sink column
				logits := make([]float64, c.sk, c.sk+1)
				for j := range logits {
					kj := pos(c.kpos, b, c.sk, j)
					if (c.hide != nil && c.hide(b, i, j)) || (c.visible != nil && !c.visible(b, h, qi, kj)) {
						logits[j] = math.Inf(-1)
						continue
					}
					var s float64
					for x := 0; x < dk; x++ {
						s += in.q[(b*c.sq+i)*D+h*dk+x] * K[(b*c.sk+j)*D+h*dk+x]
					}
					s /= math.Sqrt(float64(dk))
					if c.score != nil {
						s = c.score(s, b, h, qi, kj)
					}
					logits[j] = s
				}
				if c.sinks {
					logits = append(logits, in.sinks[h])
				}
				m := math.Inf(-1)
				for _, l := range logits {
					m = math.Max(m, l)
				}
				if math.IsInf(m, -1) {
					continue // nothing visible, no sink: weights and output 0
				}
				var z float64
				for _, l := range logits {
					z += math.Exp(l - m)
				}
				for j := 0; j < c.sk; j++ { // the sink column is dropped
					p := math.Exp(logits[j]-m) / z
					weights[((b*H+h)*c.sq+i)*c.sk+j] = p
					for x := 0; x < dk; x++ {
						out[(b*c.sq+i)*D+h*dk+x] += p * V[(b*c.sk+j)*D+h*dk+x]
					}
				}
			}
		}
	}
	return out, weights
}

// Reference modifiers, from the definitions.
var (
	refCausal = func(_, _, i, j int) bool { return j <= i }
	refWindow = func(w int) func(_, _, i, j int) bool {
		return func(_, _, i, j int) bool { return i-w < j && j <= i }
	}
	refALiBi = func(heads int) func(s float64, _, h, i, j int) float64 {
		m := refSlopes(heads)
		return func(s float64, _, h, i, j int) float64 { return s - m[h]*float64(i-j) }
	}
	refBand = func(w int) func(_, _, i, j int) bool {
		return func(_, _, i, j int) bool { return i-w < j && j < i+w }
	}
	refBidiALiBi = func(heads int) func(s float64, _, h, i, j int) float64 {
		m := refSlopes(heads)
		return func(s float64, _, h, i, j int) float64 { return s - m[h]*math.Abs(float64(i-j)) }
	}
	refSoftcap = func(c float64) func(s float64, _, _, _, _ int) float64 {
		return func(s float64, _, _, _, _ int) float64 { return c * math.Tanh(s/c) }
	}
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// padRows hides padding keys of sequence 1 and every key of query 1 of
// sequence 0: a padding mask with a fully hidden row.
func padRows(sk int) func(b, i, j int) bool {
	return func(b, i, j int) bool { return (b == 1 && j >= sk-2) || (b == 0 && i == 1) }
}

// modCases covers each modifier alone and all of them together.
func modCases() []modCase {
	alibiSoftcap := func(c float64, h int) func(s float64, b, hh, i, j int) float64 {
		a, s := refALiBi(h), refSoftcap(c)
		return func(x float64, b, hh, i, j int) float64 { return s(a(x, b, hh, i, j), b, hh, i, j) }
	}
	return []modCase{
		{name: "causal mod", b: 2, sq: 7, sk: 7, heads: 2, dk: 3, tile: 3,
			mods: func() Spec { return Spec{MaskMod: Causal()} }, visible: refCausal},
		{name: "causal mod, Sq < Sk, padding + hidden row", b: 2, sq: 5, sk: 8, heads: 2, dk: 3, tile: 2, hide: padRows(8),
			mods: func() Spec { return Spec{MaskMod: Causal()} }, visible: refCausal},
		{name: "window 3", b: 2, sq: 11, sk: 11, heads: 2, dk: 3, tile: 2,
			mods: func() Spec { return Spec{MaskMod: must(Window(3))} }, visible: refWindow(3)},
		{name: "window 2, padding + hidden row", b: 2, sq: 6, sk: 6, heads: 1, dk: 4, tile: 4, hide: padRows(6),
			mods: func() Spec { return Spec{MaskMod: must(Window(2))} }, visible: refWindow(2)},
		{name: "ALiBi, 3 heads (not a power of two), Sq > Sk", b: 2, sq: 6, sk: 5, heads: 3, dk: 2, tile: 2,
			mods: func() Spec { return Spec{ScoreMod: must(ALiBi(3))} }, score: refALiBi(3)},
		{name: "ALiBi, 4 heads, causal + padding", b: 2, sq: 6, sk: 6, heads: 4, dk: 2, tile: 4, hide: padRows(6),
			mods:    func() Spec { return Spec{MaskMod: Causal(), ScoreMod: must(ALiBi(4))} },
			visible: refCausal, score: refALiBi(4)},
		{name: "softcap 0.8 on large scores", b: 2, sq: 5, sk: 7, heads: 2, dk: 3, amp: 3, tile: 3,
			mods: func() Spec { return Spec{ScoreMod: must(Softcap(0.8))} }, score: refSoftcap(0.8)},
		{name: "softcap, causal + padding", b: 2, sq: 6, sk: 6, heads: 2, dk: 2, amp: 3, tile: 4, hide: padRows(6),
			mods:    func() Spec { return Spec{MaskMod: Causal(), ScoreMod: must(Softcap(2))} },
			visible: refCausal, score: refSoftcap(2)},
		{name: "chain ALiBi then softcap", b: 1, sq: 6, sk: 6, heads: 2, dk: 3, amp: 3, tile: 4,
			mods:  func() Spec { return Spec{ScoreMod: Chain(must(ALiBi(2)), must(Softcap(1.5)))} },
			score: alibiSoftcap(1.5, 2)},
		{name: "band 2 (bidirectional window)", b: 2, sq: 9, sk: 9, heads: 2, dk: 3, tile: 2,
			mods: func() Spec { return Spec{MaskMod: must(Band(2))} }, visible: refBand(2)},
		{name: "bidirectional ALiBi + band 3, 3 heads, padding + hidden row", b: 2, sq: 7, sk: 7, heads: 3, dk: 2, tile: 2, hide: padRows(7),
			mods:    func() Spec { return Spec{MaskMod: must(Band(3)), ScoreMod: must(BidirectionalALiBi(3))} },
			visible: refBand(3), score: refBidiALiBi(3)},
		{name: "GQA 4 heads over 2", b: 2, sq: 5, sk: 6, heads: 4, kv: 2, dk: 2, tile: 4,
			mods: func() Spec { return Spec{KVHeads: 2} }},
		{name: "GQA 6 heads over 3, padding + hidden row", b: 2, sq: 4, sk: 5, heads: 6, kv: 3, dk: 2, tile: 2, hide: padRows(5),
			mods: func() Spec { return Spec{KVHeads: 3} }},
		{name: "MQA 3 heads over 1, causal mod", b: 1, sq: 6, sk: 6, heads: 3, kv: 1, dk: 2, tile: 4,
			mods: func() Spec { return Spec{KVHeads: 1, MaskMod: Causal()} }, visible: refCausal},
		{name: "sinks", b: 2, sq: 5, sk: 6, heads: 2, dk: 3, tile: 4, sinks: true,
			mods: func() Spec { return Spec{} }},
		{name: "sinks, causal + padding + hidden row", b: 2, sq: 6, sk: 6, heads: 2, dk: 2, tile: 4, sinks: true, hide: padRows(6),
			mods: func() Spec { return Spec{MaskMod: Causal()} }, visible: refCausal},
		{name: "positions: a decode step at t = 9, keys in cache slots", b: 2, sq: 1, sk: 6, heads: 2, dk: 3, tile: 2,
			qpos: []int{9, 7}, kpos: []int{4, 5, 6, 7, 8, 9, 2, 3, 4, 5, 6, 7},
			mods:    func() Spec { return Spec{MaskMod: must(Window(4)), ScoreMod: must(ALiBi(2))} },
			visible: refWindow(4), score: refALiBi(2)},
		{name: "positions: a rolling cache of 6 slots, keys out of order", b: 1, sq: 2, sk: 6, heads: 2, dk: 3, tile: 2,
			qpos: []int{8, 9}, kpos: []int{8, 9, 4, 5, 6, 7}, sinks: true,
			mods:    func() Spec { return Spec{MaskMod: must(Window(4)), ScoreMod: must(ALiBi(2))} },
			visible: refWindow(4), score: refALiBi(2)},
		{name: "all: ALiBi + softcap + window + GQA + sinks, causal mask + padding + hidden row", b: 2, sq: 9, sk: 9,
			heads: 4, kv: 2, dk: 2, amp: 2.5, tile: 3, sinks: true,
			hide: func(b, i, j int) bool { return j > i || padRows(9)(b, i, j) },
			mods: func() Spec {
				return Spec{MaskMod: must(Window(3)), ScoreMod: Chain(must(ALiBi(4)), must(Softcap(1.2))), KVHeads: 2}
			},
			visible: refWindow(3), score: alibiSoftcap(1.2, 4)},
	}
}

// attention implementations under test.
const (
	implComposed = iota
	implFused
	implFlash
)

var implNames = [...]string{"composed", "fused", "flash"}

// modGraph builds the attention of c with impl in g over the given nodes
// and returns its output and weights (nil for flash).
func modGraph(t *testing.T, g *G.ExprGraph, dt tensor.Dtype, c modCase, impl int, q, k, v, sinks *G.Node) (out, weights *G.Node) {
	t.Helper()
	spec := c.mods()
	spec.Sinks = sinks
	spec.QueryPos, spec.KeyPos = c.qpos, c.kpos
	var mask *MaskNode
	if c.hide != nil {
		m, err := NewMask(c.b, c.sq, c.sk)
		if err != nil {
			t.Fatal(err)
		}
		for b := 0; b < c.b; b++ {
			for i := 0; i < c.sq; i++ {
				for j := 0; j < c.sk; j++ {
					m.Allow[(b*c.sq+i)*c.sk+j] = !c.hide(b, i, j)
				}
			}
		}
		if mask, err = NewMaskConst(g, dt, m, "mask"); err != nil {
			t.Fatal(err)
		}
	}
	spec.Heads, spec.Mask = c.heads, mask
	switch impl {
	case implComposed:
		spec.Impl = Composed
	case implFlash:
		spec.Impl, spec.Tile = Flash, c.tile
	}
	out, weights, err := Attend(q, k, v, spec)
	if err != nil {
		t.Fatalf("%s, %s: %v", c.name, implNames[impl], err)
	}
	return out, weights
}

// modRun builds and runs c with impl in dtype dt, returning the output, the
// weights (nil for flash) and the gradients of sum(out ∘ w) with respect to
// q, k, v and the sinks (nil without sinks).
func runMods(t *testing.T, dt tensor.Dtype, c modCase, in modInputs, impl int) (out, weights []float64, grads [4][]float64) {
	t.Helper()
	g := G.NewGraph()
	d, kd := c.heads*c.dk, c.kvHeads()*c.dk
	q := valued(g, dt, tensor.Shape{c.b, c.sq, d}, roundTo(dt, in.q), "q")
	k := valued(g, dt, tensor.Shape{c.b, c.sk, kd}, roundTo(dt, in.k), "k")
	v := valued(g, dt, tensor.Shape{c.b, c.sk, kd}, roundTo(dt, in.v), "v")
	wrt := G.Nodes{q, k, v}
	var sinks *G.Node
	if c.sinks {
		sinks = valued(g, dt, tensor.Shape{c.heads}, roundTo(dt, in.sinks), "sinks")
		wrt = append(wrt, sinks)
	}
	o, w := modGraph(t, g, dt, c, impl, q, k, v, sinks)
	cw := valued(g, dt, o.Shape().Clone(), roundTo(dt, in.w), "w")
	prod, err := G.HadamardProd(o, cw)
	if err != nil {
		t.Fatal(err)
	}
	cost, err := G.Sum(prod)
	if err != nil {
		t.Fatal(err)
	}
	gs, err := G.Grad(cost, wrt...)
	if err != nil {
		t.Fatal(err)
	}
	nodes := append(G.Nodes{o}, gs...)
	if w != nil {
		nodes = append(nodes, w)
	}
	vals := eval(t, nil, nodes...)
	out = vals[0]
	for i := range gs {
		grads[i] = vals[1+i]
	}
	if w != nil {
		weights = vals[len(vals)-1]
	}
	return out, weights, grads
}

// TestModsMatchReference checks each implementation's output and weights
// against modsRef, and the gradients of fused and flash against composed's
// (which gorgonia derives), in float64 and float32.
func TestModsMatchReference(t *testing.T) {
	worst := map[string]float64{}
	for ci, c := range modCases() {
		in := newModInputs(c, uint64(40+ci))
		wantOut, wantWeights := modsRef(c, in)
		for _, dt := range floatTypes {
			tol := tolFor(dt)
			gradTol := 1e-11
			if dt == tensor.Float32 {
				gradTol = 1e-5
			}
			_, _, ref := runMods(t, dt, c, in, implComposed)
			for impl := range implNames {
				name := fmt.Sprintf("%s/%v/%s", c.name, dt, implNames[impl])
				out, weights, grads := runMods(t, dt, c, in, impl)
				checkClose(t, name+": output", out, wantOut, tol)
				worst[dt.String()+" output"] = math.Max(worst[dt.String()+" output"], maxRelDiff(out, wantOut))
				if weights != nil {
					checkClose(t, name+": weights", weights, wantWeights, tol)
				}
				for i, wrt := range []string{"q", "k", "v", "sinks"} {
					if !allFinite(grads[i]) {
						t.Errorf("%s: d%s not finite", name, wrt)
					}
					if impl == implComposed {
						continue
					}
					checkClose(t, name+": d"+wrt, grads[i], ref[i], gradTol)
					worst[dt.String()+" grad"] = math.Max(worst[dt.String()+" grad"], maxRelDiff(grads[i], ref[i]))
				}
			}
		}
	}
	for _, k := range []string{"float64 output", "float64 grad", "float32 output", "float32 grad"} {
		t.Logf("max |impl - reference| / max(1, |reference|), %s: %.3g", k, worst[k])
	}
}

// TestModsGradCheck compares each implementation's gradients of q, k, v and
// the sinks with central finite differences, for every case.
func TestModsGradCheck(t *testing.T) { gradCheckModCases(t, modCases(), 70) }

// gradCheckModCases checks each implementation's float64 gradients of q, k,
// v and the sinks of every case against central finite differences, the
// inputs of case ci drawn from seed+ci.
func gradCheckModCases(t *testing.T, cases []modCase, seed uint64) {
	t.Helper()
	worst := 0.0
	for ci, c := range cases {
		in := newModInputs(c, seed+uint64(ci))
		for impl := range implNames {
			g := G.NewGraph()
			d, kd := c.heads*c.dk, c.kvHeads()*c.dk
			params := []Param{
				param(g, tensor.Shape{c.b, c.sq, d}, in.q, "q"),
				param(g, tensor.Shape{c.b, c.sk, kd}, in.k, "k"),
				param(g, tensor.Shape{c.b, c.sk, kd}, in.v, "v"),
			}
			var sinks *G.Node
			if c.sinks {
				params = append(params, param(g, tensor.Shape{c.heads}, in.sinks, "sinks"))
				sinks = params[3].Node
			}
			out, _ := modGraph(t, g, tensor.Float64, c, impl, params[0].Node, params[1].Node, params[2].Node, sinks)
			rep, err := GradCheck(weightedSum(t, out, newRand(3)), params, nil, GradCheckConfig{})
			if err != nil {
				t.Fatalf("%s, %s: %v", c.name, implNames[impl], err)
			}
			for _, e := range rep {
				worst = math.Max(worst, e.Rel)
				if e.Rel > 1e-7 || e.Norm == 0 {
					t.Errorf("%s, %s:\n%s", c.name, implNames[impl], rep)
					break
				}
			}
		}
	}
	t.Logf("worst relative error: %.3g", worst)
}

// TestALiBiSlopes checks the reference get_slopes against the paper's
// stated slopes for 8 heads (1/2, 1/4, ..., 1/256), and ALiBi's slopes,
// read off Mod at i - j = 1, against the reference for 1 to 20 heads.
func TestALiBiSlopes(t *testing.T) {
	for h, m := range refSlopes(8) {
		if want := math.Pow(2, -float64(h+1)); m != want {
			t.Errorf("refSlopes(8)[%d] = %v, want %v", h, m, want)
		}
	}
	for n := 1; n <= 20; n++ {
		a, err := ALiBi(n)
		if err != nil {
			t.Fatal(err)
		}
		want := refSlopes(n)
		if len(want) != n {
			t.Fatalf("refSlopes(%d) has %d slopes", n, len(want))
		}
		for h := 0; h < n; h++ {
			v, d := a.Mod(0, 0, h, 5, 4)
			if !closeTo(-v, want[h], 1e-15) || d != 1 {
				t.Errorf("ALiBi(%d) head %d: slope %v, derivative %v; want %v, 1", n, h, -v, d, want[h])
			}
		}
	}
}

// TestMaskModBlocks checks every built-in mask's Block against Visible on
// every rectangle of a small grid: AllHidden and AllVisible only where they
// hold, and for Causal and Window exactly where they hold.
func TestMaskModBlocks(t *testing.T) {
	doc := docMask{starts: []int{0, 3, 7}}
	for _, tc := range []struct {
		m     MaskMod
		exact bool
	}{
		{Causal(), true}, {must(Window(1)), true}, {must(Window(3)), true},
		{must(Band(1)), true}, {must(Band(3)), true}, {And(Causal(), must(Band(3))), false},
		{And(Causal(), must(Window(2))), false}, {And(must(Window(4)), doc), false}, {doc, false},
	} {
		const n = 10
		for i0 := -2; i0 < n; i0++ {
			for i1 := i0 + 1; i1 <= n; i1++ {
				for j0 := -2; j0 < n; j0++ {
					for j1 := j0 + 1; j1 <= n; j1++ {
						seen, hidden := false, false
						for i := i0; i < i1; i++ {
							for j := j0; j < j1; j++ {
								if tc.m.Visible(0, 0, i, j) {
									seen = true
								} else {
									hidden = true
								}
							}
						}
						got := tc.m.Block(0, 0, i0, i1, j0, j1)
						if (got == AllHidden && seen) || (got == AllVisible && hidden) {
							t.Fatalf("%v: Block(%d, %d, %d, %d) = %v, but seen %v, hidden %v", tc.m, i0, i1, j0, j1, got, seen, hidden)
						}
						if tc.exact && got == Partial && !(seen && hidden) {
							t.Fatalf("%v: Block(%d, %d, %d, %d) is Partial, but seen %v, hidden %v", tc.m, i0, i1, j0, j1, seen, hidden)
						}
					}
				}
			}
		}
	}
}

// docMask is a user's mask modifier: causal attention within documents that
// start at the given positions (a packed batch).
type docMask struct{ starts []int }

func (m docMask) doc(p int) int {
	d := 0
	for k, s := range m.starts {
		if p >= s {
			d = k
		}
	}
	return d
}

func (m docMask) Visible(_, _, i, j int) bool { return j <= i && m.doc(i) == m.doc(j) }

func (m docMask) Block(_, _, i0, i1, j0, j1 int) Coverage {
	if j0 > i1-1 {
		return AllHidden
	}
	return Partial
}

func (m docMask) String() string { return fmt.Sprintf("Doc%v", m.starts) }

// TestFlashWindowSkipsTiles counts the tiles flash computes under a sliding
// window: exactly the (query tile, key tile) pairs with a visible entry,
// forward, and no more than three times that forward and backward; the
// outputs agree with the fused op's.
func TestFlashWindowSkipsTiles(t *testing.T) {
	const n, tile, w, heads, dk = 96, 8, 12, 2, 4
	c := modCase{name: "window", b: 1, sq: n, sk: n, heads: heads, dk: dk, tile: tile,
		mods: func() Spec { return Spec{MaskMod: must(Window(w))} }, visible: refWindow(w)}
	want := 0
	for i0 := 0; i0 < n; i0 += tile {
		for j0 := 0; j0 < n; j0 += tile {
			seen := false
			for i := i0; i < i0+tile; i++ {
				for j := j0; j < j0+tile; j++ {
					seen = seen || refWindow(w)(0, 0, i, j)
				}
			}
			if seen {
				want++
			}
		}
	}
	want *= heads
	in := newModInputs(c, 1)
	g := G.NewGraph()
	shape := tensor.Shape{1, n, heads * dk}
	q, k, v := valued(g, tensor.Float64, shape, in.q, "q"), valued(g, tensor.Float64, shape, in.k, "k"), valued(g, tensor.Float64, shape, in.v, "v")
	out, _ := modGraph(t, g, tensor.Float64, c, implFlash, q, k, v, nil)
	before := flashTiles.Load()
	got := eval(t, nil, out)[0]
	if tiles := flashTiles.Load() - before; tiles != int64(want) {
		t.Errorf("forward computed %d tiles, want %d (of %d)", tiles, want, heads*(n/tile)*(n/tile))
	}
	ref, _ := modsRef(c, in)
	checkClose(t, "output", got, ref, 1e-12)

	before = flashTiles.Load()
	runMods(t, tensor.Float64, c, in, implFlash)
	if tiles := flashTiles.Load() - before; tiles < int64(2*want) || tiles > int64(3*want) {
		t.Errorf("forward and backward computed %d tiles, want %d to %d", tiles, 2*want, 3*want)
	}
}

// TestModsErrors checks the messages of bad modifiers and shapes.
func TestModsErrors(t *testing.T) {
	g := G.NewGraph()
	q := input(g, tensor.Float64, tensor.Shape{2, 3, 8}, "q")
	k := input(g, tensor.Float64, tensor.Shape{2, 4, 8}, "k")
	k2 := input(g, tensor.Float64, tensor.Shape{2, 4, 4}, "k2") // 2 KV heads of 2
	sinks := input(g, tensor.Float64, tensor.Shape{4}, "sinks")
	sinks3 := input(g, tensor.Float64, tensor.Shape{3}, "sinks3")
	sinks32 := input(g, tensor.Float32, tensor.Shape{4}, "sinks32")
	// allK runs m with 4 heads over k by each implementation.
	allK := func(k *G.Node, m Spec) []func() error {
		var run []func() error
		for _, impl := range []Impl{Fused, Composed, Flash} {
			s := m
			s.Heads, s.Impl = 4, impl
			run = append(run, func() error { _, _, err := Attend(q, k, k, s); return err })
		}
		return run
	}
	all := func(m Spec) []func() error { return allK(k, m) }
	cases := []struct {
		want []string
		run  []func() error
	}{
		{[]string{"KVHeads 3 does not divide 4 heads"}, all(Spec{KVHeads: 3})},
		{[]string{"KVHeads -1 does not divide"}, all(Spec{KVHeads: -1})},
		{[]string{"k and v are (2, 4, 8), want width KVHeads*dk = 2*2 = 4"}, all(Spec{KVHeads: 2})},
		{[]string{"want (B, Sq, D), (B, Sk, D)"}, allK(k2, Spec{})},
		{[]string{`Spec.Sinks "sinks3" is float64 (3), want float64 (4)`}, all(Spec{Sinks: sinks3})},
		{[]string{`Spec.Sinks "sinks32" is float32 (4), want float64 (4)`}, all(Spec{Sinks: sinks32})},
		{[]string{"Spec.Sinks", "zero-value"}, all(Spec{Sinks: &G.Node{}})},
		{[]string{"ALiBi(3) has 3 slopes, the attention 4 heads"}, all(Spec{ScoreMod: Chain(must(Softcap(1)), must(ALiBi(3)))})},
		{[]string{"Spec.QueryPos has 2 positions, want B*S = 6"}, all(Spec{QueryPos: []int{1, 2}})},
		{[]string{"Spec.KeyPos has 9 positions, want B*S = 8"}, all(Spec{KeyPos: make([]int, 9)})},
		{[]string{"graph: window mask: width 0 must be at least 1"}, []func() error{func() error { _, err := Window(0); return err }}},
		{[]string{"graph: softcap: cap 0 must be positive"}, []func() error{func() error { _, err := Softcap(0); return err }}},
		{[]string{"graph: softcap: cap -2 must be positive"}, []func() error{func() error { _, err := Softcap(-2); return err }}},
		{[]string{"graph: softcap: cap NaN must be positive"}, []func() error{func() error { _, err := Softcap(math.NaN()); return err }}},
		{[]string{"graph: ALiBi: 0 heads"}, []func() error{func() error { _, err := ALiBi(0); return err }}},
		{[]string{"graph: band mask: width 0 must be at least 1"}, []func() error{func() error { _, err := Band(0); return err }}},
		{[]string{"graph: bidirectional ALiBi: 0 heads"}, []func() error{func() error { _, err := BidirectionalALiBi(0); return err }}},
	}
	for _, tc := range cases {
		for i, f := range tc.run {
			err := noPanic(t, tc.want[0], f)
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("%s (call %d): got %v", w, i, err)
				}
			}
		}
	}
	// A KV width that fits works.
	if _, _, err := Attend(q, k2, k2, Spec{Heads: 4, KVHeads: 2, Sinks: sinks}); err != nil {
		t.Errorf("KVHeads 2: %v", err)
	}
}

// nanMod is a score modifier that fails at one entry.
type nanMod struct {
	i, j int
	der  bool // fail in the derivative, not the value
}

func (m nanMod) Mod(s float64, _, _, i, j int) (float64, float64) {
	if i == m.i && j == m.j {
		if m.der {
			return s, math.Inf(1)
		}
		return math.NaN(), 1
	}
	return s, 1
}

func (m nanMod) String() string { return fmt.Sprintf("nanMod(%d, %d, %v)", m.i, m.j, m.der) }

// TestModsNonFiniteScore checks that each implementation's forward pass
// returns an error naming the modifier and (b, h, i, j) when a score
// modifier's value or derivative is not finite.
func TestModsNonFiniteScore(t *testing.T) {
	for _, der := range []bool{false, true} {
		for impl := range implNames {
			mod := nanMod{i: 2, j: 1, der: der}
			c := modCase{name: "nan", b: 2, sq: 4, sk: 3, heads: 2, dk: 2, tile: 2,
				mods: func() Spec { return Spec{ScoreMod: mod} }}
			in := newModInputs(c, 2)
			g := G.NewGraph()
			q := valued(g, tensor.Float64, tensor.Shape{2, 4, 4}, in.q, "q")
			k := valued(g, tensor.Float64, tensor.Shape{2, 3, 4}, in.k, "k")
			modGraph(t, g, tensor.Float64, c, impl, q, k, k, nil)
			vm, err := NewMachine(g)
			if err != nil {
				t.Fatal(err)
			}
			err = vm.RunAll()
			vm.Close()
			want := fmt.Sprintf("score modifier %v returned", mod)
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "(b, h, i, j) = (0, 0, 2, 1)") {
				t.Errorf("%s, failing derivative %v: got %v, want an error with %q at (0, 0, 2, 1)", implNames[impl], der, err, want)
			}
		}
	}
}

// TestModsHashDiffer checks that two attentions over the same nodes with
// different modifiers are different nodes (gorgonia merges ops that hash
// alike).
func TestModsHashDiffer(t *testing.T) {
	g := G.NewGraph()
	q := valued(g, tensor.Float64, tensor.Shape{1, 4, 2}, uniform(newRand(1), 8, -1, 1), "q")
	var outs []*G.Node
	for _, m := range []Spec{{}, {MaskMod: Causal()}, {MaskMod: must(Window(1))}, {MaskMod: must(Window(2))}, {ScoreMod: must(Softcap(1))}, {ScoreMod: must(Softcap(2))},
		{MaskMod: must(Band(2))}, {ScoreMod: must(ALiBi(1))}, {ScoreMod: must(BidirectionalALiBi(1))}} {
		for _, impl := range []Impl{Fused, Flash} {
			m.Heads, m.Impl = 1, impl
			o, _, err := Attend(q, q, q, m)
			if err != nil {
				t.Fatal(err)
			}
			outs = append(outs, o)
		}
	}
	seen := map[*G.Node]bool{}
	for _, o := range outs {
		if seen[o] {
			t.Fatalf("two attentions with different modifiers share node %v", o)
		}
		seen[o] = true
	}
}

// BenchmarkFlashWindow times flash attention's forward and backward pass
// under a sliding window of 256 keys against full causal flash, at n = 2048,
// 4096 and 8192: the window's tiles (tiles/op) and time grow linearly in n,
// causal's quadratically.
func BenchmarkFlashWindow(b *testing.B) {
	window := must(Window(256))
	for _, n := range []int{2048, 4096, 8192} {
		b.Run(fmt.Sprintf("n=%d/causal", n), func(b *testing.B) { benchAttention(b, n, Spec{Impl: Flash, MaskMod: Causal()}) })
		b.Run(fmt.Sprintf("n=%d/window=256", n), func(b *testing.B) { benchAttention(b, n, Spec{Impl: Flash, MaskMod: window}) })
	}
}

// TestModsDeterministic runs every case with 1 and with 64 goroutines
// (flash's backward in one pass and in two; the fused op's KV groups split
// differently): the same bits.
func TestModsDeterministic(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(prev)
	for ci, c := range modCases() {
		in := newModInputs(c, uint64(90+ci))
		for impl := range implNames {
			runtime.GOMAXPROCS(1)
			out1, _, g1 := runMods(t, tensor.Float32, c, in, impl)
			runtime.GOMAXPROCS(64)
			out64, _, g64 := runMods(t, tensor.Float32, c, in, impl)
			for i, pair := range [][2][]float64{{out1, out64}, {g1[0], g64[0]}, {g1[1], g64[1]}, {g1[2], g64[2]}, {g1[3], g64[3]}} {
				for j := range pair[0] {
					if pair[0][j] != pair[1][j] {
						t.Fatalf("%s, %s: value %d [%d]: %v with 1 goroutine, %v with 64", c.name, implNames[impl], i, j, pair[0][j], pair[1][j])
					}
				}
			}
		}
	}
}

// TestModsWithBiasAndDropout holds the fused op to the composed path with
// every modifier at once beside a learned (H, Sq, Sk) score bias and a
// dropout keep-mask: outputs, weights and the gradients of q, k, v, the
// bias and the sinks, float64 and float32.
func TestModsWithBiasAndDropout(t *testing.T) {
	const b, sq, sk, heads, kv, dk = 2, 5, 6, 4, 2, 2
	rng := newRand(11)
	vals := map[string][]float64{
		"q": uniform(rng, b*sq*heads*dk, -2, 2), "k": uniform(rng, b*sk*kv*dk, -2, 2), "v": uniform(rng, b*sk*kv*dk, -1, 1),
		"bias": uniform(rng, heads*sq*sk, -1, 1), "sinks": uniform(rng, heads, -1, 1),
		"keep": uniform(rng, b*heads*sq*sk, 0, 2),
	}
	pad, err := KeyPadding([]int{6, 3}, sq, sk)
	if err != nil {
		t.Fatal(err)
	}
	spec := Spec{MaskMod: And(Causal(), must(Window(3))), ScoreMod: Chain(must(ALiBi(heads)), must(Softcap(1.5))), KVHeads: kv}
	spec.QueryPos = []int{1, 2, 3, 4, 5, 1, 2, 3, 4, 5} // queries after one key
	for _, dt := range floatTypes {
		var got [2][][]float64
		for i, impl := range []Impl{Composed, Fused} {
			g := G.NewGraph()
			node := func(name string, shape ...int) *G.Node { return valued(g, dt, shape, roundTo(dt, vals[name]), name) }
			q, k, v := node("q", b, sq, heads*dk), node("k", b, sk, kv*dk), node("v", b, sk, kv*dk)
			bias, sinks, keep := node("bias", heads, sq, sk), node("sinks", heads), node("keep", b, heads, sq, sk)
			mask, err := NewMaskConst(g, dt, pad, "pad")
			if err != nil {
				t.Fatal(err)
			}
			s := spec
			s.Impl, s.Heads, s.Mask, s.Bias, s.Keep, s.Sinks = impl, heads, mask, bias, keep, sinks
			out, weights, err := Attend(q, k, v, s)
			if err != nil {
				t.Fatal(err)
			}
			cost := weightedSum(t, out, newRand(5))
			grads, err := G.Grad(cost, q, k, v, bias, sinks)
			if err != nil {
				t.Fatal(err)
			}
			got[i] = eval(t, nil, append(G.Nodes{out, weights}, grads...)...)
		}
		for j, what := range []string{"output", "weights", "dq", "dk", "dv", "dbias", "dsinks"} {
			checkClose(t, fmt.Sprintf("%v %s", dt, what), got[1][j], got[0][j], tolFor(dt))
		}
	}
}

// TestModsFailureNamesItsOp: a score modifier whose derivative fails is
// reported with the same error in every run, also when independent ops run
// at once on two goroutines. Each op keeps its own failure record (forOp),
// so no op can take, and name itself in, a failure another op's kernel
// found.
func TestModsFailureNamesItsOp(t *testing.T) {
	prev := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(prev)
	for impl := range implNames {
		mod := nanMod{i: 2, j: 1, der: true}
		c := modCase{name: "nan", b: 2, sq: 4, sk: 3, heads: 2, dk: 2, tile: 2,
			mods: func() Spec { return Spec{ScoreMod: mod} }}
		in := newModInputs(c, 3)
		g := G.NewGraph()
		q := valued(g, tensor.Float64, tensor.Shape{2, 4, 4}, in.q, "q")
		k := valued(g, tensor.Float64, tensor.Shape{2, 3, 4}, in.k, "k")
		out, _ := modGraph(t, g, tensor.Float64, c, impl, q, k, k, nil)
		if _, err := G.Grad(weightedSum(t, out, newRand(4)), q, k); err != nil {
			t.Fatal(err)
		}
		vm, err := NewMachine(g)
		if err != nil {
			t.Fatal(err)
		}
		vm.RunConcurrently(2)
		var first string
		for run := range 30 {
			err := vm.RunAll()
			if err == nil {
				t.Fatalf("%s: run %d: no error from a failing derivative", implNames[impl], run)
			}
			if run == 0 {
				first = err.Error()
			} else if err.Error() != first {
				t.Fatalf("%s: run %d: error %q, run 0: %q", implNames[impl], run, err, first)
			}
		}
		vm.Close()
	}
}
