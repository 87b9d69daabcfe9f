package explain

import (
	"math"
	"testing"
)

// B=2, S=4, D=8: projections 4·2·2·4·64 = 4096, scores and weights·V
// 2·2·16·8 = 512 each, softmax 6·2·H·16 = 192·H.
func TestAttentionFLOPs(t *testing.T) {
	for _, h := range []int{1, 2, 4} {
		f := attentionFLOPs(2, 4, 8, h)
		want := attnFLOPs{Proj: 4096, Scores: 512, Mix: 512, Softmax: 192 * float64(h)}
		if f != want {
			t.Errorf("H=%d: %+v, want %+v", h, f, want)
		}
		if got := f.Total(); got != 4096+1024+192*float64(h) {
			t.Errorf("H=%d: total %v", h, got)
		}
	}
}

// maps builds one layer of the given heads' rows.
func oneLayer(heads ...[][]float64) [][][][]float64 { return [][][][]float64{heads} }

// Uniform rows over n keys have entropy log n, one-hot rows 0; a head that
// attends to the previous token has distance 1 (0 for query 0, which can
// only see itself), one that attends to itself 0.
func TestHeadEntropyAndDistance(t *testing.T) {
	uniform := [][]float64{{0.25, 0.25, 0.25, 0.25}, {0.25, 0.25, 0.25, 0.25}}
	self := [][]float64{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}
	prev := [][]float64{{1, 0, 0}, {1, 0, 0}, {0, 1, 0}}
	causalUniform := [][]float64{{1, 0, 0}, {0.5, 0.5, 0}, {1.0 / 3, 1.0 / 3, 1.0 / 3}}
	e := headEntropy(oneLayer(uniform, self, prev, causalUniform))[0]
	wantE := []float64{math.Log(4), 0, 0, (0 + math.Log(2) + math.Log(3)) / 3}
	for h := range wantE {
		if math.Abs(e[h]-wantE[h]) > 1e-12 {
			t.Errorf("entropy of head %d = %v, want %v", h, e[h], wantE[h])
		}
	}
	d := headDistance(oneLayer(uniform, self, prev, causalUniform))[0]
	// uniform over 4 keys: query 0 mean |0−j| = 1.5, query 1 (1+0+1+2)/4 = 1.
	// causal uniform: query 1 0.5, query 2 (2+1+0)/3 = 1.
	wantD := []float64{1.25, 0, 2.0 / 3, 0.5}
	for h := range wantD {
		if math.Abs(d[h]-wantD[h]) > 1e-12 {
			t.Errorf("distance of head %d = %v, want %v", h, d[h], wantD[h])
		}
	}
	// Heads alike: 0. Self against previous: rows 1 and 2 disjoint (1),
	// row 0 alike (0): 2/3. Three heads: pairs (self, prev) 2/3,
	// (self, self) 0, (prev, self) 2/3: 4/9.
	tv := headsTV([][][][]float64{{self, self}, {self, prev}, {self, prev, self}})
	for l, want := range []float64{0, 2.0 / 3, 4.0 / 9} {
		if math.Abs(tv[l]-want) > 1e-12 {
			t.Errorf("total variation of layer %d = %v, want %v", l, tv[l], want)
		}
	}
	if got := spread([]float64{0.5, 2, 1}); got != 1.5 {
		t.Errorf("spread = %v, want 1.5", got)
	}
}

// The claim at small size produces its every measurement; timing is not
// asserted, the FLOP ratios are, being counted.
func TestMultiheadCost(t *testing.T) {
	r := mustRun(t, "multihead-cost")
	for _, h := range []int{1, 2, 4, 8} {
		for _, name := range []string{"flops_ratio_h", "time_ratio_h", "time_ms_h"} {
			if _, ok := r.Measured[name+itoa(float64(h))]; !ok {
				t.Errorf("no %s%d", name, h)
			}
		}
	}
	// D=32, S=32: the softmax adds 6·H·S² to 8·S·D² + 4·S²·D per row.
	want := (8*32*32*32 + 4*32*32*32 + 6*8*32*32) / float64(8*32*32*32+4*32*32*32+6*32*32)
	if got := r.Measured["flops_ratio_h8"]; math.Abs(got-want) > 1e-12 {
		t.Errorf("FLOP ratio at H=8 = %v, want %v", got, want)
	}
	for _, name := range []string{"entropy_l0_h0", "distance_l1_h3", "entropy_spread_l0", "distance_spread_l1", "exact_match"} {
		if _, ok := r.Measured[name]; !ok {
			t.Errorf("no %s", name)
		}
	}
}
