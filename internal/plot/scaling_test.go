package plot

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSlope(t *testing.T) {
	n := []float64{128, 256, 512, 1024}
	for _, c := range []struct {
		name string
		f    func(float64) float64
		want float64
	}{
		{"quadratic", func(x float64) float64 { return 3 * x * x }, 2},
		{"linear", func(x float64) float64 { return x / 7 }, 1},
		{"constant", func(float64) float64 { return 5 }, 0},
	} {
		y := make([]float64, len(n))
		for i, x := range n {
			y[i] = c.f(x)
		}
		if got := Slope(n, y); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: slope %v, want %v", c.name, got, c.want)
		}
	}
}

func TestScaling(t *testing.T) {
	path := filepath.Join(t.TempDir(), "scaling.png")
	series := []ScalingSeries{
		{Name: "fused", N: []float64{128, 256, 512}, Ms: []float64{1, 4, 16}, Bytes: []float64{1 << 20, 4 << 20, 16 << 20}},
		{Name: "flash", N: []float64{128, 256, 512}, Ms: []float64{1, 3.5, 14}, Bytes: []float64{1 << 20, 2 << 20, 4 << 20}},
	}
	if err := Scaling(path, "attention", series); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("no PNG written: %v", err)
	}
	for _, c := range []struct {
		name   string
		series []ScalingSeries
		want   string
	}{
		{"no series", nil, "no series"},
		{"lengths", []ScalingSeries{{Name: "x", N: []float64{1, 2}, Ms: []float64{1}, Bytes: []float64{1, 2}}}, `series "x": 2 lengths, 1 times`},
		{"zero", []ScalingSeries{{Name: "x", N: []float64{1}, Ms: []float64{0}, Bytes: []float64{1}}}, "not positive"},
		{"NaN", []ScalingSeries{{Name: "x", N: []float64{1}, Ms: []float64{math.NaN()}, Bytes: []float64{1}}}, "not positive"},
	} {
		err := Scaling(path, "t", c.series)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

func TestCrossAttention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cross.png")
	maps := []AttentionMap{{Layer: 0, Head: 0, Weights: [][]float64{{0.2, 0.3, 0.5}, {1, 0, 0}}}, {Layer: 0, Head: 1, Weights: [][]float64{{0, 0, 1}, {0.5, 0.5, 0}}}}
	if err := CrossAttention(path, "cross", []string{"_", "a"}, []string{"x", "y", "z"}, maps); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("no PNG: %v", err)
	}
	// Square maps are not cross maps of these sizes.
	if err := CrossAttention(path, "cross", []string{"_", "a"}, []string{"x", "y"}, maps); err == nil || !strings.Contains(err.Error(), "has 3 keys, want 2") {
		t.Errorf("mismatched keys: %v", err)
	}
}

// TestScalingAxesLabelled: whatever lengths a sweep covers (--seq), the
// length axis is labelled at two powers of two at least, and the time and
// memory axes at three decades or 1-2-5 steps at least. The old
// plot.LogTicks labelled 128..8192 only at 1000 and 128..512 not at all.
func TestScalingAxesLabelled(t *testing.T) {
	for _, seqs := range [][]float64{
		{128, 256, 512, 1024, 2048, 4096, 8192},
		{128, 256, 512, 1024, 2048},
		{128, 256, 512},
		{128, 256},
		{64, 65536},
		{100, 200, 300}, // not powers of two: labelled like any log axis
		{300, 400, 500},
	} {
		s := ScalingSeries{Name: "fused"}
		for _, n := range seqs {
			s.N = append(s.N, n)
			s.Ms = append(s.Ms, 1.4*n*n/(128*128))
			s.Bytes = append(s.Bytes, 3<<20*n/128)
		}
		panels, err := scalingPanels([]ScalingSeries{s})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range panels {
			what := fmt.Sprintf("%s, n %v", p.Title.Text, seqs)
			xs := checkLabels(t, what+": x", p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max), p.X.Min, p.X.Max, 2, func(v float64) float64 { return v })
			powers := 0
			for e := math.Ceil(math.Log2(seqs[0])); math.Exp2(e) <= seqs[len(seqs)-1]; e++ {
				powers++
			}
			for _, x := range xs {
				if _, e := math.Frexp(x); powers >= 2 && x != math.Ldexp(0.5, e) {
					t.Errorf("%s: x label at %g, not a power of two", what, x)
				}
			}
			if why := onNiceGrid(xs); len(xs) >= 2 && powers < 2 && why != "" {
				t.Errorf("%s: x labels %v: %s", what, xs, why)
			}
			ys := checkLabels(t, what+": y", p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max), p.Y.Min, p.Y.Max, 3, func(v float64) float64 { return v })
			if why := onNiceGrid(ys); len(ys) >= 2 && why != "" {
				t.Errorf("%s: y labels %v: %s", what, ys, why)
			}
		}
	}
}
