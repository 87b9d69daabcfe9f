package graph

import (
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// fusedGraph builds a graph on g, its nodes drawn from rng (valued makes
// an input of dt filled from it), and returns the nodes whose values a test
// compares.
type fusedGraph func(t *testing.T, g *G.ExprGraph, rng *rand.Rand, valued func(shape tensor.Shape, name string) *G.Node) []*G.Node

// checkFusedAgainstTape builds graph twice, runs one build three times on
// a Machine (the later runs on two goroutines) and the other once on
// gorgonia's tape machine, which runs every op as the graph holds it, and
// fails the test unless each node's values are equal, exactly, the
// Machine has wantFused steps whose op isFused reports, and each of those
// ops allocates nothing once it has run. It is how the Machine's rewrites
// (accumulate.go, attention_grads.go) are tested.
func checkFusedAgainstTape(t *testing.T, dt tensor.Dtype, graph fusedGraph, isFused func(G.Op) bool, wantFused int) {
	t.Helper()
	run := func(onMachine bool) (fused int, vals [][]float64) {
		rng := newRand(7)
		g := G.NewGraph()
		valued := func(shape tensor.Shape, name string) *G.Node {
			return G.NewTensor(g, dt, len(shape), G.WithShape(shape...), G.WithName(name),
				G.WithValue(NewDense(dt, shape, roundTo(dt, uniform(rng, shape.TotalSize(), -1, 1)))))
		}
		nodes := graph(t, g, rng, valued)
		read := make([]G.Value, len(nodes))
		for i, n := range nodes {
			G.Read(n, &read[i])
		}
		var vm G.VM = G.NewTapeMachine(g)
		if onMachine {
			m, err := NewMachine(g)
			if err != nil {
				t.Fatal(err)
			}
			m.RunConcurrently(2) // from the second run on
			for _, s := range m.steps {
				if isFused(s.op) {
					fused++
				}
			}
			vm = m
		}
		for range 3 {
			if err := vm.RunAll(); err != nil {
				t.Fatal(err)
			}
		}
		for _, v := range read {
			f, err := Float64s(v)
			if err != nil {
				t.Fatal(err)
			}
			vals = append(vals, f)
		}
		if m, ok := vm.(*Machine); ok {
			for _, s := range m.steps {
				if !isFused(s.op) {
					continue
				}
				var runErr error
				allocs := testing.AllocsPerRun(5, func() { _, runErr = s.op.Do(s.args...) })
				if runErr != nil {
					t.Fatalf("%v: %v", s.op, runErr)
				}
				if allocs != 0 {
					t.Errorf("%v allocates %v times a run, want 0", s.op, allocs)
				}
			}
		}
		return fused, vals
	}
	fused, got := run(true)
	_, want := run(false)
	if fused != wantFused {
		t.Errorf("%d steps fused, want %d", fused, wantFused)
	}
	for i := range want {
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Fatalf("node %d's value [%d] = %v, the tape machine's %v", i, j, got[i][j], want[i][j])
			}
		}
	}
}
