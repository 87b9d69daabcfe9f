package graph

import (
	"fmt"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestAttentionGradsOfQAndK: the Machine forms the fused attention's
// gradients of q and k in one op (gradQKOp) where every query head has its
// own KV head, and the gradients of q, k and v equal gorgonia's tape
// machine's exactly over three runs, the later ones on two goroutines: causal, with a score modifier (whose
// derivative both read), and grouped-query attention (not fused), in
// float32 and float64.
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
			wantFuse int
		}{
			{"causal", Spec{Heads: 2, MaskMod: Causal()}, 2, 1},
			{"softcap", Spec{Heads: 2, MaskMod: Causal(), ScoreMod: softcap}, 2, 1},
			{"gqa", Spec{Heads: 2, KVHeads: 1, MaskMod: Causal()}, 1, 0},
		} {
			t.Run(fmt.Sprintf("%v/%s", dt, c.name), func(t *testing.T) {
				run := func(vm func(*G.ExprGraph) (G.VM, error)) (fused int, vals [][]float64) {
					rng := newRand(5)
					g := G.NewGraph()
					node := func(shape tensor.Shape, name string) *G.Node {
						return G.NewTensor(g, dt, len(shape), G.WithShape(shape...), G.WithName(name),
							G.WithValue(NewDense(dt, shape, roundTo(dt, uniform(rng, shape.TotalSize(), -1, 1)))))
					}
					const b, s, dk = 2, 7, 3
					q := node(tensor.Shape{b, s, 2 * dk}, "q")
					k, v := node(tensor.Shape{b, s, c.kvHeads * dk}, "k"), node(tensor.Shape{b, s, c.kvHeads * dk}, "v")
					o, _, err := Attend(q, k, v, c.spec)
					if err != nil {
						t.Fatal(err)
					}
					grads, err := G.Grad(weightedSum(t, o, rng), q, k, v)
					if err != nil {
						t.Fatal(err)
					}
					read := make([]G.Value, len(grads))
					for i, n := range grads {
						G.Read(n, &read[i])
					}
					m, err := vm(g)
					if err != nil {
						t.Fatal(err)
					}
					if mm, ok := m.(*Machine); ok {
						mm.RunConcurrently(2) // from the second run on
					}
					for range 3 {
						if err := m.RunAll(); err != nil {
							t.Fatal(err)
						}
					}
					if mm, ok := m.(*Machine); ok {
						for _, s := range mm.steps {
							if _, ok := s.op.(gradQKOp); ok {
								fused++
							}
						}
					}
					for _, v := range read {
						f, err := Float64s(v)
						if err != nil {
							t.Fatal(err)
						}
						vals = append(vals, f)
					}
					return fused, vals
				}
				fused, got := run(func(g *G.ExprGraph) (G.VM, error) { return NewMachine(g) })
				_, want := run(func(g *G.ExprGraph) (G.VM, error) { return G.NewTapeMachine(g), nil })
				if fused != c.wantFuse {
					t.Errorf("%d gradQKOp steps, want %d", fused, c.wantFuse)
				}
				for i := range want {
					for j := range want[i] {
						if got[i][j] != want[i][j] {
							t.Fatalf("d%c[%d] = %v, the tape machine's %v", "qkv"[i], j, got[i][j], want[i][j])
						}
					}
				}
			})
		}
	}
}
