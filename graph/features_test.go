package graph

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// featureRef is φ of one head's features x, in plain float64.
func featureRef(f FeatureMap, x []float64) []float64 {
	d := float64(len(x))
	var y []float64
	switch f {
	case FeatureELU1:
		for _, v := range x {
			if v > 0 {
				y = append(y, v+1)
			} else {
				y = append(y, math.Exp(v)) // elu(v) + 1 = (exp(v) - 1) + 1
			}
		}
	case FeatureReLU:
		for _, v := range x {
			y = append(y, math.Max(v, 0))
		}
	case FeatureTaylor: // based.py: cat([1, x / sqrt(sqrt(d)), flatten(x x^T) / sqrt(2) / sqrt(d)])
		y = append(y, 1)
		for _, v := range x {
			y = append(y, v/math.Sqrt(math.Sqrt(d)))
		}
		for _, a := range x {
			for _, b := range x {
				y = append(y, a*b/math.Sqrt2/math.Sqrt(d))
			}
		}
	case FeatureIdentity:
		y = append(y, x...)
	}
	return y
}

var featureMaps = []FeatureMap{FeatureELU1, FeatureReLU, FeatureTaylor, FeatureIdentity}

// TestFeaturesMatchLoops compares each map with the formula, per head, in
// both dtypes, on 2-D and 3-D inputs.
func TestFeaturesMatchLoops(t *testing.T) {
	for _, f := range featureMaps {
		for _, c := range []struct {
			shape tensor.Shape
			heads int
		}{{tensor.Shape{3, 4}, 1}, {tensor.Shape{2, 3, 6}, 2}, {tensor.Shape{2, 70, 6}, 3}} {
			for _, dt := range floatTypes {
				rng := newRand(31)
				xs := roundTo(dt, uniform(rng, c.shape.TotalSize(), -2, 2))
				g := G.NewGraph()
				y, err := Features(valued(g, dt, c.shape, xs, "x"), c.heads, f)
				if err != nil {
					t.Fatal(err)
				}
				d := c.shape[len(c.shape)-1] / c.heads
				wantShape := c.shape.Clone()
				wantShape[len(wantShape)-1] = c.heads * f.Dim(d)
				if !y.Shape().Eq(wantShape) {
					t.Fatalf("%s %v: shape %v, want %v", f, c.shape, y.Shape(), wantShape)
				}
				var want []float64
				for h := 0; h*d < len(xs); h++ {
					want = append(want, featureRef(f, xs[h*d:(h+1)*d])...)
				}
				checkClose(t, fmt.Sprintf("%s %v %v", f, c.shape, dt), eval(t, nil, y)[0], want, tolFor(dt))
			}
		}
	}
}

// TestFeaturesTaylorKernel: φ(q)·φ(k) = 1 + s + s²/2, s = q·k/sqrt(d),
// the second-order Taylor series of exp(s) that Based approximates the
// softmax with.
func TestFeaturesTaylorKernel(t *testing.T) {
	const d = 5
	rng := newRand(37)
	for range 10 {
		q, k := uniform(rng, d, -2, 2), uniform(rng, d, -2, 2)
		fq, fk := featureRef(FeatureTaylor, q), featureRef(FeatureTaylor, k)
		var s, got float64
		for i := range q {
			s += q[i] * k[i]
		}
		s /= math.Sqrt(d)
		for i := range fq {
			got += fq[i] * fk[i]
		}
		if want := 1 + s + s*s/2; !closeTo(got, want, 1e-13) {
			t.Errorf("φ(q)·φ(k) = %v, want 1 + s + s²/2 = %v", got, want)
		}
	}
	if FeatureTaylor.Dim(16) != 273 || FeatureELU1.Dim(16) != 16 || FeatureIdentity.Dim(3) != 3 {
		t.Errorf("Dim: taylor(16) = %d, elu1(16) = %d, identity(3) = %d", FeatureTaylor.Dim(16), FeatureELU1.Dim(16), FeatureIdentity.Dim(3))
	}
}

// TestFeaturesGradients checks each map's gradient against central finite
// differences (float64).
func TestFeaturesGradients(t *testing.T) {
	for _, f := range featureMaps {
		for _, c := range []struct {
			shape tensor.Shape
			heads int
		}{{tensor.Shape{3, 4}, 1}, {tensor.Shape{2, 3, 6}, 2}} {
			rng := newRand(41)
			g := G.NewGraph()
			x := param(g, c.shape, uniform(rng, c.shape.TotalSize(), -2, 2), "x")
			y, err := Features(x.Node, c.heads, f)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := GradCheck(weightedSum(t, y, rng), []Param{x}, nil, GradCheckConfig{})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range rep {
				if e.Rel > 1e-7 || e.Norm < 1e-3 {
					t.Errorf("%s %v heads %d:\n%s", f, c.shape, c.heads, rep)
				}
			}
		}
	}
}

// TestFeaturesErrors: bad input is an error naming it, never a panic.
func TestFeaturesErrors(t *testing.T) {
	g := G.NewGraph()
	x := input(g, tensor.Float64, tensor.Shape{2, 3, 6}, "x")
	for _, c := range []struct {
		name  string
		x     *G.Node
		heads int
		f     FeatureMap
		want  string
		shape bool
	}{
		{"nil", nil, 2, FeatureELU1, "input is nil", false},
		{"zero node", new(G.Node), 2, FeatureELU1, "zero-value node", false},
		{"unknown map", x, 2, "softmax", `unknown feature map "softmax"`, false},
		{"empty map", x, 2, "", `unknown feature map ""`, false},
		{"heads", x, 4, FeatureTaylor, "4 heads do not divide", true},
		{"no heads", x, 0, FeatureReLU, "0 heads do not divide", true},
		{"dtype", input(g, tensor.Int, tensor.Shape{2, 6}, "ints"), 2, FeatureReLU, "not supported", false},
		{"scalar", G.NewScalar(g, tensor.Float64, G.WithName("s")), 1, FeatureReLU, "scalar", true},
		{"too wide", input(g, tensor.Float32, tensor.Shape{1, 50000}, "wide"), 1, FeatureTaylor, "graph.MaxElements", false},
	} {
		err := noPanic(t, c.name, func() error { _, err := Features(c.x, c.heads, c.f); return err })
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "features") {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
			continue
		}
		if c.shape != errors.Is(err, ErrShape) {
			t.Errorf("%s: errors.Is(%v, ErrShape) = %v", c.name, err, !c.shape)
		}
	}
	for _, f := range featureMaps {
		if !f.Valid() {
			t.Errorf("%q is not Valid", f)
		}
	}
	if FeatureMap("ELU1").Valid() {
		t.Error(`"ELU1" is Valid: names are lower case, as config.json's`)
	}
}
