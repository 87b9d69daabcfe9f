package graph

import (
	"fmt"
	"hash"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chewxy/hm"
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

// A graph with no op to run (inputs only) runs concurrently without
// waiting forever and without leaving goroutines behind. It used to: no
// step was queued, nor the end of the run announced, so the run after the
// first one (which runs in order) blocked its caller and workers-1
// goroutines on the queue; a regression shows as this test hanging until
// go test's -timeout.
func TestMachineRunsConcurrentlyNoSteps(t *testing.T) {
	g := G.NewGraph()
	x := input(g, tensor.Float64, tensor.Shape{2}, "x")
	if err := G.Let(x, NewDense(tensor.Float64, tensor.Shape{2}, []float64{1, 2})); err != nil {
		t.Fatal(err)
	}
	vm, err := NewMachine(g)
	if err != nil {
		t.Fatal(err)
	}
	vm.RunConcurrently(4)
	before := runtime.NumGoroutine()
	for range 3 {
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("%d goroutines after three runs, %d before", after, before)
	}
}

// vectorOp is the part of a test op of one input shared by the ops below:
// a vector of two float64 in, one out, written anew; kind and id name it.
type vectorOp struct {
	kind string
	id   int
}

func (vectorOp) Arity() int                                        { return 1 }
func (vectorOp) Type() hm.Type                                     { return opType([]int{1}, 1) }
func (vectorOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) { return tensor.Shape{2}, nil }
func (vectorOp) ReturnsPtr() bool                                  { return false }
func (vectorOp) CallsExtern() bool                                 { return false }
func (vectorOp) OverwritesInput() int                              { return -1 }
func (op vectorOp) WriteHash(h hash.Hash)                          { fmt.Fprintf(h, "test.%s %d", op.kind, op.id) }
func (op vectorOp) Hashcode() uint32                               { return hashOf(op) }
func (op vectorOp) String() string                                 { return fmt.Sprintf("test.%s%d", op.kind, op.id) }

// failOp copies its input, and fails (or panics) where the input's first
// element is negative: a stand-in for an op that meets bad data.
type failOp struct {
	vectorOp
	panic bool
}

func (op failOp) Do(in ...G.Value) (G.Value, error) {
	x := in[0].(*tensor.Dense).Float64s()
	if x[0] >= 0 {
		return NewDense(tensor.Float64, tensor.Shape{2}, x), nil
	}
	if op.panic {
		panic(fmt.Sprintf("fail %d panics", op.id))
	}
	return nil, fmt.Errorf("fail %d fails", op.id)
}

// When several independent ops fail in one concurrent run, the error is
// the one the run in order returns, naming the first failing op in
// topological order, whichever failed first in time; every run, at any
// GOMAXPROCS.
func TestMachineConcurrentErrorIsFirstInOrder(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	g := G.NewGraph()
	x := input(g, tensor.Float64, tensor.Shape{2}, "x")
	// A long chain ending in an op that fails, built first, so that it
	// comes first in the order; then ops that fail on x directly (odd ones
	// by panicking), which are ready at once and so fail first in time.
	h := x
	for range 20 {
		h = G.Must(Add(h, x))
	}
	first := G.Must(G.ApplyOp(failOp{vectorOp: vectorOp{"fail", 0}}, h))
	for k := 1; k < 8; k++ {
		G.Must(G.ApplyOp(failOp{vectorOp{"fail", k}, k%2 == 1}, x))
	}
	let := func(x0 float64) {
		if err := G.Let(x, NewDense(tensor.Float64, tensor.Shape{2}, []float64{x0, 2})); err != nil {
			t.Fatal(err)
		}
	}
	let(-1)
	seq, err := NewMachine(g)
	if err != nil {
		t.Fatal(err)
	}
	want := seq.RunAll()
	if want == nil || !strings.Contains(want.Error(), first.Name()) {
		t.Fatalf("in order: got %v, want the error of %s, the first failing op in order (else this test shows nothing)", want, first.Name())
	}
	for _, procs := range []int{1, 2, 8} {
		runtime.GOMAXPROCS(procs)
		conc, err := NewMachine(g)
		if err != nil {
			t.Fatal(err)
		}
		conc.RunConcurrently(8)
		let(1) // a first run that succeeds, in order: the next ones are concurrent
		if err := conc.RunAll(); err != nil {
			t.Fatal(err)
		}
		let(-1)
		for run := range 100 {
			if got := conc.RunAll(); got == nil || got.Error() != want.Error() {
				t.Fatalf("GOMAXPROCS %d, run %d: got %v, want %v", procs, run, got, want)
			}
		}
	}
}

// panicMod is a user's score modifier that panics once armed: a bug in
// user code, called by attention's kernel on helper goroutines of
// internal/gemm/par.
type panicMod struct{ armed *atomic.Bool }

func (m panicMod) Mod(s float64, b, h, i, j int) (float64, float64) {
	if m.armed.Load() && i == 3 && j == 1 {
		panic("user score modifier panics")
	}
	return s, 1
}
func (panicMod) String() string { return "panicMod" }

// A panic in a user's ScoreMod, on whichever goroutine the attention's
// kernel runs it, is an error naming the attention's node, not a crash;
// in order and concurrently, at GOMAXPROCS 1, 2 and 8, run after run.
func TestMachineScoreModPanicIsError(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	const b, s, d, heads = 2, 32, 32, 4 // enough work to share (par.WorkersFor)
	g := G.NewGraph()
	q := input(g, tensor.Float64, tensor.Shape{b, s, d}, "q")
	armed := new(atomic.Bool)
	out, weights, err := Attend(q, q, q, Spec{Heads: heads, ScoreMod: panicMod{armed}})
	if err != nil {
		t.Fatal(err)
	}
	sum := G.Must(Add(out, out)) // an op after it, which must not run
	rng := newRand(3)
	if err := G.Let(q, NewDense(tensor.Float64, tensor.Shape{b, s, d}, uniform(rng, b*s*d, -1, 1))); err != nil {
		t.Fatal(err)
	}
	for _, procs := range []int{1, 2, 8} {
		runtime.GOMAXPROCS(procs)
		for _, workers := range []int{1, 4} {
			vm, err := NewMachine(g)
			if err != nil {
				t.Fatal(err)
			}
			vm.RunConcurrently(workers)
			armed.Store(false) // a first run that succeeds: the next ones are concurrent
			if err := vm.RunAll(); err != nil {
				t.Fatal(err)
			}
			armed.Store(true)
			for run := range 100 {
				err := vm.RunAll()
				// The weights' op is the one that calls the modifier.
				if err == nil || !strings.Contains(err.Error(), weights.Name()) || !strings.Contains(err.Error(), "user score modifier panics") {
					t.Fatalf("GOMAXPROCS %d, %d workers, run %d: got %v, want an error naming %s and the panic", procs, workers, run, err, weights.Name())
				}
				if strings.Contains(err.Error(), out.Name()) || strings.Contains(err.Error(), sum.Name()) {
					t.Fatalf("the error names an op after the one that panicked: %v", err)
				}
			}
		}
	}
}

// Run concurrently with more workers than cores, a chain of ops (one
// works, the others wait) has at most NumCPU-1 workers polling for the
// next step at any time, the rest blocked: pollers beyond the idle cores
// would take time from the working step (the preset's step at GOMAXPROCS
// 8 on two cores took 61 ms with every idle worker polling, 43 with one).
// With two cores or more, one does poll: the sampler sees it within a few
// runs, but on a busy machine (the race detector, other tests' processes)
// it may miss the polling windows of one run, so the runs go on, up to
// 100, until it has.
func TestMachinePollersBounded(t *testing.T) {
	g := G.NewGraph()
	x := input(g, tensor.Float64, tensor.Shape{400, 500}, "x")
	h := x
	for range 12 {
		h = G.Must(GELU(h))
	}
	if err := G.Let(x, NewDense(tensor.Float64, tensor.Shape{400, 500}, uniform(newRand(3), 200000, -1, 1))); err != nil {
		t.Fatal(err)
	}
	vm, err := NewMachine(g)
	if err != nil {
		t.Fatal(err)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	vm.RunConcurrently(8)
	var most atomic.Int32
	limit := int32(runtime.NumCPU() - 1)
	for run := 0; run < 3 || run < 100 && limit >= 1 && most.Load() == 0; run++ {
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if p := polling.Load(); p > most.Load() {
					most.Store(p)
				}
			}
		}()
		err := vm.RunAll()
		close(stop)
		<-sampled
		if err != nil {
			t.Fatal(err)
		}
	}
	if m := most.Load(); m > limit {
		t.Errorf("%d workers polled at once on %d CPUs, want at most %d", m, runtime.NumCPU(), limit)
	}
	if limit >= 1 && most.Load() == 0 {
		t.Error("no worker polled while the chain ran")
	}
}

// whereOp copies its input and records, at runs[id], the goroutine that
// ran it: a stand-in for a step of a chain.
type whereOp struct {
	vectorOp
	runs []string
}

func (op whereOp) Do(in ...G.Value) (G.Value, error) {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	op.runs[op.id], _, _ = strings.Cut(string(buf), " [") // "goroutine N"
	return NewDense(tensor.Float64, tensor.Shape{2}, in[0].(*tensor.Dense).Float64s()), nil
}

// A chain of ops run concurrently stays on the worker that took its first
// step: each step is run by the worker that completed its input, not
// queued for an idle one, whose core's caches hold none of its data (and
// which, blocked on the queue, could take 0.1 ms to wake). The other
// workers, idle, wait beside it.
func TestMachineChainStaysOnOneWorker(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	g := G.NewGraph()
	x := input(g, tensor.Float64, tensor.Shape{2}, "x")
	if err := G.Let(x, NewDense(tensor.Float64, tensor.Shape{2}, []float64{1, 2})); err != nil {
		t.Fatal(err)
	}
	runs := make([]string, 30)
	h := x
	for i := range runs {
		h = G.Must(G.ApplyOp(whereOp{vectorOp{"where", i}, runs}, h))
	}
	vm, err := NewMachine(g)
	if err != nil {
		t.Fatal(err)
	}
	vm.RunConcurrently(4)
	for run := range 20 {
		clear(runs)
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(runs[0], "goroutine ") {
			t.Fatalf("run %d: the first step recorded %q, not its goroutine", run, runs[0])
		}
		for i, r := range runs {
			if r != runs[0] {
				t.Fatalf("run %d: step %d ran on %s, step 0 on %s: the chain moved between workers", run, i, r, runs[0])
			}
		}
	}
}
