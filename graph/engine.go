package graph

import (
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"slices"
	"sync"
	_ "unsafe" // go:linkname

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// This file is the one place where qkv relies on gorgonia's internals rather
// than its API: Machine needs four things gorgonia does not export.
//
//   - bind: gorgonia's unexported (*Node).bind, reached through go:linkname,
//     to give a node the value its op returned without G.UnsafeLet's shape
//     check and allocation.
//   - readInto: the unexported field into of gorgonia's unexported readOp, the
//     op of a G.Read node, read by reflection, because readOp.Do does nothing.
//   - isGorgoniaAdd: which of gorgonia's unexported elemBinOp values is a
//     plain add, so that Machine runs qkv's add in its place.
//   - memRange: the memory a value spans, through tensor's Memory interface,
//     to tell whether two values share memory.
//
// Each is checked on a tiny graph before the first Machine is built
// (checkEngine, run once by NewMachine): if a gorgonia release changes one
// of them, NewMachine returns an error that names it and matches
// ErrEngineChanged, instead of running graphs that would silently read or
// bind the wrong values. engine_test.go tests each check, and that each
// reports a deliberately broken probe.

// ErrEngineChanged is matched, with errors.Is, by the error NewMachine
// returns when one of the gorgonia internals Machine relies on (engine.go)
// no longer behaves as it did in gorgonia v0.9.18: the message names the
// internal. Machine cannot run graphs correctly on that gorgonia; pin
// gorgonia.org/gorgonia v0.9.18, or update engine.go.
var ErrEngineChanged = errors.New("a gorgonia internal that graph.Machine relies on changed")

// engineErrorf is an error of a failed self-test: it names the gorgonia
// version, if the build records it, and matches ErrEngineChanged.
func engineErrorf(format string, args ...any) error {
	return &kindError{ErrEngineChanged, fmt.Errorf("graph: engine self-test (%s): %s", gorgoniaVersion(), fmt.Sprintf(format, args...))}
}

// gorgoniaVersion is the version of gorgonia the program is built with, as
// the build records it, for the self-tests' errors.
func gorgoniaVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == "gorgonia.org/gorgonia" {
				if d.Replace != nil {
					return d.Path + " " + d.Version + " replaced by " + d.Replace.Path + " " + d.Replace.Version
				}
				return d.Path + " " + d.Version
			}
		}
	}
	return "gorgonia.org/gorgonia, version not recorded; qkv checked v0.9.18"
}

// engine is what the self-tests learn from gorgonia itself, by building
// the ops on a probe graph, rather than from type names spelled as strings:
// the dynamic types of G.Read's and G.Add's ops, and how an add prints.
type engine struct {
	readType  reflect.Type
	addType   reflect.Type
	addString string
}

// probed is filled by checkEngine, before any Machine is compiled.
var probed engine

// checkEngine runs the self-tests once per program; NewMachine returns the
// error. Once, because the internals cannot change while a program runs.
var checkEngine = sync.OnceValue(func() error {
	e, err := probeEngine()
	if err != nil {
		return err
	}
	probed = e
	for _, check := range []func() error{
		func() error { return checkMemRange(memRange) },
		func() error { return checkBind(bind) },
		func() error { return checkChildren() },
		func() error { return checkReadInto(readInto) },
		func() error { return checkAdd(isGorgoniaAdd, G.Add) },
		checkMachine,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
})

// probeEngine builds G.Read and G.Add on a probe graph and records their
// ops' types.
func probeEngine() (engine, error) {
	g := G.NewGraph()
	a := G.NewVector(g, tensor.Float64, G.WithShape(2), G.WithName("a"))
	b := G.NewVector(g, tensor.Float64, G.WithShape(2), G.WithName("b"))
	sum, err := G.Add(a, b)
	if err != nil {
		return engine{}, engineErrorf("G.Add of two vectors: %v", err)
	}
	var v G.Value
	r := G.Read(a, &v)
	return engine{
		readType:  reflect.TypeOf(r.Op()),
		addType:   reflect.TypeOf(sum.Op()),
		addString: sum.Op().String(),
	}, nil
}

// bind binds v to n as the tape machine does, without G.UnsafeLet's checks:
// some of gorgonia's ops return a value whose shape differs from the one
// their node declares (a slice down to one element returns a scalar for a
// (1, 1) node), and the tape machine binds it regardless; G.UnsafeLet
// refuses it, and clones the node's shape on every call (an allocation per
// op per run).
//
// Internal: gorgonia's unexported (*Node).bind. checkBind checks, before
// any Machine runs, that Node still has the field bind sets and that bind
// sets it.
//
//go:linkname bind gorgonia.org/gorgonia.(*Node).bind
func bind(n *G.Node, v G.Value) error

// checkBind checks that bind, given as a parameter so that a test can pass
// a broken one, gives a node the value: a dense tensor, then another of a
// different shape (as the tape machine binds a scalar to a (1, 1) node),
// each read back with Value.
func checkBind(bind func(*G.Node, G.Value) error) error {
	// bind is reached by symbol name, unchecked by the compiler: before
	// calling it, check that the node still holds its value where v0.9.18's
	// bind puts it.
	if f, ok := reflect.TypeFor[G.Node]().FieldByName("boundTo"); !ok || f.Type != reflect.TypeFor[G.Value]() {
		return engineErrorf("gorgonia's Node has no field boundTo of type Value, which its (*Node).bind (reached through go:linkname by graph.bind) set: bind may have changed too, so it is not called")
	}
	g := G.NewGraph()
	n := G.NewMatrix(g, tensor.Float64, G.WithShape(1, 1), G.WithName("probe"))
	for _, v := range []G.Value{
		tensor.New(tensor.WithShape(1, 1), tensor.WithBacking([]float64{3})),
		G.NewF64(4),
	} {
		if err := bind(n, v); err != nil {
			return engineErrorf("gorgonia's (*Node).bind (through go:linkname) returned %v binding a %v value", err, v.Shape())
		}
		if got := n.Value(); got != v {
			return engineErrorf("gorgonia's (*Node).bind (through go:linkname) did not bind the value: the node holds %v, want %v", got, v)
		}
	}
	return nil
}

// readInto returns where op, if it is the op of a G.Read node, puts what it
// reads; nil for any other op.
//
// Workaround: gorgonia's readOp.Do does nothing (TestGorgoniaReadOpDoesNothing
// pins it). Its tape machine recognises the op while compiling and copies
// the value itself, through the op's unexported field into. So this reads
// that field by reflection, from an op of the type G.Read's op has
// (probed.readType).
//
// Internal: gorgonia's unexported readOp and its field into; checkReadInto
// and checkMachine check them.
func readInto(op G.Op) *G.Value {
	v := reflect.ValueOf(op)
	if probed.readType == nil || v.Type() != probed.readType || v.Kind() != reflect.Struct {
		return nil
	}
	f := v.FieldByName("into")
	if f.Kind() != reflect.Pointer || f.Type().Elem() != reflect.TypeFor[G.Value]() {
		return nil
	}
	return (*G.Value)(f.UnsafePointer())
}

// checkReadInto checks that readInto, a parameter so that a test can pass
// a broken one, finds the very pointer given to G.Read, and nothing in an
// op that is not a read.
func checkReadInto(readInto func(G.Op) *G.Value) error {
	g := G.NewGraph()
	x := G.NewVector(g, tensor.Float64, G.WithShape(2), G.WithName("x"))
	var v G.Value
	r := G.Read(x, &v)
	if got := readInto(r.Op()); got != &v {
		return engineErrorf("the field into of gorgonia's readOp (G.Read's op, %T) is not the pointer given to G.Read (read %p, want %p): Machine could not fill G.Read's targets", r.Op(), got, &v)
	}
	if sum, err := G.Add(x, x); err != nil || readInto(sum.Op()) != nil {
		return engineErrorf("readInto takes gorgonia's add (%v) for a G.Read op", sum.Op())
	}
	return nil
}

// isGorgoniaAdd reports whether op is gorgonia's elementwise add: an op of
// the type G.Add's op has (gorgonia's unexported elemBinOp, which also
// subtracts, multiplies, compares...) that prints as G.Add's does ("+
// false": the operator, and false for "not a comparison returning the
// input's type").
//
// Internal: gorgonia's elemBinOp and its String; checkAdd checks them.
func isGorgoniaAdd(op G.Op) bool {
	return probed.addType != nil && reflect.TypeOf(op) == probed.addType && op.String() == probed.addString
}

// checkAdd checks that isAdd, a parameter so that a test can pass a broken
// one, recognises what add builds (G.Add, or a stand-in in a test) and no
// other elementwise op, and that add's op adds: Machine replaces the ops it
// recognises with qkv's a + b.
func checkAdd(isAdd func(G.Op) bool, add func(a, b *G.Node) (*G.Node, error)) error {
	g := G.NewGraph()
	a := G.NewVector(g, tensor.Float64, G.WithShape(2), G.WithName("a"))
	b := G.NewVector(g, tensor.Float64, G.WithShape(2), G.WithName("b"))
	sum, err := add(a, b)
	if err != nil {
		return engineErrorf("G.Add of two vectors: %v", err)
	}
	if !isAdd(sum.Op()) {
		return engineErrorf("gorgonia's add (%T %q) is not recognised: Machine would run it as gorgonia's, which allocates at every run", sum.Op(), sum.Op())
	}
	for _, other := range []func(a, b *G.Node) (*G.Node, error){G.Sub, G.HadamardProd, G.HadamardDiv} {
		n, err := other(a, b)
		if err != nil {
			return engineErrorf("probe op: %v", err)
		}
		if isAdd(n.Op()) {
			return engineErrorf("gorgonia's %T %q is taken for an add: Machine would replace it with a + b", n.Op(), n.Op())
		}
	}
	av := tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{1, 2}))
	bv := tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{10, 20}))
	got, err := sum.Op().Do(av, bv)
	if err != nil {
		return engineErrorf("gorgonia's add (%q) failed on two vectors: %v", sum.Op(), err)
	}
	if d, ok := got.(*tensor.Dense); !ok || !slices.Equal(d.Float64s(), []float64{11, 22}) {
		return engineErrorf("gorgonia's op %T %q, taken for an add, gives %v for [1 2] and [10 20], want [11 22]", sum.Op(), sum.Op(), got)
	}
	return nil
}

// children returns n's inputs in the order its op takes them: gorgonia's
// graph lists a node's children in that order (checkChildren checks it).
func children(g *G.ExprGraph, n *G.Node) []*G.Node {
	var in []*G.Node
	for it := g.From(n.ID()); it.Next(); {
		in = append(in, it.Node().(*G.Node))
	}
	return in
}

// checkChildren checks that children lists a - b's operands as a, b.
func checkChildren() error {
	g := G.NewGraph()
	a := G.NewVector(g, tensor.Float64, G.WithShape(2), G.WithName("a"))
	b := G.NewVector(g, tensor.Float64, G.WithShape(2), G.WithName("b"))
	d, err := G.Sub(b, a) // b first: an order the nodes' creation does not give
	if err != nil {
		return engineErrorf("G.Sub of two vectors: %v", err)
	}
	if in := children(g, d); len(in) != 2 || in[0] != b || in[1] != a {
		return engineErrorf("gorgonia's ExprGraph.From lists b - a's operands as %v, not [b a]: Machine would pass an op its inputs in the wrong order", in)
	}
	return nil
}

// isConstant reports whether op is one of gorgonia's constants, whose node
// holds its value without running: gorgonia's Node.Value asks its op for
// the value through this method.
func isConstant(op G.Op) bool {
	_, ok := op.(interface{ Value() G.Value })
	return ok
}

// memRange returns the bytes [lo, hi) that v's data occupies, both 0 for
// no value or no data: through tensor's Memory interface, which every
// gorgonia value has (a dense tensor's array, a scalar's box). Two values
// share memory if their ranges overlap: one may be a view into the other
// that starts at another element (a slice of rows), which comparing first
// elements' addresses misses.
func memRange(v G.Value) (lo, hi uintptr) {
	if v == nil {
		return 0, 0
	}
	if r := reflect.ValueOf(v); r.Kind() == reflect.Pointer && r.IsNil() {
		return 0, 0
	}
	size := v.MemSize()
	if size == 0 { // Uintptr panics on a tensor with no elements
		return 0, 0
	}
	lo = v.Uintptr()
	return lo, lo + size
}

// checkMemRange checks that memRange, a parameter so that a test can pass
// a broken one, spans a dense tensor's elements exactly, places a view of
// its second row inside them (and not at their start), and spans a scalar.
func checkMemRange(memRange func(G.Value) (lo, hi uintptr)) error {
	backing := []float64{1, 2, 3, 4, 5, 6}
	d := tensor.New(tensor.WithShape(3, 2), tensor.WithBacking(backing))
	lo, hi := memRange(d)
	if want := uintptrOf(&backing[0]); lo != want || hi != want+48 {
		return engineErrorf("tensor's Memory of a (3, 2) float64 *tensor.Dense spans [%#x, %#x), want its 48 bytes from %#x: Machine could not see values that share memory", lo, hi, want)
	}
	view, err := d.Slice(G.S(1))
	if err != nil {
		return engineErrorf("a view of a tensor's row: %v", err)
	}
	vlo, vhi := memRange(view.(G.Value))
	if vlo != uintptrOf(&backing[2]) || vhi <= vlo || vhi > hi {
		return engineErrorf("tensor's Memory of a view of row 1 spans [%#x, %#x), want from %#x within [%#x, %#x): Machine could not see values that share memory", vlo, vhi, uintptrOf(&backing[2]), lo, hi)
	}
	s := G.NewF64(1)
	if slo, shi := memRange(s); slo != uintptrOf((*float64)(s)) || shi != slo+8 {
		return engineErrorf("gorgonia's Memory of a *F64 spans [%#x, %#x), want its 8 bytes", slo, shi)
	}
	if lo, hi := memRange(tensor.New(tensor.Of(tensor.Float64), tensor.WithShape(0))); lo != hi {
		return engineErrorf("an empty tensor spans [%#x, %#x), want nothing", lo, hi)
	}
	return nil
}

// uintptrOf is p's address.
func uintptrOf[T any](p *T) uintptr { return reflect.ValueOf(p).Pointer() }

// overlapping returns, for ranges [lo[i], hi[i]), which overlap another
// range of the list. Empty ranges overlap nothing.
func overlapping(lo, hi []uintptr) []bool {
	idx := make([]int, 0, len(lo))
	for i := range lo {
		if hi[i] > lo[i] {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(a, b int) int {
		switch {
		case lo[a] < lo[b]:
			return -1
		case lo[a] > lo[b]:
			return 1
		}
		return 0
	})
	out := make([]bool, len(lo))
	var end uintptr // the furthest end of the ranges before, in order of start
	for k, i := range idx {
		if k > 0 && lo[i] < end {
			out[i] = true
		}
		if k+1 < len(idx) && lo[idx[k+1]] < hi[i] {
			out[i] = true
		}
		end = max(end, hi[i])
	}
	return out
}

// checkMachine runs a graph that needs bind, readInto and isGorgoniaAdd
// through a Machine: read(a + b) must read the sum, computed by qkv's add.
func checkMachine() error {
	g := G.NewGraph()
	a := G.NewVector(g, tensor.Float64, G.WithShape(2), G.WithName("a"))
	b := G.NewVector(g, tensor.Float64, G.WithShape(2), G.WithName("b"))
	sum, err := G.Add(a, b)
	if err != nil {
		return engineErrorf("G.Add of two vectors: %v", err)
	}
	var v G.Value
	G.Read(sum, &v)
	m, err := compile(g)
	if err != nil {
		return engineErrorf("compiling read(a + b): %v", err)
	}
	if len(m.steps) != 2 {
		return engineErrorf("read(a + b) compiled to %d steps, want 2", len(m.steps))
	}
	if _, ok := m.steps[0].op.(addOp); !ok {
		return engineErrorf("gorgonia's add (%q) runs as %T, want qkv's", sum.Op(), m.steps[0].op)
	}
	if m.steps[1].read == nil {
		return engineErrorf("the G.Read step (%T) was not recognised: Machine would leave its target empty", m.steps[1].op)
	}
	if err := G.Let(a, tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{1, 2}))); err != nil {
		return engineErrorf("G.Let: %v", err)
	}
	if err := G.Let(b, tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{10, 20}))); err != nil {
		return engineErrorf("G.Let: %v", err)
	}
	for run := range 2 {
		if err := m.RunAll(); err != nil {
			return engineErrorf("running read(a + b): %v", err)
		}
		d, ok := v.(*tensor.Dense)
		if !ok || !slices.Equal(d.Float64s(), []float64{11, 22}) {
			return engineErrorf("run %d of read(a + b) for a = [1 2], b = [10 20] read %v, want [11 22]: G.Read's target is not filled through readOp's field into, or bind did not bind the sum", run+1, v)
		}
		if sum.Value() != m.steps[0].out {
			return engineErrorf("after run %d the add's node holds %v, not its step's output: bind did not bind it", run+1, sum.Value())
		}
	}
	return nil
}
