package graph

import (
	"fmt"
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// headScaleCases are the shapes HeadScale is tested on: 2-D and 3-D
// inputs, one head and several, a head of one feature.
var headScaleCases = []struct {
	shape tensor.Shape
	heads int
}{
	{tensor.Shape{3, 4}, 1},
	{tensor.Shape{2, 3, 6}, 3},
	{tensor.Shape{2, 5, 8}, 2},
	{tensor.Shape{1, 2, 4}, 4},
}

// TestHeadScaleMatchesLoops compares the op with the formula written as
// plain loops, in both dtypes.
func TestHeadScaleMatchesLoops(t *testing.T) {
	for ci, c := range headScaleCases {
		for _, dt := range floatTypes {
			rng := newRand(uint64(70 + ci))
			xs := roundTo(dt, uniform(rng, c.shape.TotalSize(), -2, 2))
			ss := roundTo(dt, uniform(rng, c.heads, 0.2, 3))
			g := G.NewGraph()
			x := valued(g, dt, c.shape, xs, "x")
			s := valued(g, dt, tensor.Shape{c.heads}, ss, "scale")
			y, err := HeadScale(x, s, c.heads)
			if err != nil {
				t.Fatal(err)
			}
			got := eval(t, nil, y)[0]
			dk := c.shape[len(c.shape)-1] / c.heads
			want := make([]float64, len(xs))
			for i, v := range xs {
				want[i] = v * ss[i/dk%c.heads]
			}
			checkClose(t, fmt.Sprintf("%v %v heads %d", dt, c.shape, c.heads), got, want, tolFor(dt))
		}
	}
}

// TestHeadScaleGradients checks dx and dscale against central finite
// differences (float64), alone and as the queries' temperature of an
// attention, where the scale reaches the loss through the softmax.
func TestHeadScaleGradients(t *testing.T) {
	check := func(name string, cost *G.Node, params ...Param) {
		t.Helper()
		rep, err := GradCheck(cost, params, nil, GradCheckConfig{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range rep {
			if e.Rel > 1e-7 || e.Norm < 1e-3 {
				t.Errorf("%s:\n%s", name, rep)
				break
			}
		}
	}
	for ci, c := range headScaleCases {
		rng := newRand(uint64(80 + ci))
		g := G.NewGraph()
		x := param(g, c.shape, uniform(rng, c.shape.TotalSize(), -2, 2), "x")
		s := param(g, tensor.Shape{c.heads}, uniform(rng, c.heads, 0.2, 3), "scale")
		y, err := HeadScale(x.Node, s.Node, c.heads)
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("%v heads %d", c.shape, c.heads), weightedSum(t, y, rng), x, s)
	}
	for _, impl := range []Impl{Composed, Fused, Flash} {
		const b, sq, heads, dk = 2, 5, 2, 3
		rng := newRand(89)
		g := G.NewGraph()
		q := param(g, tensor.Shape{b, sq, heads * dk}, uniform(rng, b*sq*heads*dk, -1, 1), "q")
		k := param(g, tensor.Shape{b, sq, heads * dk}, uniform(rng, b*sq*heads*dk, -1, 1), "k")
		s := param(g, tensor.Shape{heads}, []float64{0.5, 2}, "temperature")
		tq, err := HeadScale(q.Node, s.Node, heads)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := Attend(tq, k.Node, k.Node, Spec{Impl: impl, Heads: heads, MaskMod: Causal(), ScoreMod: must(Softcap(1.5))})
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("%s attention with tempered queries", impl), weightedSum(t, out, rng), q, k, s)
	}
}

// TestHeadScaleTempersScores: scaling head h's queries by t_h multiplies
// that head's scores by t_h, the softmax's temperature, so t_h = 0 makes
// the head's weights uniform over its visible keys and a large t_h makes
// them argmax-like; the other head is untouched.
func TestHeadScaleTempersScores(t *testing.T) {
	const b, s, heads, dk = 1, 4, 2, 2
	rng := newRand(91)
	g := G.NewGraph()
	q := valued(g, tensor.Float64, tensor.Shape{b, s, heads * dk}, uniform(rng, b*s*heads*dk, -1, 1), "q")
	k := valued(g, tensor.Float64, tensor.Shape{b, s, heads * dk}, uniform(rng, b*s*heads*dk, -1, 1), "k")
	temp := valued(g, tensor.Float64, tensor.Shape{heads}, []float64{0, 1}, "temperature")
	tq, err := HeadScale(q, temp, heads)
	if err != nil {
		t.Fatal(err)
	}
	_, tempered, err := Attend(tq, k, k, Spec{Heads: heads, MaskMod: Causal()})
	if err != nil {
		t.Fatal(err)
	}
	_, plain, err := Attend(q, k, k, Spec{Heads: heads, MaskMod: Causal()})
	if err != nil {
		t.Fatal(err)
	}
	got := eval(t, nil, tempered, plain)
	for i := 0; i < s; i++ {
		for j := 0; j <= i; j++ {
			if w := got[0][i*s+j]; math.Abs(w-1/float64(i+1)) > 1e-15 {
				t.Errorf("head 0 at temperature 0: weight (%d, %d) = %v, want uniform 1/%d", i, j, w, i+1)
			}
		}
	}
	checkClose(t, "head 1 at temperature 1", got[0][s*s:], got[1][s*s:], 1e-15)
}

// TestHeadScaleErrors: bad inputs are errors naming what is wrong.
func TestHeadScaleErrors(t *testing.T) {
	g := G.NewGraph()
	x := input(g, tensor.Float64, tensor.Shape{2, 3, 6}, "x")
	s3 := input(g, tensor.Float64, tensor.Shape{3}, "s3")
	s2 := input(g, tensor.Float64, tensor.Shape{2}, "s2")
	s32 := input(g, tensor.Float32, tensor.Shape{3}, "s32")
	vec := input(g, tensor.Float64, tensor.Shape{6}, "vec")
	for want, f := range map[string]func() error{
		"6 features, which 4 heads do not divide":     func() error { _, err := HeadScale(x, s3, 4); return err },
		`scale "s2" is float64 (2), want float64 (3)`: func() error { _, err := HeadScale(x, s2, 3); return err },
		`scale "s32" is float32 (3)`:                  func() error { _, err := HeadScale(x, s32, 3); return err },
		"input shape (6), want (..., heads*dk)":       func() error { _, err := HeadScale(vec, s3, 3); return err },
		"input is nil":                                func() error { _, err := HeadScale(nil, s3, 3); return err },
	} {
		err := noPanic(t, want, f)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}
