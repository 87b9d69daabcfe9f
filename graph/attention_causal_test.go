package graph

import (
	"fmt"
	"math"
	"testing"

	"gorgonia.org/tensor"

	fastgemm "github.com/qkv-dev/qkv/internal/gemm"
)

// TestFusedCausalBlocks: the fused op under the Causal modifier, which cuts
// rows of at least causalMinRows keys into blocks that multiply only the
// keys they see (causalBlocks), gives the outputs and gradients of the fused
// op that computes every key and hides the future through the mask tensor:
// lengths below, at and above the cut, one that leaves a block of a single
// row, with and without key padding, in float64 and float32.
func TestFusedCausalBlocks(t *testing.T) {
	pad := func(b, i, j int) bool { return j >= []int{1000, 97}[b] }
	for _, n := range []int{65, causalMinRows - 1, causalMinRows, causalMinRows + 1, 200} {
		for _, hide := range []func(b, i, j int) bool{nil, pad} {
			c := flashCase{b: 2, sq: n, sk: n, heads: 2, dk: 4, causal: true, hide: hide}
			in := newFlashInputs(c, uint64(n), 2)
			for _, dt := range floatTypes {
				name := fmt.Sprintf("n=%d padded=%t %v", n, hide != nil, dt)
				wantOut, wantGrads := runAttentionImpl(t, dt, c, in, fusedByTensor, 0)
				out, grads := runAttentionImpl(t, dt, c, in, fusedByMod, 0)
				tol := 1e-12
				if dt == tensor.Float32 {
					tol = 1e-5
				}
				checkClose(t, name+": output", out, wantOut, tol)
				for i, wrt := range []string{"q", "k", "v"} {
					checkClose(t, name+": d"+wrt, grads[i], wantGrads[i], tol)
				}
			}
		}
	}
}

// TestFusedCausalPairs: on any kernels the six products compute at least
// the visible pairs, n(n+1)/2 each, and at most those of causalBlocks'
// blocks; with no kernels all of them. On AVX-512's 12x32 float32 tiles at
// n = 65 (one block, row panels of 12 rows, the last of 5): S and dP
// compute the column panels of 32 that reach each panel's last row,
// 12·32·2 + 12·64·3 + 5·65 = 3397 pairs; O and dQ each row panel's keys up
// to its last row, 12·(12+24+36+48+60) + 5·65 = 2485; dV and dK, by panels
// of 12 keys, the queries from the panel's first key, 12·(65+53+41+29+17)
// + 5·5 = 2485. So 2·3397 + 4·2485 = 16734, against 6·65² = 25350.
func TestFusedCausalPairs(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for _, n := range []int{1, 13, 65, causalMinRows, causalMinRows + 1, 300} {
			got := FusedCausalPairs(n, dt)
			var blocks float64
			for r := range causalBlocks(n, n, true) {
				blocks += float64((r.i1 - r.i0) * r.keys)
			}
			if visible := float64(n * (n + 1) / 2); got < 6*visible || got > 6*blocks {
				t.Errorf("%v, n %d: %v pairs, want between 6 x %v visible and 6 x %v in the blocks", dt, n, got, visible, blocks)
			}
			if fastgemm.Kernels() == "gonum" && got != 6*blocks {
				t.Errorf("%v, n %d, no kernels: %v pairs, want all 6 x %v of the blocks", dt, n, got, blocks)
			}
		}
	}
	if fastgemm.Kernels() == "AVX-512 assembly (12x32)" {
		if got := FusedCausalPairs(65, tensor.Float32); got != 16734 {
			t.Errorf("AVX-512, float32, n 65: %v pairs, want 16734", got)
		}
	}
}

// TestGradPZeroPastKeys: the weights' gradient under the Causal modifier
// alone is 0 past each causal block's keys at every run, though the op
// writes there only when its output is allocated (zero), not at each run:
// nothing else writes those entries.
func TestGradPZeroPastKeys(t *testing.T) {
	const b, n, heads, dk = 2, causalMinRows + 9, 2, 4
	d := attnDims{B: b, Sq: n, Sk: n, D: heads * dk, H: heads, KV: heads, Causal: true}
	op := attentionOp{dims: d, out: attnGradP, buf: new(output)}
	rng := newRand(7)
	shape := tensor.Shape{b, n, heads * dk}
	dout := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(uniform(rng, shape.TotalSize(), -1, 1)))
	v := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(uniform(rng, shape.TotalSize(), -1, 1)))
	var first []float64
	for run := range 2 {
		got, err := op.Do(dout, v)
		if err != nil {
			t.Fatal(err)
		}
		dp := got.(*tensor.Dense).Float64s()
		for blk := 0; blk < b*heads; blk++ {
			for i := range n {
				for j := blockKeys(i, n, n); j < n; j++ {
					if x := dp[(blk*n+i)*n+j]; x != 0 {
						t.Fatalf("run %d: dP[%d][%d, %d] = %v past the block's keys, want 0", run, blk, i, j, x)
					}
				}
			}
		}
		if run == 0 {
			first = append([]float64(nil), dp...)
			continue
		}
		for i := range dp {
			if dp[i] != first[i] {
				t.Fatalf("dP[%d] = %v at the second run, %v at the first", i, dp[i], first[i])
			}
		}
	}
}

// TestSoftmaxRowsInGroups: softmaxHead and softmaxCausal, which hand their
// rows to softmaxRows rowGroupSize at a time, give each row the bits that
// softmaxRows gives it alone, for row counts around the group's size, with
// rows that see nothing (all -Inf) among others and with and without a
// sink, in float32 and float64. A group that dropped its last rows, or
// used another row's max or sum, fails it.
func TestSoftmaxRowsInGroups(t *testing.T) {
	t.Run("float32", func(t *testing.T) { testSoftmaxRowsInGroups[float32](t) })
	t.Run("float64", func(t *testing.T) { testSoftmaxRowsInGroups[float64](t) })
}

func testSoftmaxRowsInGroups[T float32 | float64](t *testing.T) {
	rng := newRand(5)
	const n = 19
	for _, rows := range []int{1, rowGroupSize - 1, rowGroupSize, rowGroupSize + 1, 3*rowGroupSize + 5} {
		for _, sink := range []float64{math.Inf(-1), 0.5} {
			for _, causal := range []bool{false, true} {
				s := make([]T, rows*n)
				for i, v := range uniform(rng, rows*n, -4, 4) {
					s[i] = T(v)
				}
				for j := range n { // row 2 sees nothing
					if 2*n+j < len(s) {
						s[2*n+j] = T(math.Inf(-1))
					}
				}
				want := append([]T(nil), s...)
				for i := range rows {
					row := want[i*n : (i+1)*n]
					if causal {
						v := causalSpan(i, n)
						for j := i + 1; j < v; j++ {
							row[j] = T(math.Inf(-1))
						}
						clear(row[v:])
						row = row[:v]
					}
					softmaxRows([][]T{row}, sink)
				}
				if causal {
					softmaxCausal(s, nil, nil, sink, n)
				} else {
					softmaxHead(s, nil, nil, sink, n)
				}
				for i := range s {
					if s[i] != want[i] {
						t.Fatalf("%d rows, sink %v, causal %t: [%d][%d] = %v, want %v", rows, sink, causal, i/n, i%n, s[i], want[i])
					}
				}
			}
		}
	}
}

// BenchmarkFusedCausalPreset times one forward and backward pass of the
// fused attention under the Causal modifier at the nanoGPT preset's sizes
// (B 12, 65 positions, H 4, dk 32, float32): the attention of one of its
// layers (go test ./graph -run X -bench FusedCausalPreset -cpu 1).
func BenchmarkFusedCausalPreset(b *testing.B) {
	benchAttentionBatch(b, 12, 65, Spec{Impl: Fused, MaskMod: Causal()})
}
