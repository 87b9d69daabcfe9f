package graph

import (
	"fmt"
	"testing"

	"gorgonia.org/tensor"
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
