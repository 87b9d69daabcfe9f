package graph

import (
	"fmt"
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The sparse patterns' references, written from the definitions, apart
// from sparse.go: Longformer's global tokens (every query sees them, and
// without causality they see every key) beside a window, and block-local
// attention by floor(position / block).
var (
	refGlobalWindow = func(global, w int, causal bool) func(_, _, i, j int) bool {
		return func(_, _, i, j int) bool {
			if causal {
				if j > i {
					return false // never the future
				}
				return j < global || i-j < w
			}
			if i < global || j < global {
				return true
			}
			d := i - j
			if d < 0 {
				d = -d
			}
			return d < w
		}
	}
	refBlockLocal = func(block int, causal bool) func(_, _, i, j int) bool {
		of := func(p int) int { return int(math.Floor(float64(p) / float64(block))) }
		return func(_, _, i, j int) bool { return of(i) == of(j) && !(causal && j > i) }
	}
)

// sparsePatterns are the modifiers under test beside their references.
func sparsePatterns() []struct {
	m   MaskMod
	ref func(_, _, i, j int) bool
} {
	var ps []struct {
		m   MaskMod
		ref func(_, _, i, j int) bool
	}
	for _, causal := range []bool{false, true} {
		for _, g := range []int{0, 1, 3, 5} {
			for _, w := range []int{1, 2, 4, 7} {
				ps = append(ps, struct {
					m   MaskMod
					ref func(_, _, i, j int) bool
				}{must(GlobalWindow(g, w, causal)), refGlobalWindow(g, w, causal)})
			}
		}
		for _, b := range []int{1, 2, 3, 5, 8} {
			ps = append(ps, struct {
				m   MaskMod
				ref func(_, _, i, j int) bool
			}{must(BlockLocal(b, causal)), refBlockLocal(b, causal)})
		}
	}
	return ps
}

// TestSparseVisible checks Visible against the references entry by entry,
// negative positions included, and GlobalWindow without global tokens
// against Band and Window.
func TestSparseVisible(t *testing.T) {
	for _, p := range sparsePatterns() {
		for i := -12; i < 40; i++ {
			for j := -12; j < 40; j++ {
				if got, want := p.m.Visible(0, 0, i, j), p.ref(0, 0, i, j); got != want {
					t.Fatalf("%v: Visible(%d, %d) = %v, want %v", p.m, i, j, got, want)
				}
			}
		}
	}
	for w := 1; w < 6; w++ {
		for i := 0; i < 20; i++ {
			for j := 0; j < 20; j++ {
				if must(GlobalWindow(0, w, false)).Visible(0, 0, i, j) != must(Band(w)).Visible(0, 0, i, j) ||
					must(GlobalWindow(0, w, true)).Visible(0, 0, i, j) != must(Window(w)).Visible(0, 0, i, j) {
					t.Fatalf("GlobalWindow(0, %d) differs from Band/Window at (%d, %d)", w, i, j)
				}
			}
		}
	}
}

// blockTruth is what a rectangle holds: whether some entry is visible and
// whether some is hidden, asked of ref entry by entry.
func blockTruth(ref func(_, _, i, j int) bool, i0, i1, j0, j1 int) (seen, hidden bool) {
	for i := i0; i < i1; i++ {
		for j := j0; j < j1; j++ {
			if ref(0, 0, i, j) {
				seen = true
			} else {
				hidden = true
			}
			if seen && hidden {
				return
			}
		}
	}
	return
}

// checkExact fails unless Block says exactly what the rectangle holds.
func checkExact(t *testing.T, m MaskMod, ref func(_, _, i, j int) bool, i0, i1, j0, j1 int) {
	t.Helper()
	seen, hidden := blockTruth(ref, i0, i1, j0, j1)
	want := Partial
	switch {
	case !seen:
		want = AllHidden
	case !hidden:
		want = AllVisible
	}
	if got := m.Block(0, 0, i0, i1, j0, j1); got != want {
		t.Fatalf("%v: Block([%d, %d) x [%d, %d)) = %v, want %v (seen %v, hidden %v)", m, i0, i1, j0, j1, got, want, seen, hidden)
	}
}

// TestSparseBlocks checks that Block is exact, against the references: on
// every rectangle of a small grid (negative positions included) and on
// many random rectangles of long sequences.
func TestSparseBlocks(t *testing.T) {
	rng := newRand(24)
	for _, p := range sparsePatterns() {
		const lo, hi = -3, 11
		for i0 := lo; i0 < hi; i0++ {
			for i1 := i0 + 1; i1 <= hi; i1++ {
				for j0 := lo; j0 < hi; j0++ {
					for j1 := j0 + 1; j1 <= hi; j1++ {
						checkExact(t, p.m, p.ref, i0, i1, j0, j1)
					}
				}
			}
		}
		for range 3000 {
			i0, j0 := rng.IntN(400)-20, rng.IntN(400)-20
			i1, j1 := i0+1+rng.IntN(40), j0+1+rng.IntN(40)
			if rng.IntN(4) == 0 { // near the diagonal, where the patterns live
				j0 = i0 + rng.IntN(30) - 15
				j1 = j0 + 1 + rng.IntN(40)
			}
			checkExact(t, p.m, p.ref, i0, i1, j0, j1)
		}
	}
	// Longer patterns on long random rectangles.
	for _, p := range []struct {
		m   MaskMod
		ref func(_, _, i, j int) bool
	}{
		{must(GlobalWindow(16, 256, true)), refGlobalWindow(16, 256, true)},
		{must(GlobalWindow(16, 256, false)), refGlobalWindow(16, 256, false)},
		{must(GlobalWindow(70, 9, false)), refGlobalWindow(70, 9, false)},
		{must(BlockLocal(256, true)), refBlockLocal(256, true)},
		{must(BlockLocal(100, false)), refBlockLocal(100, false)},
	} {
		for range 2000 {
			i0, j0 := rng.IntN(1200), rng.IntN(1200)
			if rng.IntN(2) == 0 {
				j0 = max(i0+rng.IntN(600)-300, 0)
			}
			i1, j1 := i0+1+rng.IntN(130), j0+1+rng.IntN(130)
			checkExact(t, p.m, p.ref, i0, i1, j0, j1)
		}
	}
}

// sparseCases are attention problems under the sparse patterns, with the
// modCase machinery of mods_test.go: tiles that do not line up with the
// blocks, padding and hidden rows, GQA, sinks, score modifiers, positions,
// and queries that see no key at all.
func sparseCases() []modCase {
	return []modCase{
		{name: "global 2 + window 3, causal", b: 2, sq: 13, sk: 13, heads: 2, dk: 3, tile: 3,
			mods:    func() Spec { return Spec{MaskMod: must(GlobalWindow(2, 3, true))} },
			visible: refGlobalWindow(2, 3, true)},
		{name: "global 3 + band 2, padding + hidden row", b: 2, sq: 12, sk: 12, heads: 2, dk: 3, tile: 4, hide: padRows(12),
			mods:    func() Spec { return Spec{MaskMod: must(GlobalWindow(3, 2, false))} },
			visible: refGlobalWindow(3, 2, false)},
		{name: "global 1 + band 3, Sq < Sk", b: 1, sq: 7, sk: 11, heads: 2, dk: 2, tile: 2,
			mods:    func() Spec { return Spec{MaskMod: must(GlobalWindow(1, 3, false))} },
			visible: refGlobalWindow(1, 3, false)},
		{name: "global 2 + window 2, causal, GQA + sinks + ALiBi", b: 2, sq: 10, sk: 10, heads: 4, kv: 2, dk: 2, tile: 3, sinks: true,
			mods: func() Spec {
				return Spec{MaskMod: must(GlobalWindow(2, 2, true)), ScoreMod: must(ALiBi(4)), KVHeads: 2}
			},
			visible: refGlobalWindow(2, 2, true), score: refALiBi(4)},
		{name: "global 2 + window 3, causal, positions: query 3 sees no key", b: 2, sq: 2, sk: 4, heads: 2, dk: 3, tile: 2,
			qpos: []int{3, 9, 4, 6}, kpos: []int{5, 6, 7, 8, 0, 1, 4, 5},
			mods:    func() Spec { return Spec{MaskMod: must(GlobalWindow(2, 3, true))} },
			visible: refGlobalWindow(2, 3, true)},
		{name: "block-local 4", b: 2, sq: 13, sk: 13, heads: 2, dk: 3, tile: 3,
			mods: func() Spec { return Spec{MaskMod: must(BlockLocal(4, false))} }, visible: refBlockLocal(4, false)},
		{name: "block-local 3, causal, padding + hidden row", b: 2, sq: 10, sk: 10, heads: 2, dk: 2, tile: 4, hide: padRows(10),
			mods: func() Spec { return Spec{MaskMod: must(BlockLocal(3, true))} }, visible: refBlockLocal(3, true)},
		{name: "block-local 4, Sq > Sk: queries 4-7 see no key", b: 2, sq: 8, sk: 4, heads: 2, dk: 3, tile: 3,
			mods: func() Spec { return Spec{MaskMod: must(BlockLocal(4, false))} }, visible: refBlockLocal(4, false)},
		{name: "block-local 2, causal, softcap + sinks", b: 1, sq: 9, sk: 9, heads: 2, dk: 3, amp: 3, tile: 4, sinks: true,
			mods: func() Spec {
				return Spec{MaskMod: must(BlockLocal(2, true)), ScoreMod: must(Softcap(1.5))}
			},
			visible: refBlockLocal(2, true), score: refSoftcap(1.5)},
		{name: "And(block-local 6, global 1 + window 2, causal)", b: 1, sq: 12, sk: 12, heads: 1, dk: 4, tile: 5,
			mods: func() Spec {
				return Spec{MaskMod: And(must(BlockLocal(6, false)), must(GlobalWindow(1, 2, true)))}
			},
			visible: func(b, h, i, j int) bool {
				return refBlockLocal(6, false)(b, h, i, j) && refGlobalWindow(1, 2, true)(b, h, i, j)
			}},
	}
}

// blindQueries returns the (b, i) of c whose query sees no key in any head
// (by the reference and the mask tensor).
func blindQueries(c modCase) [][2]int {
	var blind [][2]int
	pos := func(p []int, b, n, i int) int {
		if p == nil {
			return i
		}
		return p[b*n+i]
	}
	for b := 0; b < c.b; b++ {
		for i := 0; i < c.sq; i++ {
			seen := false
			for h := 0; h < c.heads && !seen; h++ {
				for j := 0; j < c.sk && !seen; j++ {
					seen = (c.hide == nil || !c.hide(b, i, j)) && c.visible(b, h, pos(c.qpos, b, c.sq, i), pos(c.kpos, b, c.sk, j))
				}
			}
			if !seen {
				blind = append(blind, [2]int{b, i})
			}
		}
	}
	return blind
}

// TestSparseMatchReference holds each implementation's output and weights
// to modsRef and the gradients of fused and flash to composed's, in float64
// and float32, under each sparse pattern; a query that sees nothing (no
// sinks) has output and dq exactly 0.
func TestSparseMatchReference(t *testing.T) {
	blindSeen := 0
	for ci, c := range sparseCases() {
		in := newModInputs(c, uint64(240+ci))
		wantOut, wantWeights := modsRef(c, in)
		blind := blindQueries(c)
		if !c.sinks {
			blindSeen += len(blind)
		}
		for _, dt := range floatTypes {
			gradTol := 1e-11
			if dt == tensor.Float32 {
				gradTol = 1e-5
			}
			_, _, ref := runMods(t, dt, c, in, implComposed)
			for impl := range implNames {
				name := fmt.Sprintf("%s/%v/%s", c.name, dt, implNames[impl])
				out, weights, grads := runMods(t, dt, c, in, impl)
				checkClose(t, name+": output", out, wantOut, tolFor(dt))
				if weights != nil {
					checkClose(t, name+": weights", weights, wantWeights, tolFor(dt))
				}
				for i, wrt := range []string{"q", "k", "v", "sinks"} {
					if !allFinite(grads[i]) {
						t.Errorf("%s: d%s not finite", name, wrt)
					}
					if impl != implComposed {
						checkClose(t, name+": d"+wrt, grads[i], ref[i], gradTol)
					}
				}
				if c.sinks {
					continue
				}
				d := c.heads * c.dk
				for _, bi := range blind {
					row := (bi[0]*c.sq + bi[1]) * d
					for x := row; x < row+d; x++ {
						if out[x] != 0 || grads[0][x] != 0 {
							t.Fatalf("%s: query %v sees no key, but output %v, dq %v", name, bi, out[x], grads[0][x])
						}
					}
				}
			}
		}
	}
	if blindSeen == 0 {
		t.Fatal("no case has a query that sees nothing")
	}
}

// TestSparseGradCheck compares each implementation's float64 gradients of
// q, k, v and the sinks with central finite differences under each sparse
// pattern.
func TestSparseGradCheck(t *testing.T) { gradCheckModCases(t, sparseCases(), 270) }

// touchedTiles is the number of (query tile, key tile) pairs of an (n, n)
// attention with tiles of tile that hold an entry ref shows, per head.
func touchedTiles(ref func(_, _, i, j int) bool, n, tile int) int {
	count := 0
	for i0 := 0; i0 < n; i0 += tile {
		for j0 := 0; j0 < n; j0 += tile {
			if seen, _ := blockTruth(ref, i0, min(i0+tile, n), j0, min(j0+tile, n)); seen {
				count++
			}
		}
	}
	return count
}

// TestFlashSparseSkipsTiles counts the tiles flash computes under each
// sparse pattern: forward, exactly the tiles the pattern touches, fewer than
// causal attention's; forward and backward, two to three times that. The
// outputs equal the reference's.
func TestFlashSparseSkipsTiles(t *testing.T) {
	const n, tile, heads, dk = 192, 8, 2, 4
	shape := tensor.Shape{1, n, heads * dk}
	// forward runs c's flash forward pass alone and returns the tiles it
	// computed and its output.
	forward := func(c modCase, in modInputs) (int64, []float64) {
		g := G.NewGraph()
		q, k, v := valued(g, tensor.Float64, shape, in.q, "q"), valued(g, tensor.Float64, shape, in.k, "k"), valued(g, tensor.Float64, shape, in.v, "v")
		out, _ := modGraph(t, g, tensor.Float64, c, implFlash, q, k, v, nil)
		before := FlashTiles()
		got := eval(t, nil, out)[0]
		return FlashTiles() - before, got
	}
	causal := modCase{name: "causal", b: 1, sq: n, sk: n, heads: heads, dk: dk, tile: tile,
		mods: func() Spec { return Spec{MaskMod: Causal()} }, visible: refCausal}
	causalTiles, _ := forward(causal, newModInputs(causal, 1))
	if want := heads * touchedTiles(refCausal, n, tile); causalTiles != int64(want) {
		t.Fatalf("causal: forward computed %d tiles, want %d", causalTiles, want)
	}
	for _, p := range []struct {
		m   MaskMod
		ref func(_, _, i, j int) bool
	}{
		{must(GlobalWindow(4, 12, true)), refGlobalWindow(4, 12, true)},
		{must(GlobalWindow(4, 12, false)), refGlobalWindow(4, 12, false)},
		{must(GlobalWindow(10, 5, true)), refGlobalWindow(10, 5, true)},
		{must(BlockLocal(16, true)), refBlockLocal(16, true)},
		{must(BlockLocal(12, false)), refBlockLocal(12, false)}, // blocks across tiles
	} {
		c := modCase{name: p.m.String(), b: 1, sq: n, sk: n, heads: heads, dk: dk, tile: tile,
			mods: func() Spec { return Spec{MaskMod: p.m} }, visible: p.ref}
		in := newModInputs(c, 2)
		want := int64(heads * touchedTiles(p.ref, n, tile))
		tiles, got := forward(c, in)
		if tiles != want {
			t.Errorf("%v: forward computed %d tiles, want the %d it touches (of %d)", p.m, tiles, want, heads*(n/tile)*(n/tile))
		}
		if tiles >= causalTiles {
			t.Errorf("%v: forward computed %d tiles, causal %d", p.m, tiles, causalTiles)
		}
		ref, _ := modsRef(c, in)
		checkClose(t, p.m.String()+": output", got, ref, 1e-12)
		before := FlashTiles()
		runMods(t, tensor.Float64, c, in, implFlash)
		if both := FlashTiles() - before; both < 2*want || both > 3*want {
			t.Errorf("%v: forward and backward computed %d tiles, want %d to %d", p.m, both, 2*want, 3*want)
		}
		t.Logf("%v: %d tiles forward, causal %d, all %d", p.m, tiles, causalTiles, heads*(n/tile)*(n/tile))
	}
}

// TestSparseErrorsAndNames checks the errors of bad sizes, and that every
// pattern has its own String and its own node.
func TestSparseErrorsAndNames(t *testing.T) {
	for _, tc := range []struct {
		want string
		err  error
	}{
		{"graph: global-window mask: -1 global tokens", second(GlobalWindow(-1, 4, true))},
		{"graph: global-window mask: width 0 must be at least 1", second(GlobalWindow(2, 0, false))},
		{"graph: block-local mask: block 0 must be at least 1", second(BlockLocal(0, true))},
		{"graph: block-local mask: block -3 must be at least 1", second(BlockLocal(-3, false))},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("got %v, want %q", tc.err, tc.want)
		}
	}
	if _, err := GlobalWindow(0, 1, true); err != nil {
		t.Errorf("GlobalWindow(0, 1, true): %v", err)
	}
	mods := []MaskMod{Causal(), must(Window(4)), must(Band(4)),
		must(GlobalWindow(0, 4, true)), must(GlobalWindow(0, 4, false)), must(GlobalWindow(1, 4, true)),
		must(GlobalWindow(1, 4, false)), must(GlobalWindow(4, 1, false)),
		must(BlockLocal(4, true)), must(BlockLocal(4, false)), must(BlockLocal(5, false))}
	names := map[string]bool{}
	for _, m := range mods {
		if names[m.String()] {
			t.Errorf("two modifiers named %q", m)
		}
		names[m.String()] = true
	}
	if s := must(GlobalWindow(16, 256, true)).String(); s != "GlobalWindow(16, 256, causal)" {
		t.Errorf("String() = %q", s)
	}
	if s := must(BlockLocal(256, false)).String(); s != "BlockLocal(256)" {
		t.Errorf("String() = %q", s)
	}
	g := G.NewGraph()
	q := valued(g, tensor.Float64, tensor.Shape{1, 8, 2}, uniform(newRand(1), 16, -1, 1), "q")
	seen := map[*G.Node]bool{}
	for _, m := range mods {
		for _, impl := range []Impl{Fused, Flash} {
			o, _, err := Attend(q, q, q, Spec{Heads: 1, Impl: impl, MaskMod: m})
			if err != nil {
				t.Fatal(err)
			}
			if seen[o] {
				t.Fatalf("%v, %s: shares a node with another modifier", m, impl)
			}
			seen[o] = true
		}
	}
}

func second[T any](_ T, err error) error { return err }

// BenchmarkFlashSparse times flash attention's forward and backward pass
// under Longformer's global tokens + window (16 global, 256 keys) and
// block-local attention (blocks of 256), causal, against full causal
// flash, at n = 2048, 4096 and 8192: tiles/op, the tiles computed, grow
// linearly in n for the sparse patterns, quadratically for causal.
func BenchmarkFlashSparse(b *testing.B) {
	global := must(GlobalWindow(16, 256, true))
	local := must(BlockLocal(256, true))
	for _, n := range []int{2048, 4096, 8192} {
		b.Run(fmt.Sprintf("n=%d/causal", n), func(b *testing.B) { benchAttention(b, n, Spec{Impl: Flash, MaskMod: Causal()}) })
		b.Run(fmt.Sprintf("n=%d/global=16+window=256", n), func(b *testing.B) { benchAttention(b, n, Spec{Impl: Flash, MaskMod: global}) })
		b.Run(fmt.Sprintf("n=%d/block-local=256", n), func(b *testing.B) { benchAttention(b, n, Spec{Impl: Flash, MaskMod: local}) })
	}
}
