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
