package graph

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/cmplx"
	"os/exec"
	"slices"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/internal/graphtest"
)

// ropeCase is one configuration of RoPE: x is (b, s, heads*dk).
type ropeCase struct {
	b, s, heads, dk int
	opt             RoPEOptions
}

func (c ropeCase) String() string {
	pairing := "half"
	if c.opt.Interleaved {
		pairing = "interleaved"
	}
	return fmt.Sprintf("B%d_S%d_H%d_dk%d_r%d_base%g_%s", c.b, c.s, c.heads, c.dk, c.rot(), c.base(), pairing)
}

func (c ropeCase) d() int { return c.heads * c.dk }

func (c ropeCase) rot() int {
	if c.opt.RotaryDim == 0 {
		return c.dk
	}
	return c.opt.RotaryDim
}

func (c ropeCase) base() float64 {
	if c.opt.Base == 0 {
		return DefaultRoPEBase
	}
	return c.opt.Base
}

// ropeCases cover heads 1..4, dk 2..16, partial rotary, bases and both
// pairings, with B and S > 1.
func ropeCases() []ropeCase {
	var cases []ropeCase
	for _, interleaved := range []bool{false, true} {
		for _, c := range []ropeCase{
			{b: 2, s: 3, heads: 1, dk: 2},
			{b: 3, s: 2, heads: 2, dk: 4, opt: RoPEOptions{Base: 100}},
			{b: 2, s: 5, heads: 3, dk: 6},
			{b: 2, s: 4, heads: 4, dk: 8, opt: RoPEOptions{Base: 500000}},
			{b: 2, s: 3, heads: 2, dk: 16},
			{b: 2, s: 3, heads: 2, dk: 8, opt: RoPEOptions{RotaryDim: 4}},  // partial, as NeoX and GPT-J
			{b: 3, s: 2, heads: 1, dk: 12, opt: RoPEOptions{RotaryDim: 2}}, // one pair rotated
		} {
			c.opt.Interleaved = interleaved
			cases = append(cases, c)
		}
	}
	return cases
}

// ropeRef rotates x (b, s, heads*dk) in plain loops, from the definition:
// in every head, pair m (features (m, m+r/2), or (2m, 2m+1) interleaved) is
// the complex number x_i + i x_j, multiplied by exp(i sign pos θ^(-2m/r)).
func ropeRef(x []float64, pos []int, c ropeCase, sign float64) []float64 {
	r := float64(c.rot())
	return ropeRefFreq(x, pos, c, func(m int) float64 { return sign * math.Pow(c.base(), -float64(2*m)/r) })
}

// ropeRefFreq is ropeRef with the frequency of pair m given.
func ropeRefFreq(x []float64, pos []int, c ropeCase, freq func(m int) float64) []float64 {
	out := slices.Clone(x)
	d, r := c.d(), c.rot()
	for row, p := range pos {
		for h := 0; h < c.heads; h++ {
			off := row*d + h*c.dk
			for m := 0; m < r/2; m++ {
				i, j := off+m, off+m+r/2
				if c.opt.Interleaved {
					i, j = off+2*m, off+2*m+1
				}
				z := complex(x[i], x[j]) * cmplx.Rect(1, float64(p)*freq(m))
				out[i], out[j] = real(z), imag(z)
			}
		}
	}
	return out
}

// ropeEval runs RoPE of dtype dt on x at positions pos (row-major (B, S)),
// and, if dy is not nil, the gradient of sum(y ⊙ dy) with respect to x.
func ropeEval(t *testing.T, dt tensor.Dtype, c ropeCase, xv []float64, pos []int, dy []float64) (y, dx []float64) {
	t.Helper()
	g := G.NewGraph()
	shape := tensor.Shape{c.b, c.s, c.d()}
	x := valued(g, dt, shape, xv, "x")
	ids, err := NewIDs(g, c.b, c.s, slices.Max(pos)+1, "pos")
	if err != nil {
		t.Fatal(err)
	}
	if err := ids.Set(pos); err != nil {
		t.Fatal(err)
	}
	out, err := RoPE(x, c.heads, ids, c.opt)
	if err != nil {
		t.Fatal(err)
	}
	if !out.Shape().Eq(shape) || out.Dtype() != dt {
		t.Fatalf("RoPE: %v %v, want %v %v", out.Dtype(), out.Shape(), dt, shape)
	}
	if dy == nil {
		return eval(t, nil, out)[0], nil
	}
	w := valued(g, dt, shape, dy, "dy")
	cost, err := G.Sum(qkMust(t)(G.HadamardProd(out, w)))
	if err != nil {
		t.Fatal(err)
	}
	grads, err := G.Grad(cost, x)
	if err != nil {
		t.Fatal(err)
	}
	vals := eval(t, nil, out, grads[0])
	return vals[0], vals[1]
}

// qkMust returns the node of a (node, error) call, failing the test on error.
func qkMust(t *testing.T) func(*G.Node, error) *G.Node {
	return func(n *G.Node, err error) *G.Node {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// qkPositions returns n positions in [0, max), not in order.
func qkPositions(n, hi int, seed uint64) []int {
	rng := newRand(seed)
	pos := make([]int, n)
	for i := range pos {
		pos[i] = rng.IntN(hi)
	}
	return pos
}

// qkMaxDiff returns max |a_i - b_i|.
func qkMaxDiff(a, b []float64) float64 {
	var m float64
	for i := range a {
		m = math.Max(m, math.Abs(a[i]-b[i]))
	}
	return m
}

// A worked example, numbers written out: x = (1, 2, 3, 4), one head of 4,
// position 1, base 10000, so the frequencies are 1 and 1/100.
func TestRoPEWorkedExample(t *testing.T) {
	c1, s1 := math.Cos(1), math.Sin(1)
	c2, s2 := math.Cos(0.01), math.Sin(0.01)
	for _, test := range []struct {
		interleaved bool
		want        []float64
	}{
		// pairs (0, 2) at angle 1 and (1, 3) at angle 0.01
		{false, []float64{1*c1 - 3*s1, 2*c2 - 4*s2, 3*c1 + 1*s1, 4*c2 + 2*s2}},
		// pairs (0, 1) at angle 1 and (2, 3) at angle 0.01
		{true, []float64{1*c1 - 2*s1, 2*c1 + 1*s1, 3*c2 - 4*s2, 4*c2 + 3*s2}},
	} {
		c := ropeCase{b: 1, s: 2, heads: 1, dk: 4, opt: RoPEOptions{Interleaved: test.interleaved}}
		x := []float64{1, 2, 3, 4, 1, 2, 3, 4}
		got, _ := ropeEval(t, tensor.Float64, c, x, []int{0, 1}, nil)
		checkClose(t, c.String()+" at position 0", got[:4], x[:4], 0)
		checkClose(t, c.String()+" at position 1", got[4:], test.want, 1e-15)
	}
}

// ropeBig is the benchmark's size, large enough that the rows are split
// over several blocks and goroutines.
var ropeBig = ropeCase{b: 12, s: 64, heads: 4, dk: 32}

// RoPE equals the complex-number reference in float64 to 1e-12, and in
// float32 to float32's precision, both against the reference and against the
// float64 op on the same (rounded) inputs.
func TestRoPEMatchesReference(t *testing.T) {
	big := ropeBig
	big.opt.Interleaved = true
	for i, c := range append(ropeCases(), ropeBig, big) {
		t.Run(c.String(), func(t *testing.T) {
			n := c.b * c.s
			pos := qkPositions(n, 300, uint64(i))
			x := uniform(newRand(uint64(100+i)), n*c.d(), -2, 2)
			got64, _ := ropeEval(t, tensor.Float64, c, x, pos, nil)
			checkClose(t, "float64", got64, ropeRef(x, pos, c, 1), 1e-12)

			x32 := roundTo(tensor.Float32, x)
			got32, _ := ropeEval(t, tensor.Float32, c, x32, pos, nil)
			checkClose(t, "float32 vs reference", got32, ropeRef(x32, pos, c, 1), 1e-6)
			want, _ := ropeEval(t, tensor.Float64, c, x32, pos, nil)
			checkClose(t, "float32 vs float64", got32, want, 1e-6)
		})
	}
}

// The reference comparison has teeth: the op differs by more than 0.1 from
// the reference of each plausible mistake, so a swapped pairing, frequencies
// over dk or D instead of the rotated width r, a missing factor 2 in the
// exponent or a rotation the wrong way would fail TestRoPEMatchesReference.
func TestRoPEReferenceCatchesMistakes(t *testing.T) {
	for _, interleaved := range []bool{false, true} {
		c := ropeCase{b: 2, s: 4, heads: 2, dk: 8, opt: RoPEOptions{Interleaved: interleaved, RotaryDim: 4}}
		pos := qkPositions(c.b*c.s, 50, 3)
		for i := range pos[:c.s] {
			pos[i] = i + 1 // no row only at position 0, where all agree
		}
		x := uniform(newRand(4), c.b*c.s*c.d(), -2, 2)
		got, _ := ropeEval(t, tensor.Float64, c, x, pos, nil)
		swapped := c
		swapped.opt.Interleaved = !interleaved
		base, r := c.base(), float64(c.rot())
		over := func(w float64) func(int) float64 {
			return func(m int) float64 { return math.Pow(base, -float64(2*m)/w) }
		}
		for name, want := range map[string][]float64{
			"swapped pairing":   ropeRef(x, pos, swapped, 1),
			"frequency over dk": ropeRefFreq(x, pos, c, over(float64(c.dk))),
			"frequency over D":  ropeRefFreq(x, pos, c, over(float64(c.d()))),
			"base^(-m/r)":       ropeRefFreq(x, pos, c, over(2*r)),
			"opposite rotation": ropeRef(x, pos, c, -1),
		} {
			if d := qkMaxDiff(got, want); d < 0.1 {
				t.Errorf("interleaved %v: the op is within %.3g of the reference with a %s: the test would not notice it", interleaved, d, name)
			}
		}
	}
}

// Each rotated pair keeps its norm, and the features past RotaryDim are
// unchanged.
func TestRoPEPreservesPairNorms(t *testing.T) {
	for i, c := range ropeCases() {
		n := c.b * c.s
		pos := qkPositions(n, 1000, uint64(200+i))
		x := uniform(newRand(uint64(300+i)), n*c.d(), -3, 3)
		y, _ := ropeEval(t, tensor.Float64, c, x, pos, nil)
		r := c.rot()
		for row := 0; row < n; row++ {
			for h := 0; h < c.heads; h++ {
				off := row*c.d() + h*c.dk
				for m := 0; m < r/2; m++ {
					i, j := off+m, off+m+r/2
					if c.opt.Interleaved {
						i, j = off+2*m, off+2*m+1
					}
					before, after := math.Hypot(x[i], x[j]), math.Hypot(y[i], y[j])
					if !closeTo(after, before, 1e-12) {
						t.Errorf("%v: row %d head %d pair %d: norm %v, was %v", c, row, h, m, after, before)
					}
				}
				for f := off + r; f < off+c.dk; f++ {
					if y[f] != x[f] {
						t.Errorf("%v: feature %d past RotaryDim changed: %v -> %v", c, f-off, x[f], y[f])
					}
				}
			}
		}
	}
}

// RoPE makes attention relative: for a query q at position i and a key k at
// j, every head's q·k after RoPE depends only on i - j, so shifting both by t
// leaves it unchanged, to 1e-12 of |q||k|.
func TestRoPERelativePosition(t *testing.T) {
	type shift struct{ i, j, t int }
	shifts := []shift{{0, 0, 5}, {3, 1, 7}, {1, 3, 20}, {10, 0, 100}, {0, 17, 250}, {42, 42, 1}, {5, 9, 300}}
	for _, c := range ropeCases() {
		c.b, c.s = len(shifts), 4 // rows q at i, k at j, q at i+t, k at j+t
		d := c.d()
		rng := newRand(9)
		x := make([]float64, 0, c.b*c.s*d)
		var pos []int
		for _, sh := range shifts {
			q, k := uniform(rng, d, -1, 1), uniform(rng, d, -1, 1)
			x = slices.Concat(x, q, k, q, k)
			pos = append(pos, sh.i, sh.j, sh.i+sh.t, sh.j+sh.t)
		}
		y, _ := ropeEval(t, tensor.Float64, c, x, pos, nil)
		row := func(b, s int) []float64 { return y[(b*4+s)*d : (b*4+s+1)*d] }
		var worst float64
		for b, sh := range shifts {
			for h := 0; h < c.heads; h++ {
				head := func(v []float64) []float64 { return v[h*c.dk : (h+1)*c.dk] }
				dot := func(a, b []float64) float64 {
					var s float64
					for i := range a {
						s += a[i] * b[i]
					}
					return s
				}
				before := dot(head(row(b, 0)), head(row(b, 1)))
				after := dot(head(row(b, 2)), head(row(b, 3)))
				scale := math.Sqrt(dot(head(row(b, 0)), head(row(b, 0))) * dot(head(row(b, 1)), head(row(b, 1))))
				diff := math.Abs(after-before) / scale
				worst = math.Max(worst, diff)
				if diff > 1e-12 {
					t.Errorf("%v: head %d: q·k at (%d, %d) = %.17g, at (%d, %d) = %.17g", c, h, sh.i, sh.j, before, sh.i+sh.t, sh.j+sh.t, after)
				}
			}
		}
		t.Logf("%v: worst |Δ q·k| / |q||k| = %.2g", c, worst)
	}
}

// Half-split and interleaved RoPE are the same rotation after permuting the
// features of each head by P = [0, 2, 4, .., 1, 3, 5, ..] (over the rotated
// features; the rest stay put): with x_half[k] = x_inter[P[k]] in every head,
// RoPE_half(x_half)[k] = RoPE_interleaved(x_inter)[P[k]], bit for bit. This
// is the permutation Hugging Face's Llama converter applies to the output
// features of wq and wk.
func TestRoPEPairingsArePermutations(t *testing.T) {
	for _, c := range ropeCases() {
		if c.opt.Interleaved {
			continue
		}
		inter := c
		inter.opt.Interleaved = true
		r := c.rot()
		perm := make([]int, c.dk) // P
		for k := range perm {
			switch {
			case k >= r:
				perm[k] = k
			case k < r/2:
				perm[k] = 2 * k
			default:
				perm[k] = 2*(k-r/2) + 1
			}
		}
		permute := func(v []float64) []float64 {
			out := make([]float64, len(v))
			for f := range v {
				head, k := f/c.dk, f%c.dk
				out[f] = v[head*c.dk+perm[k]]
			}
			return out
		}
		n := c.b * c.s
		pos := qkPositions(n, 500, 11)
		xInter := uniform(newRand(12), n*c.d(), -2, 2)
		yHalf, _ := ropeEval(t, tensor.Float64, c, permute(xInter), pos, nil)
		yInter, _ := ropeEval(t, tensor.Float64, inter, xInter, pos, nil)
		checkClose(t, c.String()+": half-split of the permuted input vs the permuted interleaved output", yHalf, permute(yInter), 0)
		// And the permutation matters: without it they differ.
		yPlain, _ := ropeEval(t, tensor.Float64, c, xInter, pos, nil)
		if qkMaxDiff(yPlain, yInter) < 0.1 && r > 2 {
			t.Errorf("%v: half-split and interleaved agree without the permutation", c)
		}
	}
}

// A decode step with a key/value cache rotates one new token per row at the
// cache length t: RoPE of (B, 1, D) at positions t equals row t of RoPE of
// the whole (B, S, D) at 0..S-1, bit for bit, rows starting at different
// offsets (left padding), and one graph serves every step with positions Set
// anew.
func TestRoPEDecodeStep(t *testing.T) {
	for _, interleaved := range []bool{false, true} {
		c := ropeCase{b: 3, s: 6, heads: 2, dk: 8, opt: RoPEOptions{Interleaved: interleaved, Base: 1000}}
		starts := []int{0, 4, 9}
		pos, err := SequencePositions(starts, c.s)
		if err != nil {
			t.Fatal(err)
		}
		d := c.d()
		x := uniform(newRand(13), c.b*c.s*d, -1, 1)
		full, _ := ropeEval(t, tensor.Float64, c, x, pos, nil)

		g := G.NewGraph()
		xs := input(g, tensor.Float64, tensor.Shape{c.b, 1, d}, "x_step")
		ids, err := NewIDs(g, c.b, 1, 64, "pos_step")
		if err != nil {
			t.Fatal(err)
		}
		y, err := RoPE(xs, c.heads, ids, c.opt)
		if err != nil {
			t.Fatal(err)
		}
		var v G.Value
		G.Read(y, &v)
		vm, err := NewMachine(g)
		if err != nil {
			t.Fatal(err)
		}
		for s := 0; s < c.s; s++ {
			step := make([]float64, 0, c.b*d)
			var want []float64
			for b := 0; b < c.b; b++ {
				r := (b*c.s + s) * d
				step = append(step, x[r:r+d]...)
				want = append(want, full[r:r+d]...)
			}
			at, err := SequencePositions(starts, 1)
			if err != nil {
				t.Fatal(err)
			}
			for b := range at {
				at[b] += s
			}
			if err := ids.Set(at); err != nil {
				t.Fatal(err)
			}
			if err := G.Let(xs, NewDense(tensor.Float64, tensor.Shape{c.b, 1, d}, step)); err != nil {
				t.Fatal(err)
			}
			if err := vm.RunAll(); err != nil {
				t.Fatal(err)
			}
			got, err := Float64s(v)
			if err != nil {
				t.Fatal(err)
			}
			vm.Reset()
			checkClose(t, fmt.Sprintf("interleaved %v: step %d", interleaved, s), got, want, 0)
		}
		vm.Close()
	}
}

// Grouped-query keys (B, S, G*dk) are rotated with heads = G, and rotating
// them before repeating each KV head for its H/G query heads (repeat_kv: query
// head h reads KV head h / (H/G)) is the same as rotating after.
func TestRoPEGroupedQueryKeys(t *testing.T) {
	const heads, groups = 6, 2
	for _, interleaved := range []bool{false, true} {
		kc := ropeCase{b: 2, s: 5, heads: groups, dk: 4, opt: RoPEOptions{Interleaved: interleaved}}
		qc := kc
		qc.heads = heads
		n := kc.b * kc.s
		pos := qkPositions(n, 100, 14)
		k := uniform(newRand(15), n*kc.d(), -1, 1)
		repeat := func(v []float64) []float64 {
			out := make([]float64, 0, n*qc.d())
			for row := 0; row < n; row++ {
				for h := 0; h < heads; h++ {
					kv := h / (heads / groups)
					off := row*kc.d() + kv*kc.dk
					out = append(out, v[off:off+kc.dk]...)
				}
			}
			return out
		}
		rotated, _ := ropeEval(t, tensor.Float64, kc, k, pos, nil)
		checkClose(t, kc.String()+" vs reference", rotated, ropeRef(k, pos, kc, 1), 1e-12)
		after, _ := ropeEval(t, tensor.Float64, qc, repeat(k), pos, nil)
		checkClose(t, kc.String()+": repeat_kv(RoPE(k)) vs RoPE(repeat_kv(k))", repeat(rotated), after, 0)
	}
}

// The gradient of RoPE is the rotation by the opposite angle.
func TestRoPEGradientIsInverseRotation(t *testing.T) {
	for i, c := range ropeCases() {
		n := c.b * c.s
		pos := qkPositions(n, 200, uint64(400+i))
		x := uniform(newRand(uint64(500+i)), n*c.d(), -1, 1)
		dy := uniform(newRand(uint64(600+i)), n*c.d(), -1, 1)
		_, dx := ropeEval(t, tensor.Float64, c, x, pos, dy)
		checkClose(t, c.String()+": dx", dx, ropeRef(dy, pos, c, -1), 1e-12)
		// RoPE⁻¹(RoPE(dx)) is dx again.
		back, _ := ropeEval(t, tensor.Float64, c, dx, pos, nil)
		checkClose(t, c.String()+": RoPE(dx)", back, dy, 1e-12)
	}
}

// Central finite differences of the gradient with respect to x, in float64.
func TestRoPEGradients(t *testing.T) {
	for i, c := range ropeCases() {
		t.Run(c.String(), func(t *testing.T) {
			rng := newRand(uint64(700 + i))
			n := c.b * c.s
			g := G.NewGraph()
			x := param(g, tensor.Shape{c.b, c.s, c.d()}, uniform(rng, n*c.d(), -2, 2), "x")
			ids, err := NewIDs(g, c.b, c.s, 1000, "pos")
			if err != nil {
				t.Fatal(err)
			}
			if err := ids.Set(qkPositions(n, 1000, uint64(800+i))); err != nil {
				t.Fatal(err)
			}
			y, err := RoPE(x.Node, c.heads, ids, c.opt)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := GradCheck(weightedSum(t, y, rng), []Param{x}, nil, GradCheckConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if e := rep.Worst(); e.Rel > 1e-8 || e.Norm < 1e-3 {
				t.Errorf("rope gradients:\n%s", rep)
			}
		})
	}
}

// The gradient op (the inverse rotation) is itself differentiable: the
// gradient of <∂/∂x sum(RoPE(x) ⊙ W), V> with respect to W, through
// RoPEInverse's SymDiff, checks against finite differences.
func TestRoPESecondOrder(t *testing.T) {
	for _, interleaved := range []bool{false, true} {
		c := ropeCase{b: 2, s: 3, heads: 2, dk: 4, opt: RoPEOptions{Interleaved: interleaved}}
		rng := newRand(16)
		shape := tensor.Shape{c.b, c.s, c.d()}
		n := shape.TotalSize()
		g := G.NewGraph()
		x := param(g, shape, uniform(rng, n, -1, 1), "x")
		w := param(g, shape, uniform(rng, n, -1, 1), "w")
		ids, err := NewIDs(g, c.b, c.s, 50, "pos")
		if err != nil {
			t.Fatal(err)
		}
		if err := ids.Set(qkPositions(n/c.d(), 50, 17)); err != nil {
			t.Fatal(err)
		}
		y := qkMust(t)(RoPE(x.Node, c.heads, ids, c.opt))
		inner := qkMust(t)(G.Sum(qkMust(t)(G.HadamardProd(y, w.Node))))
		gx, err := G.Grad(inner, x.Node)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := GradCheck(weightedSum(t, gx[0], rng), []Param{w}, nil, GradCheckConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if e := rep.Worst(); e.Rel > 1e-8 || e.Norm < 1e-3 {
			t.Errorf("interleaved %v: second-order gradients:\n%s", interleaved, rep)
		}
	}
}

func TestRoPEErrors(t *testing.T) {
	g := G.NewGraph()
	f64 := tensor.Float64
	x := input(g, f64, tensor.Shape{2, 3, 12}, "x")
	ids, err := NewIDs(g, 2, 3, 10, "pos")
	if err != nil {
		t.Fatal(err)
	}
	ids14, err := NewIDs(g, 1, 4, 10, "pos14")
	if err != nil {
		t.Fatal(err)
	}
	odd := input(g, f64, tensor.Shape{2, 3, 10}, "odd")
	rank2 := input(g, f64, tensor.Shape{6, 12}, "rank2")
	ints := input(g, tensor.Int, tensor.Shape{2, 3, 12}, "ints")
	rope := func(x *G.Node, heads int, pos *IDs, opt RoPEOptions) func() error {
		return func() error { return node2(RoPE(x, heads, pos, opt)) }
	}
	cases := []errCase{
		{"odd dk", rope(odd, 2, ids, RoPEOptions{}), []string{"RoPE needs an even head dimension, got dk = 5"}},
		{"dk 1", rope(x, 12, ids, RoPEOptions{}), []string{"got dk = 1"}},
		{"heads do not divide", rope(x, 5, ids, RoPEOptions{}), []string{"12 features, which 5 heads do not divide"}},
		{"no heads", rope(x, 0, ids, RoPEOptions{}), []string{"0 heads"}},
		{"negative heads", rope(x, -2, ids, RoPEOptions{}), []string{"-2 heads"}},
		{"base 1", rope(x, 2, ids, RoPEOptions{Base: 1}), []string{"base 1 must be finite and greater than 1"}},
		{"base below 1", rope(x, 2, ids, RoPEOptions{Base: 0.5}), []string{"base 0.5"}},
		{"negative base", rope(x, 2, ids, RoPEOptions{Base: -10000}), []string{"base -10000"}},
		{"NaN base", rope(x, 2, ids, RoPEOptions{Base: math.NaN()}), []string{"base NaN"}},
		{"infinite base", rope(x, 2, ids, RoPEOptions{Base: math.Inf(1)}), []string{"base +Inf"}},
		{"odd rotary dim", rope(x, 2, ids, RoPEOptions{RotaryDim: 3}), []string{"RotaryDim 3 must be even and in (0, dk = 6]"}},
		{"rotary dim > dk", rope(x, 2, ids, RoPEOptions{RotaryDim: 8}), []string{"RotaryDim 8"}},
		{"negative rotary dim", rope(x, 2, ids, RoPEOptions{RotaryDim: -2}), []string{"RotaryDim -2"}},
		{"positions of other B and S", rope(x, 2, ids14, RoPEOptions{}), []string{`positions "pos14" are (B, S) = (1, 4), want (2, 3)`}},
		{"nil positions", rope(x, 2, nil, RoPEOptions{}), []string{"positions: ids are nil"}},
		{"zero positions", rope(x, 2, &IDs{}, RoPEOptions{}), []string{"positions: ids are a zero value"}},
		{"nil input", rope(nil, 2, ids, RoPEOptions{}), []string{"input is nil"}},
		{"zero-value input", rope(&G.Node{}, 2, ids, RoPEOptions{}), []string{"zero-value node"}},
		{"rank 2", rope(rank2, 2, ids, RoPEOptions{}), []string{"want (B, S, heads*dk)"}},
		{"int input", rope(ints, 2, ids, RoPEOptions{}), []string{"dtype int is not supported"}},
		{"negative start", func() error { _, err := SequencePositions([]int{0, -1}, 3); return err }, []string{"start -1 of row 1"}},
		{"no rows", func() error { _, err := SequencePositions(nil, 3); return err }, []string{"0 rows"}},
	}
	checkErrCases(t, cases)
	for _, tc := range cases[:3] {
		if err := tc.run(); !errors.Is(err, ErrShape) {
			t.Errorf("%s: %v does not match ErrShape", tc.name, err)
		}
	}
	// IDs.Set refuses negative positions, naming where.
	err = noPanic(t, "negative position", func() error { return ids.Set([]int{0, 1, 2, 3, -4, 5}) })
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("id -4 at (b=1, s=1)")) {
		t.Errorf("Set of a negative position: %v", err)
	}
}

// Positions bound past IDs.Set, straight with G.Let, are checked when the op
// runs or refused by gorgonia: a negative one, a wrong count or dtype, or none
// at all is an error, not a panic.
func TestRoPERunErrors(t *testing.T) {
	for _, test := range []struct {
		name string
		pos  *tensor.Dense
		want string
	}{
		{"negative", tensor.New(tensor.WithShape(6), tensor.WithBacking([]int{0, 1, 2, 3, -4, 5})), "position -4 at (b=1, s=1) is negative"},
		{"too few", tensor.New(tensor.WithShape(4), tensor.WithBacking([]int{0, 1, 2, 3})), "expected shape is (6)"},
		{"float", tensor.New(tensor.WithShape(6), tensor.WithBacking([]float64{0, 1, 2, 3, 4, 5})), "pos"},
		{"never set", nil, "pos"},
	} {
		g := G.NewGraph()
		x := valued(g, tensor.Float64, tensor.Shape{2, 3, 4}, uniform(newRand(18), 24, -1, 1), "x")
		ids, err := NewIDs(g, 2, 3, 10, "pos")
		if err != nil {
			t.Fatal(err)
		}
		y, err := RoPE(x, 1, ids, RoPEOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = noPanic(t, test.name, func() error {
			if test.pos != nil {
				if err := G.Let(ids.Node, test.pos); err != nil {
					return err
				}
			}
			vm, err := NewMachine(y.Graph())
			if err != nil {
				return err
			}
			defer vm.Close()
			return vm.RunAll()
		})
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(test.want)) {
			t.Errorf("%s: got %v, want an error containing %q", test.name, err, test.want)
		} else {
			t.Logf("%s: %v", test.name, err)
		}
	}
}

func TestSequencePositions(t *testing.T) {
	got, err := SequencePositions([]int{0, 3, 7}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 1, 3, 4, 7, 8}; !slices.Equal(got, want) {
		t.Errorf("SequencePositions = %v, want %v", got, want)
	}
}

// ---------------------------------------------------------------------------
// PyTorch

// variantsScript is the PyTorch reference of RoPE and RMSNorm, relative to
// this package.
const variantsScript = "../tools/torchref/variants_ref.py"

// variantsPython returns the interpreter of the PyTorch reference
// (graphtest.TorchPython): required, as train's comparison is, unless
// $QKV_SKIP_TORCH is 1, so that CI cannot pass the check unrun.
func variantsPython(t *testing.T) string {
	t.Helper()
	return graphtest.TorchPython(t, variantsScript)
}

// refResult is one result of variants_ref.py.
type refResult struct {
	Y     []float64 `json:"y"`
	DX    []float64 `json:"dx"`
	DGain []float64 `json:"dgain"`
}

// torchVariants runs variants_ref.py with interpreter py on cases and returns its results.
func torchVariants(t *testing.T, py string, cases []map[string]any) []refResult {
	t.Helper()
	in, err := json.Marshal(map[string]any{"cases": cases})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, variantsScript)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", py, variantsScript, err, stderr.Bytes())
	}
	var resp struct {
		Torch   string      `json:"torch"`
		Results []refResult `json:"results"`
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("reading the reference's output: %v", err)
	}
	if len(resp.Results) != len(cases) {
		t.Fatalf("the reference returned %d results for %d cases", len(resp.Results), len(cases))
	}
	t.Logf("reference: %s, torch %s", py, resp.Torch)
	return resp.Results
}

func qkPairing(interleaved bool) string {
	if interleaved {
		return "interleaved"
	}
	return "half"
}

// torchCheck is one case for variants_ref.py and what to do with its result.
type torchCheck struct {
	name  string
	case_ map[string]any
	check func(t *testing.T, r refResult)
}

// RoPE and RMSNorm against PyTorch, in one run of the reference (importing
// torch takes seconds): see ropeTorchChecks and rmsNormTorchChecks.
func TestRoPEAndRMSNormTorch(t *testing.T) {
	py := variantsPython(t)
	checks := append(ropeTorchChecks(t), rmsNormTorchChecks(t)...)
	cases := make([]map[string]any, len(checks))
	for i, c := range checks {
		cases[i] = c.case_
	}
	res := torchVariants(t, py, cases)
	for i, c := range checks {
		t.Run(c.name, func(t *testing.T) { c.check(t, res[i]) })
	}
}

// ropeTorchCase is the JSON of c for variants_ref.py.
func ropeTorchCase(c ropeCase, x []float64, pos []int, dy []float64, angles string) map[string]any {
	m := map[string]any{
		"op": "rope", "dtype": "float64", "shape": []int{c.b, c.s, c.d()}, "x": x, "positions": pos,
		"heads": c.heads, "base": c.base(), "pairing": qkPairing(c.opt.Interleaved), "rotary_dim": c.rot(),
		"angles": angles,
	}
	if dy != nil {
		m["dy"] = dy
	}
	return m
}

// ropeTorchChecks: RoPE equals Hugging Face's rotate_half (half-split,
// GPT-NeoX partial rotary) and Meta's view_as_complex form (interleaved,
// GPT-J partial) with float64 angles, outputs and gradients (torch autograd),
// to 1e-12 in float64.
//
// With Hugging Face's float32 angles (what HF and Meta compute even for a
// float64 model), qkv's float64 RoPE differs by about 4e-8 * position on
// |x| < 1: measured at positions up to 64, 512 and 4096, for the RoPE doc
// comment (2.2e-6, 1.7e-5, 1.4e-4).
func ropeTorchChecks(t *testing.T) []torchCheck {
	var checks []torchCheck
	for i, c := range append(ropeCases(), ropeBig) {
		n := c.b * c.s
		pos := qkPositions(n, 300, uint64(900+i))
		x := uniform(newRand(uint64(1000+i)), n*c.d(), -2, 2)
		dy := uniform(newRand(uint64(1100+i)), n*c.d(), -1, 1)
		y, dx := ropeEval(t, tensor.Float64, c, x, pos, dy)
		checks = append(checks, torchCheck{"rope/" + c.String(), ropeTorchCase(c, x, pos, dy, "float64"), func(t *testing.T, r refResult) {
			checkClose(t, "y vs torch", y, r.Y, 1e-12)
			checkClose(t, "dx vs torch autograd", dx, r.DX, 1e-12)
			t.Logf("max |Δy| %.2g, max |Δdx| %.2g", qkMaxDiff(y, r.Y), qkMaxDiff(dx, r.DX))
		}})
	}
	for i, hi := range []int{64, 512, 4096} {
		c := ropeCase{b: 2, s: 16, heads: 2, dk: 64}
		n := c.b * c.s
		pos := qkPositions(n, hi, uint64(1200+i))
		pos[0] = hi - 1
		x := uniform(newRand(uint64(1300+i)), n*c.d(), -1, 1)
		y, _ := ropeEval(t, tensor.Float64, c, x, pos, nil)
		checks = append(checks, torchCheck{fmt.Sprintf("rope/hf-float32-angles/positions<%d", hi), ropeTorchCase(c, x, pos, nil, "float32"), func(t *testing.T, r refResult) {
			d := qkMaxDiff(y, r.Y)
			t.Logf("positions < %d: max |qkv float64 - HF float32 angles| = %.2g on |x| < 1", hi, d)
			if d > 1e-7*float64(hi) || d < 1e-12 {
				t.Errorf("positions < %d: difference %.2g, expected about %g: the reference no longer uses float32 angles, or qkv's angles changed", hi, d, 4e-8*float64(hi))
			}
		}})
	}
	return checks
}

// ---------------------------------------------------------------------------
// Benchmarks

// BenchmarkRoPE times the forward (RoPE) and backward (the inverse rotation)
// kernels at B=12, S=64, D=128, H=4 (dk = 32), positions 0..63 in every row.
// MB/s counts the bytes of x.
func BenchmarkRoPE(b *testing.B) {
	const bs, s, d, heads = 12, 64, 128, 4
	for _, dt := range floatTypes {
		for _, interleaved := range []bool{false, true} {
			x := NewDense(dt, tensor.Shape{bs, s, d}, uniform(newRand(1), bs*s*d, -1, 1))
			pos := make([]int, 0, bs*s)
			for r := 0; r < bs; r++ {
				for i := 0; i < s; i++ {
					pos = append(pos, i)
				}
			}
			p := tensor.New(tensor.WithShape(bs*s), tensor.WithBacking(pos))
			for _, inverse := range []bool{false, true} {
				op := ropeOp{shape: tensor.Shape{bs, s, d}, heads: heads, rot: d / heads, base: DefaultRoPEBase, interleaved: interleaved, inverse: inverse}.withOutput(new(output))
				name := fmt.Sprintf("%v/%s/forward", dt, qkPairing(interleaved))
				if inverse {
					name = fmt.Sprintf("%v/%s/backward", dt, qkPairing(interleaved))
				}
				b.Run(name, func(b *testing.B) {
					b.SetBytes(int64(bs * s * d * dt.Size())) // MB/s: of x
					for i := 0; i < b.N; i++ {
						if _, err := op.Do(x, p); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
