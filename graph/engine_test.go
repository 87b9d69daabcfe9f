package graph

import (
	"errors"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The self-tests pass on the gorgonia this module requires, and NewMachine
// runs them (probed is filled).
func TestEngineSelfTests(t *testing.T) {
	if err := checkEngine(); err != nil {
		t.Fatalf("engine self-tests on %s: %v", gorgoniaVersion(), err)
	}
	if probed.readType == nil || probed.addType == nil || probed.addString == "" {
		t.Fatalf("checkEngine left probed incomplete: %+v", probed)
	}
	for name, check := range map[string]func() error{
		"memRange": func() error { return checkMemRange(memRange) },
		"bind":     func() error { return checkBind(bind) },
		"children": checkChildren,
		"readInto": func() error { return checkReadInto(readInto) },
		"add":      func() error { return checkAdd(isGorgoniaAdd, G.Add) },
		"machine":  checkMachine,
	} {
		if err := check(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// wantEngineError fails unless err is a self-test's error naming what.
func wantEngineError(t *testing.T, err error, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("a broken probe passed the self-test; want an error naming %q", what)
	}
	if !errors.Is(err, ErrEngineChanged) {
		t.Errorf("%v: does not match ErrEngineChanged", err)
	}
	if !strings.Contains(err.Error(), what) || !strings.Contains(err.Error(), "engine self-test") {
		t.Errorf("got %q, want an engine self-test error naming %q", err, what)
	}
}

// A bind that does not bind (as a changed (*Node).bind might) is reported,
// naming gorgonia's method.
func TestCheckBindReportsBrokenBind(t *testing.T) {
	wantEngineError(t, checkBind(func(*G.Node, G.Value) error { return nil }), "(*Node).bind")
	wantEngineError(t, checkBind(func(*G.Node, G.Value) error { return errors.New("refused") }), "(*Node).bind")
	// One that binds only values of the node's shape (as G.UnsafeLet does)
	// fails on the scalar a (1, 1) node must take.
	wantEngineError(t, checkBind(func(n *G.Node, v G.Value) error { return G.UnsafeLet(n, v) }), "(*Node).bind")
}

// A readInto that does not find G.Read's target, or takes another op for a
// read, is reported, naming readOp's field.
func TestCheckReadIntoReportsBrokenField(t *testing.T) {
	wantEngineError(t, checkReadInto(func(G.Op) *G.Value { return nil }), "readOp")
	var elsewhere G.Value
	wantEngineError(t, checkReadInto(func(G.Op) *G.Value { return &elsewhere }), "readOp")
	wantEngineError(t, checkReadInto(func(op G.Op) *G.Value {
		if p := readInto(op); p != nil {
			return p
		}
		return &elsewhere // every other op taken for a read
	}), "G.Read op")
}

// A recogniser that misses gorgonia's add, or takes another elementwise op
// for one, is reported; so is an "add" that does not add.
func TestCheckAddReportsBrokenRecogniser(t *testing.T) {
	wantEngineError(t, checkAdd(func(G.Op) bool { return false }, G.Add), "is not recognised")
	// The type alone, as if the operator were not checked: subtraction
	// (the same Go type) is taken for an add.
	sameType := func(op G.Op) bool { return isGorgoniaAdd(op) || strings.HasSuffix(op.String(), " false") }
	wantEngineError(t, checkAdd(sameType, G.Add), "taken for an add")
	// The string alone, as a different op printing "+ false" would be.
	g := G.NewGraph()
	a := G.NewVector(g, tensor.Float64, G.WithShape(2), G.WithName("a"))
	pow := G.Must(G.Pow(a, a))
	isPow := func(op G.Op) bool { return op.String() == pow.Op().String() }
	wantEngineError(t, checkAdd(isPow, G.Pow), "want [11 22]")
}

// A memRange that sees only a value's first element (how Machine compared
// values before) is reported, and so is one that misplaces a view.
func TestCheckMemRangeReportsFirstElementOnly(t *testing.T) {
	firstElement := func(v G.Value) (uintptr, uintptr) {
		lo, hi := memRange(v)
		if hi > lo {
			hi = lo + 1
		}
		return lo, hi
	}
	wantEngineError(t, checkMemRange(firstElement), "Memory of a (3, 2) float64")
	viewAtStart := func(v G.Value) (uintptr, uintptr) {
		lo, hi := memRange(v)
		if d, ok := v.(*tensor.Dense); ok && d.IsView() {
			return lo - 16, hi - 16
		}
		return lo, hi
	}
	wantEngineError(t, checkMemRange(viewAtStart), "view of row 1")
}

// overlapping sees ranges that share any byte, not only a start.
func TestOverlapping(t *testing.T) {
	for _, c := range []struct {
		lo, hi []uintptr
		want   []bool
	}{
		{nil, nil, []bool{}},
		{[]uintptr{100}, []uintptr{200}, []bool{false}},
		{[]uintptr{100, 200}, []uintptr{200, 300}, []bool{false, false}},               // adjacent
		{[]uintptr{100, 150}, []uintptr{200, 160}, []bool{true, true}},                 // inside
		{[]uintptr{150, 100}, []uintptr{250, 200}, []bool{true, true}},                 // crossing
		{[]uintptr{100, 100}, []uintptr{200, 200}, []bool{true, true}},                 // the same
		{[]uintptr{100, 120, 300}, []uintptr{400, 130, 350}, []bool{true, true, true}}, // two inside one
		{[]uintptr{100, 100, 300}, []uintptr{200, 100, 400}, []bool{false, false, false}},
		{[]uintptr{300, 0, 100, 0}, []uintptr{400, 0, 200, 0}, []bool{false, false, false, false}}, // no values
	} {
		got := overlapping(c.lo, c.hi)
		if len(got) != len(c.want) {
			t.Fatalf("overlapping(%v, %v) = %v, want %v", c.lo, c.hi, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("overlapping(%v, %v) = %v, want %v", c.lo, c.hi, got, c.want)
				break
			}
		}
	}
}

// keepShared stops a step from writing into an output that is a view into
// another value starting at another element than its first, which
// comparing first elements missed: writing into it would change that
// value.
func TestKeepSharedSeesViewsAtAnOffset(t *testing.T) {
	g := G.NewGraph()
	x := input(g, tensor.Float64, tensor.Shape{3, 2}, "x")
	a, b := G.Must(G.Add(x, x)), G.Must(G.Add(x, x)) // gorgonia's: ops that can write into an output
	whole := NewDense(tensor.Float64, tensor.Shape{3, 2}, make([]float64, 6))
	row, err := whole.Slice(G.S(1))
	if err != nil {
		t.Fatal(err)
	}
	other := NewDense(tensor.Float64, tensor.Shape{3, 2}, make([]float64, 6))
	doer := a.Op().(G.UsePreallocDoer)
	m := &Machine{steps: []step{
		{node: a, op: a.Op(), into: doer, out: whole},
		{node: b, op: b.Op(), into: doer, out: row.(G.Value), in: []*G.Node{x}},
	}}
	if err := G.Let(x, other); err != nil {
		t.Fatal(err)
	}
	m.keepShared()
	for i, s := range m.steps {
		if s.into != nil {
			t.Errorf("step %d: writes into its output, which shares memory with step %d's", i, 1-i)
		}
	}
	// Disjoint values: both keep writing into their outputs.
	m.steps[0].into, m.steps[1].into, m.steps[1].out = doer, doer, NewDense(tensor.Float64, tensor.Shape{2}, make([]float64, 2))
	m.keepShared()
	for i, s := range m.steps {
		if s.into == nil {
			t.Errorf("step %d: no longer writes into its output, which shares no memory", i)
		}
	}
}

// The defect readInto works around: G.Read's op does nothing when run, so
// a machine must fill the target itself (gorgonia's tape machine does it
// while compiling).
func TestGorgoniaReadOpDoesNothing(t *testing.T) {
	g := G.NewGraph()
	x := input(g, tensor.Float64, tensor.Shape{2}, "x")
	var v G.Value
	r := G.Read(x, &v)
	got, err := r.Op().Do(NewDense(tensor.Float64, tensor.Shape{2}, []float64{1, 2}))
	if got != nil || err != nil || v != nil {
		t.Errorf("gorgonia defect (readOp.Do does nothing) no longer reproduces: Do returned %v, %v and set the target to %v; Machine's readInto (graph/engine.go) may be dropped", got, err, v)
	}
}

// The defect bind works around: G.UnsafeLet refuses a value whose shape
// differs from its node's, which some of gorgonia's ops return (a scalar
// for a (1, 1) node) and its tape machine binds regardless.
func TestGorgoniaUnsafeLetRefusesOpShapes(t *testing.T) {
	g := G.NewGraph()
	n := G.NewMatrix(g, tensor.Float64, G.WithShape(1, 1), G.WithName("n"))
	if err := G.UnsafeLet(n, G.NewF64(1)); err == nil {
		t.Errorf("gorgonia defect (G.UnsafeLet refuses a scalar for a (1, 1) node) no longer reproduces: graph.bind (engine.go) might use it instead of go:linkname, if it no longer allocates")
	}
}
