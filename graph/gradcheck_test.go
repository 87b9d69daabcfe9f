package graph

import (
	"fmt"
	"hash"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// gradCase builds, in g, a scalar float64 cost of some parameters. inputs,
// when not nil, are bound by GradCheck before every run.
type gradCase struct {
	name  string
	build func(t *testing.T, g *G.ExprGraph, rng *rand.Rand) (cost *G.Node, params []Param, inputs map[*G.Node]G.Value)
}

// unary returns a case checking cost = sum(f(x) ⊙ W) for x of the given shape
// with entries in [lo, hi).
func unary(name string, shape tensor.Shape, lo, hi float64, f func(*G.Node) (*G.Node, error)) gradCase {
	return gradCase{name: name, build: func(t *testing.T, g *G.ExprGraph, rng *rand.Rand) (*G.Node, []Param, map[*G.Node]G.Value) {
		p := param(g, shape, uniform(rng, shape.TotalSize(), lo, hi), "x")
		y, err := f(p.Node)
		if err != nil {
			t.Fatal(err)
		}
		return weightedSum(t, y, rng), []Param{p}, nil
	}}
}

func gradCases() []gradCase {
	return []gradCase{
		unary("Softmax 2-D", tensor.Shape{3, 4}, -3, 3, softmaxOf),
		unary("Softmax 3-D", tensor.Shape{2, 2, 3}, -3, 3, softmaxOf),
		unary("Softmax 4-D", tensor.Shape{2, 2, 2, 3}, -3, 3, softmaxOf),
		unary("LogSoftmax 2-D", tensor.Shape{3, 4}, -3, 3, LogSoftmax),
		unary("LogSoftmax 4-D", tensor.Shape{2, 1, 2, 3}, -3, 3, LogSoftmax),
		{name: "Softmax with a bound input", build: func(t *testing.T, g *G.ExprGraph, rng *rand.Rand) (*G.Node, []Param, map[*G.Node]G.Value) {
			shape := tensor.Shape{2, 3, 4}
			p := param(g, shape, uniform(rng, shape.TotalSize(), -1, 1), "x")
			offset := input(g, tensor.Float64, shape, "offset")
			s, err := G.Add(p.Node, offset)
			if err != nil {
				t.Fatal(err)
			}
			y, err := softmaxOf(s)
			if err != nil {
				t.Fatal(err)
			}
			in := map[*G.Node]G.Value{offset: NewDense(tensor.Float64, shape, uniform(rng, shape.TotalSize(), -50, 50))}
			return weightedSum(t, y, rng), []Param{p}, in
		}},
		{name: "CrossEntropy", build: func(t *testing.T, g *G.ExprGraph, rng *rand.Rand) (*G.Node, []Param, map[*G.Node]G.Value) {
			shape := tensor.Shape{2, 3, 5}
			p := param(g, shape, uniform(rng, shape.TotalSize(), -2, 2), "logits")
			tg, err := NewTargets(g, tensor.Float64, 6, 5, "targets")
			if err != nil {
				t.Fatal(err)
			}
			if err := tg.Set([]int{0, 4, 2, 9, 1, 3}, []float64{1, 2, 0.5, 0, 1, 1}); err != nil {
				t.Fatal(err)
			}
			loss, err := CrossEntropy(p.Node, tg)
			if err != nil {
				t.Fatal(err)
			}
			return loss, []Param{p}, nil
		}},
		unary("Scale 3-D", tensor.Shape{2, 3, 4}, -2, 2, func(x *G.Node) (*G.Node, error) { return Scale(x, 0.35) }),
		unary("Scale 4-D", tensor.Shape{2, 2, 3, 2}, -2, 2, func(x *G.Node) (*G.Node, error) { return Scale(x, -2.5) }),
		{name: "Scale of a matmul", build: func(t *testing.T, g *G.ExprGraph, rng *rand.Rand) (*G.Node, []Param, map[*G.Node]G.Value) {
			// The layers scale a projection's output; the product feeds a
			// softmax, so an in-place multiply would show in the gradient.
			a := param(g, tensor.Shape{2, 3, 4}, uniform(rng, 24, -1, 1), "a")
			b := param(g, tensor.Shape{2, 4, 3}, uniform(rng, 24, -1, 1), "b")
			h, err := G.BatchedMatMul(a.Node, b.Node, false, false)
			if err != nil {
				t.Fatal(err)
			}
			if h, err = Scale(h, 2.8); err != nil {
				t.Fatal(err)
			}
			if h, err = softmaxOf(h); err != nil {
				t.Fatal(err)
			}
			return weightedSum(t, h, rng), []Param{a, b}, nil
		}},
		unary("GELU", tensor.Shape{3, 4}, -3, 3, GELU),
		unary("ReLU", tensor.Shape{3, 4}, -3, 3, ReLU),
		{name: "Dropout with a fixed mask", build: func(t *testing.T, g *G.ExprGraph, rng *rand.Rand) (*G.Node, []Param, map[*G.Node]G.Value) {
			shape := tensor.Shape{4, 5}
			p := param(g, shape, uniform(rng, shape.TotalSize(), -1, 1), "x")
			d, err := NewDropout(g, tensor.Float64, shape, 0.3, 9, "drop")
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Resample(2); err != nil {
				t.Fatal(err)
			}
			y, err := d.Apply(p.Node)
			if err != nil {
				t.Fatal(err)
			}
			return weightedSum(t, y, rng), []Param{p}, nil
		}},
		{name: "two parameters through softmax and GELU", build: func(t *testing.T, g *G.ExprGraph, rng *rand.Rand) (*G.Node, []Param, map[*G.Node]G.Value) {
			a := param(g, tensor.Shape{3, 4}, uniform(rng, 12, -1, 1), "a")
			b := param(g, tensor.Shape{4, 2}, uniform(rng, 8, -1, 1), "b")
			h, err := G.Mul(a.Node, b.Node)
			if err != nil {
				t.Fatal(err)
			}
			if h, err = GELU(h); err != nil {
				t.Fatal(err)
			}
			if h, err = LogSoftmax(h); err != nil {
				t.Fatal(err)
			}
			return weightedSum(t, h, rng), []Param{a, b}, nil
		}},
	}
}

func TestGradCheckOps(t *testing.T) {
	for i, test := range gradCases() {
		t.Run(test.name, func(t *testing.T) {
			g := G.NewGraph()
			cost, params, inputs := test.build(t, g, newRand(uint64(700+i)))
			report, err := GradCheck(cost, params, inputs, GradCheckConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if len(report) != len(params) {
				t.Fatalf("report has %d entries for %d parameters", len(report), len(params))
			}
			for j, e := range report {
				if e.Name != params[j].Name || e.Size != params[j].Node.Shape().TotalSize() {
					t.Errorf("entry %d is %q of size %d, want %q of size %d", j, e.Name, e.Size, params[j].Name, params[j].Node.Shape().TotalSize())
				}
				// A zero gradient would make the check vacuous.
				if e.Norm < 1e-3 {
					t.Errorf("%s: numerical gradient norm %v: the check is vacuous", e.Name, e.Norm)
				}
				if e.Rel > 1e-6 || math.IsNaN(e.Rel) {
					t.Errorf("%s: relative error %.3e > 1e-6\n%v", e.Name, e.Rel, report)
				}
			}
		})
	}
}

// The masked softmax (attention weights) of a query that may attend to nothing has a zero
// gradient, and the rows that can attend still check out.
func TestGradCheckFullyMaskedRow(t *testing.T) {
	g := G.NewGraph()
	m := testMask()
	shape := tensor.Shape{m.B, m.Sq, m.Sk}
	p := param(g, shape, uniform(newRand(71), shape.TotalSize(), -2, 2), "scores")
	mn, err := NewMaskConst(g, tensor.Float64, m, "mask")
	if err != nil {
		t.Fatal(err)
	}
	y, err := maskedSoftmaxOf(p.Node, mn)
	if err != nil {
		t.Fatal(err)
	}
	cost := weightedSum(t, y, newRand(72))
	grads, err := G.Grad(cost, p.Node)
	if err != nil {
		t.Fatal(err)
	}
	got := eval(t, nil, grads[0])[0]
	if !allFinite(got) {
		t.Fatalf("gradient not finite: %v", got)
	}
	for i, ok := range m.Allow {
		if !ok && got[i] != 0 {
			t.Errorf("gradient of hidden score %d = %v, want 0", i, got[i])
		}
	}
	row := (1*m.Sq + 2) * m.Sk // the fully hidden row
	for j := 0; j < m.Sk; j++ {
		if got[row+j] != 0 {
			t.Errorf("gradient of the fully masked row, key %d = %v, want 0", j, got[row+j])
		}
	}
}

func TestCompareGrads(t *testing.T) {
	for _, test := range []struct {
		name              string
		sym, num          []float64
		floor             float64
		wantRel, wantMaxA float64
	}{
		{name: "equal", sym: []float64{1, -2, 3}, num: []float64{1, -2, 3}, floor: 1e-3, wantRel: 0, wantMaxA: 0},
		// ||(0,0,-1)|| / max(||(1,2,3)||, ||(1,2,4)||) = 1/sqrt(21)
		{name: "one off", sym: []float64{1, 2, 3}, num: []float64{1, 2, 4}, floor: 1e-3, wantRel: 1 / math.Sqrt(21), wantMaxA: 1},
		{name: "sign flipped", sym: []float64{1, -2}, num: []float64{-1, 2}, floor: 1e-3, wantRel: 2, wantMaxA: 4},
		{name: "twice", sym: []float64{2, 4, 6}, num: []float64{1, 2, 3}, floor: 1e-3, wantRel: 0.5, wantMaxA: 3},
		{name: "symbolic zero", sym: []float64{0, 0}, num: []float64{3, 4}, floor: 1e-3, wantRel: 1, wantMaxA: 4},
		// Both tiny: judged against the floor, not against each other.
		{name: "below floor", sym: []float64{1e-9, 0}, num: []float64{0, 1e-9}, floor: 1e-3, wantRel: math.Sqrt2 * 1e-9 / 1e-3, wantMaxA: 1e-9},
	} {
		got := compareGrads("p", test.sym, test.num, test.floor)
		if got.Name != "p" || got.Size != len(test.sym) {
			t.Errorf("%s: name %q size %d", test.name, got.Name, got.Size)
		}
		if !closeTo(got.Rel, test.wantRel, 1e-12) {
			t.Errorf("%s: Rel = %v, want %v", test.name, got.Rel, test.wantRel)
		}
		if !closeTo(got.MaxAbs, test.wantMaxA, 1e-12) {
			t.Errorf("%s: MaxAbs = %v, want %v", test.name, got.MaxAbs, test.wantMaxA)
		}
		var nn float64
		for _, v := range test.num {
			nn += v * v
		}
		if !closeTo(got.Norm, math.Sqrt(nn), 1e-12) {
			t.Errorf("%s: Norm = %v, want %v", test.name, got.Norm, math.Sqrt(nn))
		}
	}
}

// wrongGrad is an op computing 2x whose symbolic gradient claims 3: a graph
// with a known wrong gradient, to show GradCheck fails when it should.
type wrongGrad struct{}

func (wrongGrad) Arity() int { return 1 }
func (wrongGrad) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}
func (wrongGrad) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}
func (wrongGrad) Do(vals ...G.Value) (G.Value, error) {
	in, ok := vals[0].(*tensor.Dense)
	if !ok {
		return nil, fmt.Errorf("wrongGrad: input is %T", vals[0])
	}
	return in.MulScalar(2.0, true)
}
func (wrongGrad) ReturnsPtr() bool      { return false }
func (wrongGrad) CallsExtern() bool     { return false }
func (wrongGrad) OverwritesInput() int  { return -1 }
func (wrongGrad) WriteHash(h hash.Hash) { fmt.Fprint(h, "qkv.test.wrongGrad") }
func (op wrongGrad) Hashcode() uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}
func (wrongGrad) String() string     { return "wrongGrad" }
func (wrongGrad) DiffWRT(int) []bool { return []bool{true} }
func (wrongGrad) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := G.Mul(grad, G.NewConstant(3.0))
	return G.Nodes{d}, err
}

func TestGradCheckDetectsWrongGradient(t *testing.T) {
	g := G.NewGraph()
	rng := newRand(81)
	good := param(g, tensor.Shape{2, 3}, uniform(rng, 6, -1, 1), "good")
	bad := param(g, tensor.Shape{2, 3}, uniform(rng, 6, -1, 1), "bad")
	y, err := G.ApplyOp(wrongGrad{}, bad.Node)
	if err != nil {
		t.Fatal(err)
	}
	s, err := G.Add(good.Node, y)
	if err != nil {
		t.Fatal(err)
	}
	cost := weightedSum(t, s, rng)
	report, err := GradCheck(cost, []Param{good, bad}, nil, GradCheckConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if report[0].Rel > 1e-6 {
		t.Errorf("correct parameter: Rel = %v\n%v", report[0].Rel, report)
	}
	// symbolic 3W, numerical 2W: ||W|| / ||3W|| = 1/3.
	if !closeTo(report[1].Rel, 1.0/3, 1e-6) {
		t.Errorf("parameter with a wrong gradient: Rel = %v, want 1/3\n%v", report[1].Rel, report)
	}
	if w := report.Worst(); w.Name != "bad" {
		t.Errorf("Worst() = %q, want %q", w.Name, "bad")
	}
	str := report.String()
	for _, want := range []string{"param", "rel", "good", "bad", "3.333e-01"} {
		if !strings.Contains(str, want) {
			t.Errorf("report table does not mention %q:\n%s", want, str)
		}
	}
}

func TestGradCheckErrors(t *testing.T) {
	g := G.NewGraph()
	rng := newRand(91)
	p := param(g, tensor.Shape{2, 3}, uniform(rng, 6, -1, 1), "p")
	unused := param(g, tensor.Shape{2}, uniform(rng, 2, -1, 1), "unused")
	cost := weightedSum(t, p.Node, rng)
	vector, err := G.Sum(p.Node, 1)
	if err != nil {
		t.Fatal(err)
	}
	noValue := Param{Name: "novalue", Node: G.NewMatrix(g, tensor.Float64, G.WithShape(2, 3), G.WithName("novalue"))}

	g32 := G.NewGraph()
	p32 := Param{Name: "p32", Node: G.NewMatrix(g32, tensor.Float32, G.WithShape(2, 3), G.WithName("p32"),
		G.WithValue(NewDense(tensor.Float32, tensor.Shape{2, 3}, uniform(rng, 6, -1, 1))))}
	cost32, err := G.Sum(p32.Node)
	if err != nil {
		t.Fatal(err)
	}

	for _, test := range []struct {
		name   string
		cost   *G.Node
		params []Param
		want   string
	}{
		{"float32 cost", cost32, []Param{p32}, "float64 scalar"},
		{"non-scalar cost", vector, []Param{p}, "float64 scalar"},
		{"no parameters", cost, nil, "no parameters"},
		{"parameter without a value", cost, []Param{noValue}, "has no value"},
		{"parameter not on the path", cost, []Param{p, unused}, "symbolic gradient"},
	} {
		report, err := GradCheck(test.cost, test.params, nil, GradCheckConfig{})
		if err == nil {
			t.Errorf("%s: no error, report\n%v", test.name, report)
		} else if !strings.Contains(err.Error(), test.want) {
			t.Errorf("%s: error %q does not mention %q", test.name, err, test.want)
		}
	}

	// A float32 parameter under a float64 cost.
	g = G.NewGraph()
	p32 = Param{Name: "p32", Node: G.NewMatrix(g, tensor.Float32, G.WithShape(2, 3), G.WithName("p32"),
		G.WithValue(NewDense(tensor.Float32, tensor.Shape{2, 3}, uniform(rng, 6, -1, 1))))}
	if _, err := GradCheck(G.NewScalar(g, tensor.Float64, G.WithName("c")), []Param{p32}, nil, GradCheckConfig{}); err == nil || !strings.Contains(err.Error(), "need float64") {
		t.Errorf("float32 parameter: error %v, want one about float64", err)
	}
}

// TestGradCheckProgress: Progress is called once per weight, in order, with
// the parameter being differenced and the total of all parameters.
func TestGradCheckProgress(t *testing.T) {
	g := G.NewGraph()
	rng := newRand(5)
	a := param(g, tensor.Shape{2, 3}, uniform(rng, 6, -1, 1), "a")
	b := param(g, tensor.Shape{3}, uniform(rng, 3, -1, 1), "b")
	ab, err := G.Mul(a.Node, b.Node)
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	_, err = GradCheck(weightedSum(t, ab, rng), []Param{a, b}, nil, GradCheckConfig{Progress: func(p string, done, total int) {
		calls = append(calls, fmt.Sprintf("%s %d/%d", p, done, total))
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a 1/9", "a 2/9", "a 3/9", "a 4/9", "a 5/9", "a 6/9", "b 7/9", "b 8/9", "b 9/9"}
	if fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Errorf("Progress calls %v, want %v", calls, want)
	}
}
