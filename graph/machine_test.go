package graph

import (
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The defect plainAdd works around: gorgonia's add allocates even when it
// writes into a given output.
func TestGorgoniaAddAllocates(t *testing.T) {
	g := G.NewGraph()
	a, b := input(g, tensor.Float32, tensor.Shape{4, 8}, "a"), input(g, tensor.Float32, tensor.Shape{4, 8}, "b")
	sum := G.Must(G.Add(a, b))
	av, bv := NewDense(tensor.Float32, tensor.Shape{4, 8}, make([]float64, 32)), NewDense(tensor.Float32, tensor.Shape{4, 8}, make([]float64, 32))
	into := sum.Op().(G.UsePreallocDoer)
	out := NewDense(tensor.Float32, tensor.Shape{4, 8}, make([]float64, 32))
	if n := testing.AllocsPerRun(20, func() {
		if _, err := into.UsePreallocDo(out, av, bv); err != nil {
			t.Fatal(err)
		}
	}); n == 0 {
		t.Errorf("gorgonia defect (add allocates writing into a given output) no longer reproduces: drop plainAdd in graph/machine.go")
	}
}

// A Machine runs a graph's ops in order, reads through G.Read, runs
// gorgonia's plain adds as qkv's (the same sums), and a second run
// allocates nothing for ops that keep their outputs.
func TestMachineRuns(t *testing.T) {
	for _, dt := range floatTypes {
		g := G.NewGraph()
		a, b := input(g, dt, tensor.Shape{2, 3}, "a"), input(g, dt, tensor.Shape{2, 3}, "b")
		sum := G.Must(G.Add(a, b))
		twice := G.Must(Add(sum, sum))
		var read G.Value
		G.Read(twice, &read)
		vm, err := NewMachine(g)
		if err != nil {
			t.Fatal(err)
		}
		av := []float64{1, 2, 3, 4, 5, 6}
		bv := []float64{0.5, -1, 2, 0, 1e3, -7}
		if err := G.Let(a, NewDense(dt, tensor.Shape{2, 3}, av)); err != nil {
			t.Fatal(err)
		}
		if err := G.Let(b, NewDense(dt, tensor.Shape{2, 3}, bv)); err != nil {
			t.Fatal(err)
		}
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		got, err := Float64s(read)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float64, len(av))
		for i := range want {
			want[i] = 2 * (av[i] + bv[i])
		}
		checkClose(t, dt.String(), got, want, 0)
		if _, ok := vm.steps[0].op.(addOp); !ok {
			t.Errorf("%v: gorgonia's add runs as %T, want qkv's addOp", dt, vm.steps[0].op)
		}
		var steady []int
		for i := range vm.steps {
			if vm.steps[i].read == nil {
				steady = append(steady, i)
			}
		}
		if n := testing.AllocsPerRun(10, func() {
			for _, i := range steady {
				if err := vm.steps[i].run(); err != nil {
					t.Fatal(err)
				}
			}
		}); n != 0 {
			t.Errorf("%v: the adds allocated %v times a run, want 0", dt, n)
		}
	}
}

// A failing op is an error naming its node; an unbound input too.
func TestMachineErrors(t *testing.T) {
	g := G.NewGraph()
	a := input(g, tensor.Float64, tensor.Shape{2}, "a")
	sum := G.Must(Add(a, a))
	vm, err := NewMachine(g)
	if err != nil {
		t.Fatal(err)
	}
	err = vm.RunAll()
	if err == nil || !strings.Contains(err.Error(), "has no value") || !strings.Contains(err.Error(), sum.Name()) {
		t.Errorf("RunAll with an unbound input: got %v, want an error naming the node and the input", err)
	}
}

// Run concurrently, a graph of many independent branches gives the values
// of running it in order, run after run, and an op that fails on one
// branch is an error naming its node, with the other branches unharmed.
func TestMachineRunsConcurrently(t *testing.T) {
	g := G.NewGraph()
	x := input(g, tensor.Float64, tensor.Shape{3, 4}, "x")
	ids, err := NewIDs(g, 1, 2, 5, "ids")
	if err != nil {
		t.Fatal(err)
	}
	table := input(g, tensor.Float64, tensor.Shape{5, 4}, "table")
	var outs []*G.Node
	for k := range 8 {
		h := x
		for range k + 1 {
			h = G.Must(Add(h, x))
		}
		outs = append(outs, G.Must(GELU(h)))
	}
	rows := G.Must(Embed(table, ids))
	reads := make([]G.Value, len(outs))
	for i, o := range outs {
		G.Read(o, &reads[i])
	}
	rng := newRand(8)
	lets := func(id int) {
		if err := G.Let(x, NewDense(tensor.Float64, tensor.Shape{3, 4}, uniform(rng, 12, -1, 1))); err != nil {
			t.Fatal(err)
		}
		if err := G.Let(table, NewDense(tensor.Float64, tensor.Shape{5, 4}, uniform(rng, 20, -1, 1))); err != nil {
			t.Fatal(err)
		}
		if err := G.Let(ids.Node, tensor.New(tensor.WithShape(2), tensor.WithBacking([]int{1, id}))); err != nil {
			t.Fatal(err)
		}
	}
	seq, err := NewMachine(g)
	if err != nil {
		t.Fatal(err)
	}
	conc, err := NewMachine(g)
	if err != nil {
		t.Fatal(err)
	}
	conc.RunConcurrently(4)
	for run := range 5 {
		lets(run % 5)
		if err := seq.RunAll(); err != nil {
			t.Fatal(err)
		}
		want := make([][]float64, len(reads))
		for i, v := range reads {
			want[i], _ = Float64s(v)
		}
		if err := conc.RunAll(); err != nil {
			t.Fatal(err)
		}
		for i, v := range reads {
			got, _ := Float64s(v)
			checkClose(t, "concurrent branch", got, want[i], 0)
		}
	}
	lets(7) // outside the table
	if err := conc.RunAll(); err == nil || !strings.Contains(err.Error(), rows.Name()) {
		t.Errorf("concurrent run with an id outside the table: got %v, want an error naming %s", err, rows.Name())
	}
}
