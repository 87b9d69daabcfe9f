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

// linCase is one linear attention tested: sizes, spec and lengths.
type linCase struct {
	b, sq, sk, heads, f, e int
	causal, norm           bool
	chunk                  int
	lengths                []int
}

func (c linCase) String() string {
	return fmt.Sprintf("B%d Sq%d Sk%d H%d F%d E%d causal=%v norm=%v chunk=%d lengths=%v", c.b, c.sq, c.sk, c.heads, c.f, c.e, c.causal, c.norm, c.chunk, c.lengths)
}

func (c linCase) spec(impl Impl) LinearSpec {
	var lengths []int
	if c.lengths != nil {
		lengths = slices.Clone(c.lengths)
	}
	return LinearSpec{Heads: c.heads, Causal: c.causal, Normalize: c.norm, Chunk: c.chunk, Impl: impl, KeyLengths: lengths}
}

// linInputs are the values of φq, φk, v and the cost's weights for c:
// positive features when normalized, so that the denominators stay away
// from 0 (as elu1's and taylor's do), signed otherwise.
type linInputs struct{ q, k, v, w []float64 }

func newLinInputs(c linCase, seed uint64) linInputs {
	rng := newRand(seed)
	lo := -1.0
	if c.norm {
		lo = 0.1
	}
	return linInputs{
		q: uniform(rng, c.b*c.sq*c.heads*c.f, lo, 1),
		k: uniform(rng, c.b*c.sk*c.heads*c.f, lo, 1),
		v: uniform(rng, c.b*c.sk*c.heads*c.e, -1, 1),
		w: uniform(rng, c.b*c.sq*c.heads*c.e, -1, 1),
	}
}

// linResult is the output and the gradients of sum(out ⊙ w).
type linResult struct{ out, dq, dk, dv []float64 }

// runLinearCase builds LinearAttend for c in dtype dt with impl, runs it
// forward and backward and returns the output and gradients.
func runLinearCase(t *testing.T, c linCase, in linInputs, dt tensor.Dtype, impl Impl) linResult {
	t.Helper()
	g := G.NewGraph()
	q := valued(g, dt, tensor.Shape{c.b, c.sq, c.heads * c.f}, roundTo(dt, in.q), "phiQ")
	k := valued(g, dt, tensor.Shape{c.b, c.sk, c.heads * c.f}, roundTo(dt, in.k), "phiK")
	v := valued(g, dt, tensor.Shape{c.b, c.sk, c.heads * c.e}, roundTo(dt, in.v), "v")
	out, err := LinearAttend(q, k, v, c.spec(impl))
	if err != nil {
		t.Fatalf("%v %s: %v", c, impl, err)
	}
	w := valued(g, dt, out.Shape().Clone(), roundTo(dt, in.w), "w")
	cost, err := G.Sum(must(G.HadamardProd(out, w)))
	if err != nil {
		t.Fatal(err)
	}
	grads, err := G.Grad(cost, q, k, v)
	if err != nil {
		t.Fatalf("%v %s: grad: %v", c, impl, err)
	}
	r := eval(t, nil, out, grads[0], grads[1], grads[2])
	return linResult{r[0], r[1], r[2], r[3]}
}

// linAttnRef is the formula in plain loops, float64.
func linAttnRef(c linCase, in linInputs) []float64 {
	out := make([]float64, c.b*c.sq*c.heads*c.e)
	wf, we := c.heads*c.f, c.heads*c.e
	for b := range c.b {
		l := c.sk
		if c.lengths != nil {
			l = c.lengths[b]
		}
		for h := range c.heads {
			for i := range c.sq {
				num := make([]float64, c.e)
				den := 0.0
				for j := range c.sk {
					if j >= l || (c.causal && j > i) {
						continue
					}
					a := 0.0
					for f := range c.f {
						a += in.q[(b*c.sq+i)*wf+h*c.f+f] * in.k[(b*c.sk+j)*wf+h*c.f+f]
					}
					den += a
					for e := range c.e {
						num[e] += a * in.v[(b*c.sk+j)*we+h*c.e+e]
					}
				}
				for e := range c.e {
					o := num[e]
					if c.norm {
						o /= den + LinearEps
					}
					out[(b*c.sq+i)*we+h*c.e+e] = o
				}
			}
		}
	}
	return out
}

// linCases are the configurations tested: causal and not, normalized and
// not, chunks that divide n and that do not (1, 3, 64, n, > n), padding
// with a sequence of no visible key, and Sq != Sk without causality.
func linCases() []linCase {
	var cs []linCase
	for _, causal := range []bool{true, false} {
		for _, norm := range []bool{true, false} {
			for _, lengths := range [][]int{nil, {0, 5}, {7, 3}} {
				sq := 7
				if !causal {
					sq = 5
				}
				for _, chunk := range []int{1, 3, 64, 7, 9, 0} {
					cs = append(cs, linCase{b: 2, sq: sq, sk: 7, heads: 2, f: 3, e: 2, causal: causal, norm: norm, chunk: chunk, lengths: lengths})
				}
			}
			// A sequence longer than the default chunk, which it does not divide.
			for _, chunk := range []int{0, 3, 70, 100} {
				cs = append(cs, linCase{b: 1, sq: 70, sk: 70, heads: 2, f: 4, e: 3, causal: causal, norm: norm, chunk: chunk, lengths: []int{61}})
			}
		}
	}
	return cs
}

// TestLinearAttendFusedMatchesComposed: the chunked op and the composed
// graph give the same output and gradients, both the plain-loop formula's
// output, in float64 (1e-12) and float32.
func TestLinearAttendFusedMatchesComposed(t *testing.T) {
	for i, c := range linCases() {
		in := newLinInputs(c, uint64(100+i))
		want := linAttnRef(c, in)
		for _, dt := range floatTypes {
			tol := 1e-12
			if dt == tensor.Float32 {
				tol = 2e-5
			}
			fused := runLinearCase(t, c, in, dt, Fused)
			composed := runLinearCase(t, c, in, dt, Composed)
			name := fmt.Sprintf("%v %v", c, dt)
			if dt == tensor.Float64 {
				checkClose(t, name+" fused out vs loops", fused.out, want, tol)
			}
			checkClose(t, name+" composed out vs loops", composed.out, want, max(tol, 1e-12))
			checkClose(t, name+" out", fused.out, composed.out, tol)
			checkClose(t, name+" dphiQ", fused.dq, composed.dq, tol)
			checkClose(t, name+" dphiK", fused.dk, composed.dk, tol)
			checkClose(t, name+" dv", fused.dv, composed.dv, tol)
		}
	}
}

// TestLinearAttendHiddenKeysExactlyZero: a sequence whose keys are all
// padding (length 0) gets output 0 and zero gradients, exactly, in both
// implementations and dtypes; padded keys get zero gradients.
func TestLinearAttendHiddenKeysExactlyZero(t *testing.T) {
	for _, causal := range []bool{true, false} {
		for _, norm := range []bool{true, false} {
			c := linCase{b: 2, sq: 6, sk: 6, heads: 2, f: 3, e: 2, causal: causal, norm: norm, chunk: 4, lengths: []int{0, 4}}
			in := newLinInputs(c, 7)
			for _, dt := range floatTypes {
				for _, impl := range []Impl{Fused, Composed} {
					r := runLinearCase(t, c, in, dt, impl)
					name := fmt.Sprintf("%v %v %s", c, dt, impl)
					rowsQ, rowsV := c.sq*c.heads*c.e, c.sk*c.heads*c.e
					zero := func(what string, x []float64) {
						for i, v := range x {
							if v != 0 {
								t.Errorf("%s: %s[%d] = %v, want exactly 0", name, what, i, v)
								return
							}
						}
					}
					zero("out of sequence 0", r.out[:rowsQ])
					zero("dphiQ of sequence 0", r.dq[:c.sq*c.heads*c.f])
					zero("dphiK of sequence 0", r.dk[:c.sk*c.heads*c.f])
					zero("dv of sequence 0", r.dv[:rowsV])
					zero("dphiK of sequence 1's padding", r.dk[(c.sk+4)*c.heads*c.f:])
					zero("dv of sequence 1's padding", r.dv[(c.sk+4)*c.heads*c.e:])
					if !allFinite(r.out) || !allFinite(r.dq) || !allFinite(r.dk) || !allFinite(r.dv) {
						t.Errorf("%s: values not finite", name)
					}
				}
			}
		}
	}
}

// TestLinearAttendGradients checks the fused op's gradients against
// central finite differences in every configuration.
func TestLinearAttendGradients(t *testing.T) {
	for _, causal := range []bool{true, false} {
		for _, norm := range []bool{true, false} {
			for _, lengths := range [][]int{nil, {0, 4}} {
				for _, chunk := range []int{2, 0} {
					c := linCase{b: 2, sq: 5, sk: 5, heads: 2, f: 3, e: 2, causal: causal, norm: norm, chunk: chunk, lengths: lengths}
					if !causal {
						c.sq = 4
					}
					in := newLinInputs(c, 11)
					g := G.NewGraph()
					q := param(g, tensor.Shape{c.b, c.sq, c.heads * c.f}, in.q, "phiQ")
					k := param(g, tensor.Shape{c.b, c.sk, c.heads * c.f}, in.k, "phiK")
					v := param(g, tensor.Shape{c.b, c.sk, c.heads * c.e}, in.v, "v")
					out, err := LinearAttend(q.Node, k.Node, v.Node, c.spec(Fused))
					if err != nil {
						t.Fatal(err)
					}
					rep, err := GradCheck(weightedSum(t, out, newRand(3)), []Param{q, k, v}, nil, GradCheckConfig{})
					if err != nil {
						t.Fatal(err)
					}
					for _, e := range rep {
						if e.Rel > 1e-7 || e.Norm < 1e-3 {
							t.Errorf("%v:\n%s", c, rep)
							break
						}
					}
				}
			}
		}
	}
}

// TestLinearAttendThroughFeatures: the gradient reaches x through each
// feature map and the fused attention, and the composed graph agrees.
func TestLinearAttendThroughFeatures(t *testing.T) {
	const b, n, heads, d = 1, 5, 2, 2
	for _, f := range []FeatureMap{FeatureELU1, FeatureReLU, FeatureTaylor, FeatureIdentity} {
		for _, impl := range []Impl{Fused, Composed} {
			rng := newRand(13)
			g := G.NewGraph()
			x := param(g, tensor.Shape{b, n, heads * d}, uniform(rng, b*n*heads*d, -1, 1), "x")
			y := param(g, tensor.Shape{b, n, heads * d}, uniform(rng, b*n*heads*d, -1, 1), "y")
			v := param(g, tensor.Shape{b, n, heads * 3}, uniform(rng, b*n*heads*3, -1, 1), "v")
			fq := must(Features(x.Node, heads, f))
			fk := must(Features(y.Node, heads, f))
			norm := f != FeatureIdentity && f != FeatureReLU // signed or zero denominators are ill-conditioned
			out, err := LinearAttend(fq, fk, v.Node, LinearSpec{Heads: heads, Causal: true, Normalize: norm, Chunk: 2, Impl: impl})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := GradCheck(weightedSum(t, out, rng), []Param{x, y, v}, nil, GradCheckConfig{})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range rep {
				if e.Rel > 1e-7 {
					t.Errorf("%s %s:\n%s", f, impl, rep)
					break
				}
			}
		}
	}
}

// TestLinearAttendLengthsReadAtRun: KeyLengths are read at every run, so
// that updating them in place changes the next run's output and gradients
// (the fused op's reused buffers keep nothing of the run before: padded
// keys' gradients are rewritten as 0); two attentions over the same nodes
// with different lengths stay two nodes; a length out of range is an error
// of the run.
func TestLinearAttendLengthsReadAtRun(t *testing.T) {
	for _, causal := range []bool{true, false} {
		c := linCase{b: 2, sq: 6, sk: 6, heads: 2, f: 2, e: 3, causal: causal, norm: true, chunk: 4}
		in := newLinInputs(c, 17)
		g := G.NewGraph()
		lengths := []int{6, 6}
		var outs, wrt G.Nodes
		var cost *G.Node
		for _, impl := range []Impl{Fused, Composed} {
			q := valued(g, tensor.Float64, tensor.Shape{2, 6, 4}, in.q, "phiQ "+string(impl))
			k := valued(g, tensor.Float64, tensor.Shape{2, 6, 4}, in.k, "phiK "+string(impl))
			v := valued(g, tensor.Float64, tensor.Shape{2, 6, 6}, in.v, "v "+string(impl))
			out := must(LinearAttend(q, k, v, LinearSpec{Heads: 2, Causal: causal, Normalize: true, Chunk: 4, Impl: impl, KeyLengths: lengths}))
			w := valued(g, tensor.Float64, out.Shape().Clone(), in.w, "w "+string(impl))
			c := must(G.Sum(must(G.HadamardProd(out, w))))
			if cost == nil {
				cost = c
			} else {
				cost = must(G.Add(cost, c))
			}
			outs, wrt = append(outs, out), append(wrt, q, k, v)
			other := must(LinearAttend(q, k, v, LinearSpec{Heads: 2, Causal: causal, Normalize: true, Chunk: 4, Impl: impl, KeyLengths: []int{6, 6}}))
			if other == out {
				t.Fatalf("%s: two attentions with different KeyLengths slices were merged into one node", impl)
			}
		}
		grads, err := G.Grad(cost, wrt...)
		if err != nil {
			t.Fatal(err)
		}
		vm, err := NewMachine(g)
		if err != nil {
			t.Fatal(err)
		}
		for _, ls := range [][]int{{6, 6}, {2, 3}, {6, 5}, {0, 1}, {1, 0}} {
			copy(lengths, ls)
			if err := vm.RunAll(); err != nil {
				t.Fatal(err)
			}
			vals := make([][]float64, 0, 8)
			for _, n := range append(outs, grads...) {
				vals = append(vals, must(Float64s(n.Value())))
			}
			vm.Reset()
			c.lengths = ls
			name := fmt.Sprintf("causal=%v lengths %v", causal, ls)
			checkClose(t, name+": fused", vals[0], linAttnRef(c, in), 1e-12)
			checkClose(t, name+": composed", vals[1], linAttnRef(c, in), 1e-12)
			for i, what := range []string{"dphiQ", "dphiK", "dv"} {
				checkClose(t, name+": "+what, vals[2+i], vals[5+i], 1e-12)
			}
		}
		copy(lengths, []int{-1, 5}) // MaskNode.KeyLengths' mark of a mask that is not padding
		err = noPanic(t, "run with a length of -1", vm.RunAll)
		if err == nil || !strings.Contains(err.Error(), "KeyLengths[0] = -1") {
			t.Errorf("run with KeyLengths -1: got %v, want an error naming it", err)
		}
		vm.Reset()
		copy(lengths, []int{3, 7})
		if err := noPanic(t, "run with a length of 7", vm.RunAll); err == nil || !strings.Contains(err.Error(), "KeyLengths[1] = 7, want 0..6") {
			t.Errorf("run with KeyLengths 7 of 6 keys: got %v, want an error naming it", err)
		}
		vm.Reset()
		vm.Close()
	}
}

// TestLinearAttendDeterministic: the same bits at GOMAXPROCS 1 and 8,
// forward and backward, in both dtypes.
func TestLinearAttendDeterministic(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, causal := range []bool{true, false} {
		c := linCase{b: 2, sq: 150, sk: 150, heads: 4, f: 16, e: 32, causal: causal, norm: true, chunk: 32, lengths: []int{150, 97}}
		in := newLinInputs(c, 19)
		for _, dt := range floatTypes {
			var want linResult
			for _, procs := range []int{1, 8, 1, 8} {
				runtime.GOMAXPROCS(procs)
				got := runLinearCase(t, c, in, dt, Fused)
				if want.out == nil {
					want = got
					continue
				}
				for i, pair := range [][2][]float64{{got.out, want.out}, {got.dq, want.dq}, {got.dk, want.dk}, {got.dv, want.dv}} {
					for j := range pair[0] {
						if math.Float64bits(pair[0][j]) != math.Float64bits(pair[1][j]) {
							t.Fatalf("causal=%v %v GOMAXPROCS %d: result %d [%d] = %v, at GOMAXPROCS 1 %v", causal, dt, procs, i, j, pair[0][j], pair[1][j])
						}
					}
				}
			}
		}
	}
}

// TestLinearAttendErrors: bad input is a clear error, never a panic.
func TestLinearAttendErrors(t *testing.T) {
	g := G.NewGraph()
	x := func(dt tensor.Dtype, shape ...int) *G.Node {
		return input(g, dt, shape, fmt.Sprintf("x%v%v", dt, shape))
	}
	f64 := tensor.Float64
	q, k, v := x(f64, 2, 5, 6), x(f64, 2, 5, 6), x(f64, 2, 5, 4)
	for _, c := range []struct {
		name    string
		q, k, v *G.Node
		s       LinearSpec
		want    string
		shape   bool
	}{
		{"nil q", nil, k, v, LinearSpec{Heads: 2}, "phiQ is nil", false},
		{"zero node", new(G.Node), k, v, LinearSpec{Heads: 2}, "zero-value node", false},
		{"rank", x(f64, 10, 6), k, v, LinearSpec{Heads: 2}, "want (B, Sq, H*dφ)", true},
		{"batch", x(f64, 3, 5, 6), k, v, LinearSpec{Heads: 2}, "want (B, Sq, H*dφ)", true},
		{"k and v lengths", q, k, x(f64, 2, 4, 4), LinearSpec{Heads: 2}, "want (B, Sq, H*dφ)", true},
		{"q and k widths", q, x(f64, 2, 5, 4), v, LinearSpec{Heads: 2}, "want (B, Sq, H*dφ)", true},
		{"heads", q, k, v, LinearSpec{Heads: 4}, "4 heads do not divide", true},
		{"no heads", q, k, v, LinearSpec{}, "0 heads do not divide", true},
		{"causal Sq != Sk", x(f64, 2, 3, 6), k, v, LinearSpec{Heads: 2, Causal: true}, "Sq = 3, Sk = 5", true},
		{"chunk", q, k, v, LinearSpec{Heads: 2, Chunk: -1}, "Chunk -1 is negative", false},
		{"lengths", q, k, v, LinearSpec{Heads: 2, KeyLengths: []int{3}}, "1 lengths, want one per sequence, B = 2", true},
		{"impl", q, k, v, LinearSpec{Heads: 2, Impl: "fast"}, `unknown LinearSpec.Impl "fast"`, false},
		{"flash", q, k, v, LinearSpec{Heads: 2, Impl: Flash}, `LinearSpec.Impl "flash"`, false},
		{"dtype", q, x(tensor.Float32, 2, 5, 6), v, LinearSpec{Heads: 2}, "phiQ is float64", false},
		{"int dtype", x(tensor.Int, 2, 5, 6), x(tensor.Int, 2, 5, 6), x(tensor.Int, 2, 5, 4), LinearSpec{Heads: 2}, "not supported", false},
	} {
		err := noPanic(t, c.name, func() error { _, err := LinearAttend(c.q, c.k, c.v, c.s); return err })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
			continue
		}
		if c.shape != errors.Is(err, ErrShape) {
			t.Errorf("%s: errors.Is(%v, ErrShape) = %v", c.name, err, !c.shape)
		}
		if !strings.Contains(err.Error(), "linear attention") {
			t.Errorf("%s: %v does not name linear attention", c.name, err)
		}
	}
}

// BenchmarkLinearAttention times a training step's attention, forward and
// backward, float32, B=1, H=4: linear attention (dφ=16, dv=32, causal,
// normalized, the fused chunked op) beside causal flash attention (dk=32).
func BenchmarkLinearAttention(b *testing.B) {
	const heads, f, e = 4, 16, 32
	for _, n := range []int{1024, 4096} {
		b.Run(fmt.Sprintf("n=%d/linear", n), func(b *testing.B) {
			c := linCase{b: 1, sq: n, sk: n, heads: heads, f: f, e: e, causal: true, norm: true}
			in := newLinInputs(c, 1)
			g := G.NewGraph()
			q := valued(g, tensor.Float32, tensor.Shape{1, n, heads * f}, in.q, "phiQ")
			k := valued(g, tensor.Float32, tensor.Shape{1, n, heads * f}, in.k, "phiK")
			v := valued(g, tensor.Float32, tensor.Shape{1, n, heads * e}, in.v, "v")
			out, err := LinearAttend(q, k, v, c.spec(Fused))
			if err != nil {
				b.Fatal(err)
			}
			cost := must(G.Sum(out))
			if _, err := G.Grad(cost, q, k, v); err != nil {
				b.Fatal(err)
			}
			vm, err := NewMachine(g)
			if err != nil {
				b.Fatal(err)
			}
			defer vm.Close()
			b.ReportAllocs()
			for b.Loop() {
				if err := vm.RunAll(); err != nil {
					b.Fatal(err)
				}
				vm.Reset()
			}
		})
		b.Run(fmt.Sprintf("n=%d/flash", n), func(b *testing.B) { benchAttention(b, n, Spec{Impl: Flash, MaskMod: Causal()}) })
	}
}
