package graph

import (
	"fmt"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestAccumulatedGradients: a value read by three Linears (two Linear, one
// LinearT) gets the sum of their dx; the Machine adds the second and third
// products into the first in place (accumulateOp) where their depth fits
// one GEMM block, and the gradients equal those gorgonia's tape machine
// computes with its adds, exactly, in float32 and float64: for a hidden
// value (h = GELU(x), read back through h's derivative) and for an input
// (x itself, whose gradient the Machine then copies out). A depth of 300
// is not fused and equal too.
func TestAccumulatedGradients(t *testing.T) {
	for _, dt := range floatTypes {
		for _, hidden := range []bool{true, false} {
			for _, out := range []int{4, 300} {
				t.Run(fmt.Sprintf("%v/hidden=%v/out=%d", dt, hidden, out), func(t *testing.T) {
					graph := func(t *testing.T, g *G.ExprGraph, rng *rand.Rand, valued func(tensor.Shape, string) *G.Node) []*G.Node {
						x := valued(tensor.Shape{2, 3, 5}, "x")
						h := x
						if hidden {
							h = G.Must(GELU(x))
						}
						w := []*G.Node{valued(tensor.Shape{5, out}, "w1"), valued(tensor.Shape{5, out}, "w2"), valued(tensor.Shape{out, 5}, "w3")}
						var cost *G.Node
						for i, lin := range []func(x, w, b *G.Node) (*G.Node, error){Linear, Linear, LinearT} {
							term := weightedSum(t, G.Must(lin(h, w[i], nil)), rng)
							if cost == nil {
								cost = term
							} else {
								cost = G.Must(G.Add(cost, term))
							}
						}
						grads, err := G.Grad(cost, x, w[0], w[1], w[2])
						if err != nil {
							t.Fatal(err)
						}
						return append([]*G.Node{h.Deriv()}, grads...) // dh, dx, dw1, dw2, dw3
					}
					isFused := func(op G.Op) bool { _, ok := op.(accumulateOp); return ok }
					checkFusedAgainstTape(t, dt, graph, isFused, map[bool]int{true: 2, false: 0}[out <= 256])
				})
			}
		}
	}
}

// TestNormAddGradients: a residual block, h + W·LayerNorm(h) with h =
// GELU(x), gives h the sum of the residual's gradient and the LayerNorm's
// dx, which the Machine adds in the LayerNorm's pass (normAddOp), its
// gain's and bias's gradients moved to run after it; every gradient equals
// gorgonia's tape machine's exactly, in float32 and float64.
func TestNormAddGradients(t *testing.T) {
	for _, dt := range floatTypes {
		t.Run(dt.String(), func(t *testing.T) {
			graph := func(t *testing.T, g *G.ExprGraph, rng *rand.Rand, valued func(tensor.Shape, string) *G.Node) []*G.Node {
				x, gain, bias, w := valued(tensor.Shape{3, 4, 8}, "x"), valued(tensor.Shape{8}, "gain"), valued(tensor.Shape{8}, "bias"), valued(tensor.Shape{8, 8}, "w")
				h := G.Must(GELU(x))
				y := G.Must(Add(h, G.Must(Linear(G.Must(LayerNorm(h, gain, bias, 1e-5)), w, nil))))
				grads, err := G.Grad(weightedSum(t, y, rng), x, gain, bias, w)
				if err != nil {
					t.Fatal(err)
				}
				return append([]*G.Node{h.Deriv()}, grads...) // dh, dx, dgain, dbias, dw
			}
			isFused := func(op G.Op) bool { _, ok := op.(normAddOp); return ok }
			checkFusedAgainstTape(t, dt, graph, isFused, 1)
		})
	}
}
