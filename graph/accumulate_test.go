package graph

import (
	"fmt"
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
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		for _, hidden := range []bool{true, false} {
			for _, out := range []int{4, 300} {
				t.Run(fmt.Sprintf("%v/hidden=%v/out=%d", dt, hidden, out), func(t *testing.T) {
					build := func() (*G.ExprGraph, *G.Node, []*G.Node) {
						rng := newRand(7)
						g := G.NewGraph()
						node := func(shape tensor.Shape, name string) *G.Node {
							return G.NewTensor(g, dt, len(shape), G.WithShape(shape...), G.WithName(name),
								G.WithValue(NewDense(dt, shape, roundTo(dt, uniform(rng, shape.TotalSize(), -1, 1)))))
						}
						x := node(tensor.Shape{2, 3, 5}, "x")
						h := x
						if hidden {
							var err error
							if h, err = GELU(x); err != nil {
								t.Fatal(err)
							}
						}
						w1, w2, w3 := node(tensor.Shape{5, out}, "w1"), node(tensor.Shape{5, out}, "w2"), node(tensor.Shape{out, 5}, "w3")
						var cost *G.Node
						for i, lin := range []func(x, w, b *G.Node) (*G.Node, error){Linear, Linear, LinearT} {
							y, err := lin(h, []*G.Node{w1, w2, w3}[i], nil)
							if err != nil {
								t.Fatal(err)
							}
							term := weightedSum(t, y, rng)
							if cost == nil {
								cost = term
							} else if cost, err = G.Add(cost, term); err != nil {
								t.Fatal(err)
							}
						}
						grads, err := G.Grad(cost, x, w1, w2, w3)
						if err != nil {
							t.Fatal(err)
						}
						dh := h.Deriv()
						if dh == nil {
							t.Fatalf("%v has no derivative node", h)
						}
						return g, dh, grads
					}
					run := func(vm func(*G.ExprGraph) (G.VM, error)) (fused int, vals [][]float64) {
						g, dh, grads := build()
						nodes := append([]*G.Node{dh}, grads...)
						read := make([]G.Value, len(nodes))
						for i, n := range nodes {
							G.Read(n, &read[i])
						}
						m, err := vm(g)
						if err != nil {
							t.Fatal(err)
						}
						for range 2 { // the second run reuses every buffer
							if err := m.RunAll(); err != nil {
								t.Fatal(err)
							}
						}
						if mm, ok := m.(*Machine); ok {
							for _, s := range mm.steps {
								if _, ok := s.op.(accumulateOp); ok {
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
					if wantFused := map[bool]int{true: 2, false: 0}[out <= 256]; fused != wantFused {
						t.Errorf("%d sums fused, want %d", fused, wantFused)
					}
					for i := range want {
						for j := range want[i] {
							if got[i][j] != want[i][j] {
								t.Fatalf("value %d (dh, dx, dw1, dw2, dw3)[%d] = %v, the tape machine's %v", i, j, got[i][j], want[i][j])
							}
						}
					}
				})
			}
		}
	}
}

// TestNormAddGradients: a residual block, h + W·LayerNorm(h) with h =
// GELU(x), gives h the sum of the residual's gradient and the LayerNorm's
// dx, which the Machine adds in the LayerNorm's pass (normAddOp), its
// gain's and bias's gradients moved to run after it; every gradient equals
// gorgonia's tape machine's exactly, in float32 and float64, over two runs.
func TestNormAddGradients(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		t.Run(dt.String(), func(t *testing.T) {
			run := func(vm func(*G.ExprGraph) (G.VM, error)) (fused int, vals [][]float64) {
				rng := newRand(11)
				g := G.NewGraph()
				node := func(shape tensor.Shape, name string, lo, hi float64) *G.Node {
					return G.NewTensor(g, dt, len(shape), G.WithShape(shape...), G.WithName(name),
						G.WithValue(NewDense(dt, shape, roundTo(dt, uniform(rng, shape.TotalSize(), lo, hi)))))
				}
				x, gain, bias, w := node(tensor.Shape{3, 4, 8}, "x", -2, 2), node(tensor.Shape{8}, "gain", 0.5, 2), node(tensor.Shape{8}, "bias", -1, 1), node(tensor.Shape{8, 8}, "w", -1, 1)
				h, err := GELU(x)
				if err != nil {
					t.Fatal(err)
				}
				z, err := LayerNorm(h, gain, bias, 1e-5)
				if err != nil {
					t.Fatal(err)
				}
				f, err := Linear(z, w, nil)
				if err != nil {
					t.Fatal(err)
				}
				y, err := Add(h, f)
				if err != nil {
					t.Fatal(err)
				}
				grads, err := G.Grad(weightedSum(t, y, rng), x, gain, bias, w)
				if err != nil {
					t.Fatal(err)
				}
				nodes := append([]*G.Node{h.Deriv()}, grads...)
				read := make([]G.Value, len(nodes))
				for i, n := range nodes {
					G.Read(n, &read[i])
				}
				m, err := vm(g)
				if err != nil {
					t.Fatal(err)
				}
				for range 2 {
					if err := m.RunAll(); err != nil {
						t.Fatal(err)
					}
				}
				if mm, ok := m.(*Machine); ok {
					for _, s := range mm.steps {
						if _, ok := s.op.(normAddOp); ok {
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
			if fused != 1 {
				t.Errorf("%d sums fused into a LayerNorm's pass, want 1", fused)
			}
			for i := range want {
				for j := range want[i] {
					if got[i][j] != want[i][j] {
						t.Fatalf("value %d (dh, dx, dgain, dbias, dw)[%d] = %v, the tape machine's %v", i, j, got[i][j], want[i][j])
					}
				}
			}
		})
	}
}
