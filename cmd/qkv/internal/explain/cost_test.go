package explain

import (
	"fmt"
	"testing"

	"github.com/qkv-dev/qkv/layers"
)

// Every implementation reports its time, CPU time and peak at every
// length, and its slopes; the fused peak grows with n. Times are not
// checked against each other: they are the experiment's output.
func TestQuadraticCostMeasures(t *testing.T) {
	r := mustRun(t, "quadratic-cost")
	sizes := costSizes(Options{Small: true})
	for _, impl := range costImpls {
		for _, n := range sizes[impl] {
			for _, name := range []string{"ms", "cpu_ms", "peak_bytes"} {
				key := fmt.Sprintf("%s_%s_n%d", impl, name, n)
				if v, ok := r.Measured[key]; !ok || v < 0 || name == "ms" && v == 0 {
					t.Errorf("%s = %v (reported %v)", key, v, ok)
				}
			}
		}
		for _, name := range []string{"time_slope", "wall_time_slope", "memory_slope"} {
			if _, ok := r.Measured[string(impl)+"_"+name]; !ok {
				t.Errorf("no %s_%s", impl, name)
			}
		}
	}
	if a, b := r.Measured["fused_peak_bytes_n64"], r.Measured["fused_peak_bytes_n128"]; b <= a {
		t.Errorf("fused heap peak %v bytes at n=128, not above %v at n=64", b, a)
	}
}

// The verdict follows the slopes: quadratic time and memory for the two
// implementations that form the weights, linear memory for flash; a cost
// linear in n, or flash memory growing as n², does not hold.
func TestQuadraticParts(t *testing.T) {
	good := map[layers.AttentionImpl]costSlopes{
		layers.AttentionComposed: {time: 2.1, memory: 1.9},
		layers.AttentionFused:    {time: 1.8, memory: 2},
		layers.AttentionFlash:    {time: 2, memory: 1},
	}
	if h, v := verdict(quadraticParts(good)...); !h {
		t.Errorf("quadratic slopes: %q", v)
	}
	for name, change := range map[string]func(map[layers.AttentionImpl]costSlopes){
		"linear time": func(s map[layers.AttentionImpl]costSlopes) { s[layers.AttentionFused] = costSlopes{time: 1, memory: 2} },
		"linear memory": func(s map[layers.AttentionImpl]costSlopes) {
			s[layers.AttentionComposed] = costSlopes{time: 2, memory: 1.1}
		},
		"cubic time": func(s map[layers.AttentionImpl]costSlopes) {
			s[layers.AttentionComposed] = costSlopes{time: 3, memory: 2}
		},
		"flash memory as n²":    func(s map[layers.AttentionImpl]costSlopes) { s[layers.AttentionFlash] = costSlopes{time: 2, memory: 2} },
		"nothing measured, NaN": func(s map[layers.AttentionImpl]costSlopes) { s[layers.AttentionFlash] = costSlopes{} },
	} {
		s := map[layers.AttentionImpl]costSlopes{}
		for k, v := range good {
			s[k] = v
		}
		change(s)
		if h, v := verdict(quadraticParts(s)...); h || v != HoldsInPart {
			t.Errorf("%s: verdict %q, want %q", name, v, HoldsInPart)
		}
	}
}

// The parameters are 4 (D, D) float32 matrices; fused attention keeps the
// weights and their gradient, 2·B·H·n² floats, and composed a whole number
// of (B, H, n, n) tensors, more of them.
func TestMemoryPeakMeasures(t *testing.T) {
	r := mustRun(t, "memory-peak")
	c := costLayer(Options{Small: true}, "", 1, 1)
	d := c.Heads * c.HeadDim
	if got, want := r.Measured["param_bytes"], float64(4*d*d*4); got != want {
		t.Errorf("param_bytes %v, want 4·D²·4 = %v", got, want)
	}
	sizes := peakSizes(Options{Small: true})
	for _, n := range sizes[layers.AttentionFused] {
		w := float64(c.Batch * c.Heads * n * n * 4)
		if got := r.Measured[fmt.Sprintf("fused_square_bytes_n%d", n)]; got != 2*w {
			t.Errorf("fused n=%d: (n, n) bytes %v, want 2·B·H·n²·4 = %v", n, got, 2*w)
		}
		if got := r.Measured[fmt.Sprintf("fused_square_tensors_n%d", n)]; got != 2 {
			t.Errorf("fused n=%d: %v (B, H, n, n) tensors, want 2", n, got)
		}
		if p := r.Measured[fmt.Sprintf("fused_peak_bytes_n%d", n)]; p < 2*w {
			t.Errorf("fused n=%d: heap peak %v below the %v bytes the graph holds", n, p, 2*w)
		}
	}
	for _, n := range sizes[layers.AttentionComposed] {
		k := r.Measured[fmt.Sprintf("composed_square_tensors_n%d", n)]
		if k <= 2 || k != float64(int(k)) {
			t.Errorf("composed n=%d: %v (B, H, n, n) tensors, want a whole number above fused's 2", n, k)
		}
	}
	for _, name := range []string{"param_share_of_peak", "square_share_of_held"} {
		for _, impl := range []string{"fused", "composed"} {
			if v, ok := r.Measured[impl+"_"+name]; !ok || v <= 0 || v > 1 {
				t.Errorf("%s_%s = %v (reported %v), want in (0, 1]", impl, name, v, ok)
			}
		}
	}
}

// A peak the parameters take a large part of, or that the (n, n) tensors
// do not, is not the attention matrices' peak.
func TestPeakDominated(t *testing.T) {
	good := peakBreakdown{params: 64 << 10, square: 128 << 20, other: 8 << 20, peak: 400 << 20}
	if !peakDominated(good) {
		t.Errorf("%+v: not dominated by the (n, n) tensors", good)
	}
	for name, b := range map[string]peakBreakdown{
		"parameters 10% of the peak":  {params: 40 << 20, square: 128 << 20, other: 8 << 20, peak: 400 << 20},
		"activations held dominate":   {params: 64 << 10, square: 8 << 20, other: 128 << 20, peak: 400 << 20},
		"(n, n) a sliver of the peak": {params: 64 << 10, square: 8 << 20, other: 1 << 20, peak: 400 << 20},
		"nothing measured":            {},
	} {
		if peakDominated(b) {
			t.Errorf("%s: %+v counted as dominated by the (n, n) tensors", name, b)
		}
	}
}
