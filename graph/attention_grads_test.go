package graph

import (
	"fmt"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestAttentionGradsOfQAndK: the Machine forms the fused attention's
// gradients of q and k in one op where every query head has its own KV
// head, with dP and v's gradient where their other inputs come before dP
// (gradPQKOp), else after dP (gradQKOp), and the gradients of q, k, v and
// the weights (dP) equal gorgonia's tape machine's exactly: causal, with a
// score modifier (whose derivative is computed after dP), and
// grouped-query attention (not fused), in float32 and float64.
func TestAttentionGradsOfQAndK(t *testing.T) {
	softcap, err := Softcap(2)
	if err != nil {
		t.Fatal(err)
	}
	for _, dt := range floatTypes {
		for _, c := range []struct {
			name     string
			spec     Spec
			kvHeads  int
			wantPQK  bool // gradPQKOp, else gradQKOp
			wantFuse int
		}{
			{"causal", Spec{Heads: 2, MaskMod: Causal()}, 2, true, 1},
			{"softcap", Spec{Heads: 2, MaskMod: Causal(), ScoreMod: softcap}, 2, false, 1},
			{"gqa", Spec{Heads: 2, KVHeads: 1, MaskMod: Causal()}, 1, false, 0},
		} {
			t.Run(fmt.Sprintf("%v/%s", dt, c.name), func(t *testing.T) {
				graph := func(t *testing.T, g *G.ExprGraph, rng *rand.Rand, valued func(tensor.Shape, string) *G.Node) []*G.Node {
					const b, s, dk = 2, 7, 3
					q := valued(tensor.Shape{b, s, 2 * dk}, "q")
					k, v := valued(tensor.Shape{b, s, c.kvHeads * dk}, "k"), valued(tensor.Shape{b, s, c.kvHeads * dk}, "v")
					o, w, err := Attend(q, k, v, c.spec)
					if err != nil {
						t.Fatal(err)
					}
					grads, err := G.Grad(weightedSum(t, o, rng), q, k, v)
					if err != nil {
						t.Fatal(err)
					}
					return append(grads, w.Deriv())
				}
				isFused := func(op G.Op) bool {
					_, qk := op.(gradQKOp)
					pqk, ok := op.(gradPQKOp)
					return qk && !c.wantPQK || ok && pqk.v != nil && c.wantPQK
				}
				checkFusedAgainstTape(t, dt, graph, isFused, c.wantFuse)
			})
		}
	}
}
