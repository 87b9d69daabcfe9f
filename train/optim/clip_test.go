package optim

import (
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
)

// optClipParams returns two parameters whose gradients are set to ga and gb.
func optClipParams(t *testing.T, dt tensor.Dtype, ga, gb []float64) []graph.Param {
	t.Helper()
	params := optParams(t, dt,
		optSpec{"a", []int{len(ga)}, make([]float64, len(ga))},
		optSpec{"b", []int{1, len(gb)}, make([]float64, len(gb))})
	optSetGrad(t, params[0], ga)
	optSetGrad(t, params[1], gb)
	return params
}

// optNorm is the reference global L2 norm, written out in plain Go.
func optNorm(gs ...[]float64) float64 {
	var s float64
	for _, g := range gs {
		for _, x := range g {
			s += x * x
		}
	}
	return math.Sqrt(s)
}

func TestGradNorm(t *testing.T) {
	cases := []struct {
		name   string
		dt     tensor.Dtype
		ga, gb []float64
		want   float64
		rel    float64
	}{
		{"3-4-12 float64", tensor.Float64, []float64{3, 4}, []float64{12}, 13, 0},
		{"3-4-12 float32", tensor.Float32, []float64{3, 4}, []float64{12}, 13, 0},
		{"zeros", tensor.Float64, []float64{0, 0}, []float64{0}, 0, 0},
		{"mixed", tensor.Float64, []float64{0.1, -0.2, 0.3}, []float64{-1.5, 2.25}, optNorm([]float64{0.1, -0.2, 0.3}, []float64{-1.5, 2.25}), 1e-15},
		// Squares overflow float64; the norm must not.
		{"huge float64", tensor.Float64, []float64{1e200, -1e200}, []float64{1e200, 1e200}, 2e200, 1e-15},
		// Squares underflow to 0; the norm must not.
		{"tiny float64", tensor.Float64, []float64{3e-200, 0}, []float64{-4e-200}, 5e-200, 1e-15},
		{"float32 max", tensor.Float32, []float64{math.MaxFloat32, math.MaxFloat32}, []float64{0}, math.MaxFloat32 * math.Sqrt2, 1e-15},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			params := optClipParams(t, tc.dt, tc.ga, tc.gb)
			got, err := GradNorm(params)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(got-tc.want) > tc.rel*tc.want {
				t.Errorf("GradNorm = %.17g, want %.17g", got, tc.want)
			}
		})
	}
}

func TestGradNormNonFinite(t *testing.T) {
	cases := []struct {
		name   string
		ga, gb []float64
		isNaN  bool
	}{
		{"NaN", []float64{1, math.NaN()}, []float64{2}, true},
		{"+Inf", []float64{1, math.Inf(1)}, []float64{2}, false},
		{"-Inf", []float64{1, 2}, []float64{math.Inf(-1)}, false},
		{"Inf and NaN", []float64{math.Inf(1), 2}, []float64{math.NaN()}, true},
	}
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		for _, tc := range cases {
			t.Run(dt.String()+" "+tc.name, func(t *testing.T) {
				params := optClipParams(t, dt, tc.ga, tc.gb)
				norm, err := GradNorm(params)
				if err != nil {
					t.Fatal(err)
				}
				if tc.isNaN != math.IsNaN(norm) || (!tc.isNaN && !math.IsInf(norm, 1)) {
					t.Fatalf("GradNorm = %v, want NaN %v / +Inf", norm, tc.isNaN)
				}
				before := append(optGrads(t, params[0]), optGrads(t, params[1])...)
				clipped, err := ClipGradNorm(params, 1)
				if err != nil {
					t.Fatal(err)
				}
				if math.IsNaN(clipped) != math.IsNaN(norm) || (!math.IsNaN(norm) && clipped != norm) {
					t.Errorf("ClipGradNorm returned %v, GradNorm %v", clipped, norm)
				}
				after := append(optGrads(t, params[0]), optGrads(t, params[1])...)
				for j := range before {
					if math.Float64bits(before[j]) != math.Float64bits(after[j]) {
						t.Errorf("gradient element %d changed from %v to %v", j, before[j], after[j])
					}
				}
			})
		}
	}
}

func TestClipGradNorm(t *testing.T) {
	ga, gb := []float64{3, -4, 0.5}, []float64{12, -0.25}
	norm := optNorm(ga, gb)
	cases := []struct {
		name    string
		dt      tensor.Dtype
		maxNorm float64
		clipped bool
		tol     float64 // on the norm after clipping, relative to maxNorm
	}{
		{"clips float64", tensor.Float64, 1, true, 1e-12},
		{"clips float64 to 5", tensor.Float64, 5, true, 1e-12},
		{"clips float32", tensor.Float32, 1, true, 1e-6},
		{"small gradients untouched", tensor.Float64, 20, false, 0},
		{"norm equal to max untouched", tensor.Float64, norm, false, 0},
		{"+Inf never clips", tensor.Float64, math.Inf(1), false, 0},
		{"small float32 untouched", tensor.Float32, 100, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			params := optClipParams(t, tc.dt, ga, gb)
			before := [][]float64{optGrads(t, params[0]), optGrads(t, params[1])}
			pre, err := ClipGradNorm(params, tc.maxNorm)
			if err != nil {
				t.Fatal(err)
			}
			if want := optNorm(before...); math.Abs(pre-want) > 1e-15*want {
				t.Errorf("returned norm %.17g, want the pre-clip norm %.17g", pre, want)
			}
			after := [][]float64{optGrads(t, params[0]), optGrads(t, params[1])}
			post := optNorm(after...)
			if !tc.clipped {
				for i := range before {
					for j := range before[i] {
						if math.Float64bits(before[i][j]) != math.Float64bits(after[i][j]) {
							t.Fatalf("gradient %d[%d] changed from %v to %v", i, j, before[i][j], after[i][j])
						}
					}
				}
				return
			}
			if math.Abs(post-tc.maxNorm) > tc.tol*tc.maxNorm {
				t.Errorf("norm after clipping = %.17g, want %v", post, tc.maxNorm)
			}
			// Global clipping scales every gradient by the same factor,
			// keeping the direction.
			scale := tc.maxNorm / optNorm(before...)
			for i := range before {
				for j := range before[i] {
					if want := before[i][j] * scale; math.Abs(after[i][j]-want) > tc.tol*math.Max(math.Abs(want), 1) {
						t.Errorf("gradient %d[%d] = %v, want %v", i, j, after[i][j], want)
					}
				}
			}
		})
	}
}

func TestClipGradNormErrors(t *testing.T) {
	params := optClipParams(t, tensor.Float64, []float64{1}, []float64{2})
	for _, maxNorm := range []float64{0, -1, math.NaN(), math.Inf(-1)} {
		if _, err := ClipGradNorm(params, maxNorm); err == nil || !strings.HasPrefix(err.Error(), "optim: clip: max norm") {
			t.Errorf("ClipGradNorm(max %v) error = %v", maxNorm, err)
		}
	}
	g := G.NewGraph()
	unbound := graph.Param{Name: "loose", Node: G.NewTensor(g, tensor.Float64, 1, G.WithShape(2), G.WithName("loose"),
		G.WithValue(graph.NewDense(tensor.Float64, []int{2}, []float64{1, 2})))}
	withLoose := append(params[:1:1], unbound)
	if _, err := GradNorm(withLoose); err == nil || !strings.Contains(err.Error(), `"loose" has no gradient`) {
		t.Errorf("GradNorm without a gradient: %v", err)
	}
	if _, err := ClipGradNorm(withLoose, 1); err == nil || !strings.Contains(err.Error(), `"loose"`) {
		t.Errorf("ClipGradNorm without a gradient: %v", err)
	}
	if err := ZeroGrads(withLoose); err == nil || !strings.Contains(err.Error(), `"loose"`) {
		t.Errorf("ZeroGrads without a gradient: %v", err)
	}
}
