package graph

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The flash tests compare flash Attend with the fused one, which the
// attention tests check against plain loops and finite differences, on the
// same inputs: outputs and the gradients of a random linear cost.

// flashCase is one attention problem: sizes and which keys are hidden.
type flashCase struct {
	name             string
	b, sq, sk, heads int
	dk               int
	causal           bool
	// hide, if not nil, says which (b, i, j) the mask tensor hides; nil
	// means no mask tensor.
	hide func(b, i, j int) bool
}

// maskOf returns the allow-mask of the mask tensor of c (nil without one)
// and, with the causal rule joined in, the mask the fused op needs.
func (c flashCase) maskOf() (tensorMask, fused []bool) {
	if c.hide == nil && !c.causal {
		return nil, nil
	}
	n := c.b * c.sq * c.sk
	fused = make([]bool, n)
	if c.hide != nil {
		tensorMask = make([]bool, n)
	}
	for b := 0; b < c.b; b++ {
		for i := 0; i < c.sq; i++ {
			for j := 0; j < c.sk; j++ {
				at := (b*c.sq+i)*c.sk + j
				ok := c.hide == nil || !c.hide(b, i, j)
				if tensorMask != nil {
					tensorMask[at] = ok
				}
				fused[at] = ok && (!c.causal || j <= i)
			}
		}
	}
	return tensorMask, fused
}

// maskMod is Causal() for a causal case, else nil.
func (c flashCase) maskMod() MaskMod {
	if c.causal {
		return Causal()
	}
	return nil
}

// flashInputs are the values of one problem: q, k, v and the weights w of
// the cost sum(out ∘ w).
type flashInputs struct{ q, k, v, w []float64 }

func newFlashInputs(c flashCase, seed uint64, amp float64) flashInputs {
	rng := newRand(seed)
	d := c.heads * c.dk
	return flashInputs{
		q: uniform(rng, c.b*c.sq*d, -amp, amp), k: uniform(rng, c.b*c.sk*d, -amp, amp),
		v: uniform(rng, c.b*c.sk*d, -1, 1), w: uniform(rng, c.b*c.sq*d, -1, 1),
	}
}

// underTest is how runAttentionImpl computes a case's attention.
type underTest int

const (
	// fusedByTensor is the fused op with the causal rule joined into the
	// mask tensor: every key of every row computed, then hidden.
	fusedByTensor underTest = iota
	// fusedByMod is the fused op with the Causal modifier, whose long rows
	// multiply only the keys they see (causalBlocks).
	fusedByMod
	// flashByMod is flash with the Causal modifier.
	flashByMod
)

// runAttentionImpl builds the attention of c in dtype dt as impl says (flash
// with tile tile) and returns its output and the gradients of sum(out ∘ w)
// with respect to q, k and v.
func runAttentionImpl(t *testing.T, dt tensor.Dtype, c flashCase, in flashInputs, impl underTest, tile int) (out []float64, grads [3][]float64) {
	t.Helper()
	g := G.NewGraph()
	d := c.heads * c.dk
	q := valued(g, dt, tensor.Shape{c.b, c.sq, d}, roundTo(dt, in.q), "q")
	k := valued(g, dt, tensor.Shape{c.b, c.sk, d}, roundTo(dt, in.k), "k")
	v := valued(g, dt, tensor.Shape{c.b, c.sk, d}, roundTo(dt, in.v), "v")
	tensorMask, fusedMask := c.maskOf()
	allow := fusedMask
	if impl != fusedByTensor {
		allow = tensorMask
	}
	var mask *MaskNode
	if allow != nil {
		var err error
		if mask, err = NewMaskConst(g, dt, Mask{B: c.b, Sq: c.sq, Sk: c.sk, Allow: allow}, "mask"); err != nil {
			t.Fatal(err)
		}
	}
	var o *G.Node
	var err error
	switch impl {
	case fusedByTensor:
		o, _, err = Attend(q, k, v, Spec{Heads: c.heads, Mask: mask})
	case fusedByMod:
		o, _, err = Attend(q, k, v, Spec{Heads: c.heads, Mask: mask, MaskMod: c.maskMod()})
	case flashByMod:
		o, _, err = Attend(q, k, v, Spec{Impl: Flash, Heads: c.heads, Mask: mask, MaskMod: c.maskMod(), Tile: tile})
	}
	if err != nil {
		t.Fatal(err)
	}
	w := valued(g, dt, o.Shape().Clone(), roundTo(dt, in.w), "w")
	prod, err := G.HadamardProd(o, w)
	if err != nil {
		t.Fatal(err)
	}
	cost, err := G.Sum(prod)
	if err != nil {
		t.Fatal(err)
	}
	gs, err := G.Grad(cost, q, k, v)
	if err != nil {
		t.Fatal(err)
	}
	vals := eval(t, nil, o, gs[0], gs[1], gs[2])
	return vals[0], [3][]float64{vals[1], vals[2], vals[3]}
}

// maxRelDiff is max_i |got_i - want_i| / max(1, |want_i|), the measure that
// closeTo bounds; NaN anywhere makes it +Inf.
func maxRelDiff(got, want []float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var m float64
	for i := range got {
		d := math.Abs(got[i]-want[i]) / math.Max(1, math.Abs(want[i]))
		if math.IsNaN(d) {
			return math.Inf(1)
		}
		m = math.Max(m, d)
	}
	return m
}

// flashCases covers every mask combination, Sq != Sk, fully hidden rows and
// lengths that are not multiples of the tiles 7 and 64.
var flashCases = []flashCase{
	{name: "no mask", b: 2, sq: 9, sk: 9, heads: 2, dk: 3},
	{name: "no mask, Sq < Sk", b: 2, sq: 5, sk: 11, heads: 2, dk: 3},
	{name: "causal", b: 2, sq: 11, sk: 11, heads: 2, dk: 3, causal: true},
	{name: "causal, Sq < Sk", b: 1, sq: 6, sk: 13, heads: 3, dk: 2, causal: true},
	{name: "causal, Sq > Sk", b: 1, sq: 13, sk: 6, heads: 3, dk: 2, causal: true},
	{name: "key padding, Sq > Sk", b: 2, sq: 10, sk: 8, heads: 2, dk: 3,
		hide: func(b, i, j int) bool { return j >= []int{8, 3}[b] }},
	{name: "causal + key padding", b: 2, sq: 11, sk: 11, heads: 2, dk: 3, causal: true,
		hide: func(b, i, j int) bool { return j >= []int{11, 5}[b] }},
	{name: "hidden rows: a sequence with no keys and a hidden query", b: 2, sq: 9, sk: 12, heads: 2, dk: 3,
		hide: func(b, i, j int) bool { return b == 1 || i == 4 || j == 2 }},
	{name: "causal + a mask hiding key 0 (query 0 sees nothing)", b: 2, sq: 10, sk: 10, heads: 1, dk: 4, causal: true,
		hide: func(b, i, j int) bool { return j == 0 || (b == 1 && j == 7) }},
	{name: "causal + padding over several default tiles", b: 1, sq: 150, sk: 150, heads: 2, dk: 4, causal: true,
		hide: func(b, i, j int) bool { return j >= 141 }},
}

// TestFlashMatchesAttention compares outputs and gradients with the fused op
// for every case, tile and dtype.
func TestFlashMatchesAttention(t *testing.T) {
	worst := map[string]float64{}
	for ci, c := range flashCases {
		in := newFlashInputs(c, uint64(100+ci), 2)
		for _, dt := range floatTypes {
			wantOut, wantGrads := runAttentionImpl(t, dt, c, in, fusedByTensor, 0)
			for _, tile := range []int{1, 7, 0} {
				name := fmt.Sprintf("%s/%v/tile %d", c.name, dt, tile)
				out, grads := runAttentionImpl(t, dt, c, in, flashByMod, tile)
				checkClose(t, name+": output", out, wantOut, tolFor(dt))
				worst[dt.String()+" output"] = math.Max(worst[dt.String()+" output"], maxRelDiff(out, wantOut))
				// The fused op's float32 gradients are rounded differently
				// (it stores P in float32); 1e-4 bounds what float32 allows.
				gradTol := 1e-10
				if dt == tensor.Float32 {
					gradTol = 1e-4
				}
				for i, wrt := range []string{"q", "k", "v"} {
					checkClose(t, name+": d"+wrt, grads[i], wantGrads[i], gradTol)
					worst[dt.String()+" grad"] = math.Max(worst[dt.String()+" grad"], maxRelDiff(grads[i], wantGrads[i]))
				}
				if !allFinite(out) || !allFinite(grads[0]) || !allFinite(grads[1]) || !allFinite(grads[2]) {
					t.Errorf("%s: not finite", name)
				}
			}
		}
	}
	for _, k := range []string{"float64 output", "float64 grad", "float32 output", "float32 grad"} {
		t.Logf("max |flash - fused| / max(1, |fused|), %s: %.3g", k, worst[k])
	}
}

// TestFlashHiddenRowsAreZero checks that a query that sees no key gets output
// 0 and passes no gradient, exactly.
func TestFlashHiddenRowsAreZero(t *testing.T) {
	c := flashCase{name: "hidden", b: 2, sq: 4, sk: 5, heads: 2, dk: 2, causal: true,
		hide: func(b, i, j int) bool { return b == 1 || j == 0 }}
	in := newFlashInputs(c, 9, 1)
	for _, dt := range floatTypes {
		out, grads := runAttentionImpl(t, dt, c, in, flashByMod, 2)
		d := c.heads * c.dk
		// Sequence 1 sees nothing; query 0 of sequence 0 sees only key 0,
		// which is hidden.
		for i := 0; i < c.sq*d; i++ {
			if out[c.sq*d+i] != 0 || grads[0][c.sq*d+i] != 0 {
				t.Fatalf("%v: sequence 1 (no keys): output %v, dq %v, want 0", dt, out[c.sq*d+i], grads[0][c.sq*d+i])
			}
		}
		for i := 0; i < c.sk*d; i++ {
			if grads[1][c.sk*d+i] != 0 || grads[2][c.sk*d+i] != 0 {
				t.Fatalf("%v: sequence 1 (no keys): dk %v, dv %v, want 0", dt, grads[1][c.sk*d+i], grads[2][c.sk*d+i])
			}
		}
		for i := 0; i < d; i++ {
			if out[i] != 0 || grads[0][i] != 0 {
				t.Fatalf("%v: query 0 of sequence 0: output %v, dq %v, want 0", dt, out[i], grads[0][i])
			}
		}
	}
}

// TestFlashGradCheck compares flash Attend's gradients with central finite
// differences in float64.
func TestFlashGradCheck(t *testing.T) {
	for _, tc := range []struct {
		c    flashCase
		tile int
	}{
		{flashCases[1], 0},
		{flashCases[3], 4},
		{flashCases[6], 3},
		{flashCases[7], 5},
		{flashCases[8], 1},
	} {
		c := tc.c
		if c.b*c.sq*c.heads*c.dk > 200 {
			t.Fatalf("%s: too big for a finite-difference check", c.name)
		}
		in := newFlashInputs(c, 7, 1)
		g := G.NewGraph()
		d := c.heads * c.dk
		q := param(g, tensor.Shape{c.b, c.sq, d}, in.q, "q")
		k := param(g, tensor.Shape{c.b, c.sk, d}, in.k, "k")
		v := param(g, tensor.Shape{c.b, c.sk, d}, in.v, "v")
		allow, _ := c.maskOf()
		var mask *MaskNode
		if allow != nil {
			var err error
			if mask, err = NewMaskConst(g, tensor.Float64, Mask{B: c.b, Sq: c.sq, Sk: c.sk, Allow: allow}, "mask"); err != nil {
				t.Fatal(err)
			}
		}
		out, _, err := Attend(q.Node, k.Node, v.Node, Spec{Impl: Flash, Heads: c.heads, Mask: mask, MaskMod: c.maskMod(), Tile: tc.tile})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := GradCheck(weightedSum(t, out, newRand(3)), []Param{q, k, v}, nil, GradCheckConfig{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range rep {
			if e.Rel > 1e-7 || e.Norm == 0 {
				t.Errorf("%s, tile %d:\n%s", c.name, tc.tile, rep)
				break
			}
		}
	}
}

// TestFlashLargeScoresFloat32 feeds float32 scores near 1e3, where exp
// overflows float32 (beyond ~88) unless the max is subtracted: output and
// gradients stay finite and agree with the fused op.
func TestFlashLargeScoresFloat32(t *testing.T) {
	c := flashCase{name: "large", b: 1, sq: 9, sk: 9, heads: 1, dk: 4, causal: true}
	// |q·k| / sqrt(4) up to 4 * 45^2 / 2 ≈ 4e3, typically ~1e3.
	in := newFlashInputs(c, 21, 45)
	wantOut, wantGrads := runAttentionImpl(t, tensor.Float32, c, in, fusedByTensor, 0)
	for _, tile := range []int{1, 4, 0} {
		out, grads := runAttentionImpl(t, tensor.Float32, c, in, flashByMod, tile)
		if !allFinite(out) || !allFinite(grads[0]) || !allFinite(grads[1]) || !allFinite(grads[2]) {
			t.Fatalf("tile %d: not finite: out %v", tile, out)
		}
		checkClose(t, fmt.Sprintf("tile %d: output", tile), out, wantOut, 1e-5)
		for i, wrt := range []string{"q", "k", "v"} {
			// The gradients of q and k are scores' gradients times values
			// of ~45: compare relative to the largest.
			checkClose(t, fmt.Sprintf("tile %d: d%s", tile, wrt), grads[i], wantGrads[i], 1e-3)
		}
	}
}

// TestFlashDeterministic checks that the result does not depend on how many
// goroutines share the work: with one, the backward pass runs one pass per
// (b, h) pair; with 64, more workers than pairs, it splits into a dQ pass
// over query blocks and a dK, dV pass over key blocks. Both must give the
// same bits, so that TestFlashMatchesAttention covers both.
func TestFlashDeterministic(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(prev)
	for ci, c := range flashCases {
		in := newFlashInputs(c, uint64(200+ci), 1)
		for _, dt := range floatTypes {
			runtime.GOMAXPROCS(1)
			out1, g1 := runAttentionImpl(t, dt, c, in, flashByMod, 7)
			runtime.GOMAXPROCS(64)
			out64, g64 := runAttentionImpl(t, dt, c, in, flashByMod, 7)
			for i, pair := range [][2][]float64{{out1, out64}, {g1[0], g64[0]}, {g1[1], g64[1]}, {g1[2], g64[2]}} {
				for j := range pair[0] {
					if pair[0][j] != pair[1][j] {
						t.Fatalf("%s, %v: value %d [%d]: %v with 1 goroutine, %v with 64", c.name, dt, i, j, pair[0][j], pair[1][j])
					}
				}
			}
		}
	}
}

// TestFlashMemory runs forward and backward of one head over 2048 queries
// and keys and checks that the run allocates far less than one (Sq, Sk)
// float64 matrix, the weights that are never formed, and that doubling the
// length about doubles the allocations rather than quadrupling them.
func TestFlashMemory(t *testing.T) {
	const n, dk = 2048, 8
	allocated := flashAllocated(t, n, dk, 0)
	weights := uint64(n * n * 8)
	// The packed forward value, the output, the padded and stacked gradients,
	// the three gradients and the backward's float64 copies of q, k, v and dO
	// are ~20 (n, dk) float64 matrices (2.6 MB). A bound of an eighth of the
	// weights (4 MB) leaves room for gorgonia's own allocations and none for
	// anything of n*n elements.
	limit := weights / 8
	half := flashAllocated(t, n/2, dk, 0)
	t.Logf("forward+backward, dk = %d: allocated %d bytes at Sq = Sk = %d, %d bytes at %d (ratio %.2f); one (Sq, Sk) float64 matrix is %d bytes; limit %d",
		dk, allocated, n, half, n/2, float64(allocated)/float64(half), weights, limit)
	if allocated > limit {
		t.Errorf("allocated %d bytes, want at most %d (the (Sq, Sk) weights would be %d)", allocated, limit, weights)
	}
	if float64(allocated) > 3*float64(half) {
		t.Errorf("allocations grow faster than linearly: %d bytes at n = %d, %d at n = %d", half, n/2, allocated, n)
	}
}

// flashAllocated returns the bytes allocated by one run of forward and
// backward of causal flash Attend of one head of dk over n positions, in
// tiles of tile.
func flashAllocated(t *testing.T, n, dk, tile int) uint64 {
	t.Helper()
	g := G.NewGraph()
	rng := newRand(1)
	shape := tensor.Shape{1, n, dk}
	q := valued(g, tensor.Float64, shape, uniform(rng, n*dk, -1, 1), "q")
	k := valued(g, tensor.Float64, shape, uniform(rng, n*dk, -1, 1), "k")
	v := valued(g, tensor.Float64, shape, uniform(rng, n*dk, -1, 1), "v")
	out, _, err := Attend(q, k, v, Spec{Impl: Flash, Heads: 1, Tile: tile, MaskMod: Causal()})
	if err != nil {
		t.Fatal(err)
	}
	cost, err := G.Sum(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := G.Grad(cost, q, k, v); err != nil {
		t.Fatal(err)
	}
	vm, err := NewMachine(g)
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if !allFinite(mustFloat64s(t, out.Value())) {
		t.Error("output is not finite")
	}
	return after.TotalAlloc - before.TotalAlloc
}

func mustFloat64s(t *testing.T, v G.Value) []float64 {
	t.Helper()
	f, err := Float64s(v)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestFlashTileCutToSequence gives the largest tile over 3 keys: it is cut
// to the sequences, so the scratch is (3, 3), not MaxFlashTile^2, and the
// results are those of a tile of 3, bit for bit.
func TestFlashTileCutToSequence(t *testing.T) {
	const n, dk = 3, 4
	huge := flashAllocated(t, n, dk, MaxFlashTile)
	exact := flashAllocated(t, n, dk, n)
	scratch := uint64(MaxFlashTile * MaxFlashTile * 8) // one uncut (tile, tile) float64 matrix
	t.Logf("forward+backward over %d keys: tile %d allocates %d bytes, tile %d %d bytes; one uncut scratch matrix is %d bytes", n, MaxFlashTile, huge, n, exact, scratch)
	if huge > exact+scratch/16 {
		t.Errorf("tile %d over %d keys allocates %d bytes, tile %d %d: the tile is not cut to the sequence", MaxFlashTile, n, huge, n, exact)
	}
	c := flashCase{name: "3 keys", b: 2, sq: n, sk: n, heads: 1, dk: dk, causal: true}
	in := newFlashInputs(c, 5, 1)
	wantOut, wantGrads := runAttentionImpl(t, tensor.Float64, c, in, flashByMod, n)
	out, grads := runAttentionImpl(t, tensor.Float64, c, in, flashByMod, MaxFlashTile)
	if !slices.Equal(out, wantOut) {
		t.Errorf("tile %d: output %v, want %v (tile %d)", MaxFlashTile, out, wantOut, n)
	}
	for i, wrt := range []string{"q", "k", "v"} {
		if !slices.Equal(grads[i], wantGrads[i]) {
			t.Errorf("tile %d: d%s %v, want %v (tile %d)", MaxFlashTile, wrt, grads[i], wantGrads[i], n)
		}
	}
}

func TestFlashErrors(t *testing.T) {
	g := G.NewGraph()
	q := input(g, tensor.Float64, tensor.Shape{2, 3, 6}, "q")
	k := input(g, tensor.Float64, tensor.Shape{2, 4, 6}, "k")
	k32 := input(g, tensor.Float32, tensor.Shape{2, 4, 6}, "k32")
	short := input(g, tensor.Float64, tensor.Shape{2, 5, 6}, "short")
	flat := input(g, tensor.Float64, tensor.Shape{2, 6}, "flat")
	mask, err := NewMaskInput(g, tensor.Float64, 2, 4, 4, "mask")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]func() error{
		"not divisible":                     func() error { _, _, err := Attend(q, k, k, Spec{Impl: Flash, Heads: 4}); return err },
		"by 0 heads":                        func() error { _, _, err := Attend(q, k, k, Spec{Impl: Flash, Heads: 0}); return err },
		"want (B, Sq, D)":                   func() error { _, _, err := Attend(q, k, short, Spec{Impl: Flash, Heads: 2}); return err },
		"q (2, 6), k":                       func() error { _, _, err := Attend(flat, k, k, Spec{Impl: Flash, Heads: 2}); return err },
		"float32":                           func() error { _, _, err := Attend(q, k32, k32, Spec{Impl: Flash, Heads: 2}); return err },
		"mask is":                           func() error { _, _, err := Attend(q, k, k, Spec{Impl: Flash, Heads: 2, Mask: mask}); return err },
		"Spec.Tile -1 is out of range":      func() error { _, _, err := Attend(q, k, k, Spec{Impl: Flash, Heads: 2, Tile: -1}); return err },
		"Spec.Tile 65536 is out of range":   func() error { _, _, err := Attend(q, k, k, Spec{Impl: Flash, Heads: 2, Tile: 65536}); return err },
		"Spec.Tile 1099511627776 is out of": func() error { _, _, err := Attend(q, k, k, Spec{Impl: Flash, Heads: 2, Tile: 1 << 40}); return err },
		"q is nil":                          func() error { _, _, err := Attend(nil, k, k, Spec{Impl: Flash, Heads: 2}); return err },
		"zero-value node":                   func() error { _, _, err := Attend(q, &G.Node{}, k, Spec{Impl: Flash, Heads: 2}); return err },
		"make masks with NewMask":           func() error { _, _, err := Attend(q, k, k, Spec{Impl: Flash, Heads: 2, Mask: &MaskNode{}}); return err },
	}
	for want, f := range cases {
		err := noPanic(t, want, f)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
	_, _, err = Attend(q, k, short, Spec{Impl: Flash, Heads: 2})
	if !errors.Is(err, ErrShape) {
		t.Errorf("a shape error does not match ErrShape: %v", err)
	}
}

// ExampleAttend_flash computes causal attention of two heads over four
// positions without forming the (4, 4) weights.
func ExampleAttend_flash() {
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float64, 3, G.WithShape(1, 4, 4), G.WithName("x"),
		G.WithValue(NewDense(tensor.Float64, tensor.Shape{1, 4, 4}, []float64{
			1, 0, 0, 1,
			0, 1, 1, 0,
			1, 1, 0, 0,
			0, 0, 1, 1,
		})))
	out, _, err := Attend(x, x, x, Spec{Impl: Flash, Heads: 2, MaskMod: Causal()})
	if err != nil {
		fmt.Println(err)
		return
	}
	vm, err := NewMachine(g)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out.Shape())
	// Query 0 sees only key 0: its output is value 0.
	fmt.Println(out.Value().Data().([]float64)[:4])
	// Output:
	// (1, 4, 4)
	// [1 0 0 1]
}

// benchAttention times one forward and backward pass of attention over one
// sequence of n positions, 4 heads of 32, with spec's implementation and
// modifiers. It reports the tiles flash computes per pass.
func benchAttention(b *testing.B, n int, spec Spec) { benchAttentionBatch(b, 1, n, spec) }

// benchAttentionBatch is benchAttention over a batch of sequences.
func benchAttentionBatch(b *testing.B, batch, n int, spec Spec) {
	const heads, dk = 4, 32
	c := flashCase{b: batch, sq: n, sk: n, heads: heads, dk: dk}
	in := newFlashInputs(c, 1, 1)
	g := G.NewGraph()
	shape := tensor.Shape{batch, n, heads * dk}
	q := valued(g, tensor.Float32, shape, in.q, "q")
	k := valued(g, tensor.Float32, shape, in.k, "k")
	v := valued(g, tensor.Float32, shape, in.v, "v")
	spec.Heads = heads
	out, _, err := Attend(q, k, v, spec)
	if err != nil {
		b.Fatal(err)
	}
	cost, err := G.Sum(out)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := G.Grad(cost, q, k, v); err != nil {
		b.Fatal(err)
	}
	vm, err := NewMachine(g)
	if err != nil {
		b.Fatal(err)
	}
	defer vm.Close()
	b.ReportAllocs()
	tiles := flashTiles.Load()
	for b.Loop() {
		if err := vm.RunAll(); err != nil {
			b.Fatal(err)
		}
		vm.Reset()
	}
	if spec.Impl == Flash {
		b.ReportMetric(float64(flashTiles.Load()-tiles)/float64(b.N), "tiles/op")
	}
}

func BenchmarkFlash(b *testing.B) {
	for _, n := range []int{128, 1024} {
		for _, impl := range []Impl{Fused, Flash} {
			b.Run(fmt.Sprintf("n=%d/%s", n, impl), func(b *testing.B) { benchAttention(b, n, Spec{Impl: impl, MaskMod: Causal()}) })
		}
	}
}
