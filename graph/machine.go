package graph

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
	_ "unsafe" // go:linkname

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Machine runs a gorgonia graph: each op node once per RunAll, in
// topological order, in the caller's goroutine. The graph, its ops and the
// gradients G.Grad added to it stay gorgonia's; only what calls each op's Do
// is qkv's.
//
// It replaces gorgonia's tape machine (G.NewTapeMachine), which allocates
// at every instruction of every run: the slice of its inputs, the boxed
// arguments of its logging calls, register moves and the dual values it
// adds gradients into. That was most of a small model's allocations per
// training step and most of its garbage collection (gorgonia's
// (*execOp).exec in an allocation profile). Here each node keeps its input
// slice and its output from one run to the next: an op that can write into
// a given tensor (G.UsePreallocDoer) writes into last run's, and qkv's own
// ops keep theirs (kernel.go). So a node's value is valid until the next
// RunAll, as with the tape machine: copy what you keep.
//
// A parameter's gradient is the value of its gradient node, which p.Grad()
// returns (G.Grad sets it): there are no dual values to bind.
type Machine struct {
	steps []step
	ran   bool // at least once

	// What RunConcurrently sets up: how many goroutines run steps, the
	// steps that read each step's output, how many steps each waits for,
	// how many it still waits for in this run, and the queue of steps
	// ready to run.
	workers int
	users   [][]int
	needs   []int32
	pending []atomic.Int32
	ready   chan int
}

// step is one op node and what its runs reuse.
type step struct {
	node *G.Node
	op   G.Op
	// into is op's form that writes into a given output, nil where op has
	// none or where its output shares memory with another value (a view),
	// which writing into would change.
	into G.UsePreallocDoer
	in   []*G.Node
	args []G.Value
	out  G.Value
	// own is set on a parameter's gradient whose value is shared with
	// another node (an op that returned its input, say a repeat of
	// gorgonia's constant 1 one time): the step binds a copy of its own, so
	// that clipping or zeroing the gradient in place changes nothing else.
	// This is what the tape machine's dual values gave.
	own   bool
	owned G.Value
	// read is where a G.Read node puts a copy of its input's value, nil
	// for every other op.
	read *G.Value
}

// NewMachine returns a Machine for g, with its nodes in topological order.
// It returns an error for a nil graph or one with a cycle.
func NewMachine(g *G.ExprGraph) (*Machine, error) {
	if g == nil {
		return nil, errors.New("graph: compile: the graph is nil")
	}
	sorted, err := G.Sort(g) // dependents first
	if err != nil {
		return nil, fmt.Errorf("graph: compile: %w", err)
	}
	m := &Machine{}
	for _, n := range slices.Backward(sorted) {
		op := n.Op()
		if op == nil || isConstant(op) {
			continue // an input or a constant: its value is already there
		}
		in := children(g, n)
		if add := plainAdd(n, in); add != nil {
			op = add
		}
		s := step{node: n, op: op, in: in, args: make([]G.Value, len(in))}
		s.into, _ = op.(G.UsePreallocDoer)
		s.read = readInto(op)
		m.steps = append(m.steps, s)
	}
	return m, nil
}

// children returns n's inputs in the order its op takes them.
func children(g *G.ExprGraph, n *G.Node) []*G.Node {
	var in []*G.Node
	for it := g.From(n.ID()); it.Next(); {
		in = append(in, it.Node().(*G.Node))
	}
	return in
}

// plainAdd returns qkv's add op for n if n is gorgonia's add of two float
// tensors of n's shape, else nil.
//
// Workaround: gorgonia's add allocates at every run, even writing into a
// given output (its tensor.WithReuse option and its engine's iterators;
// TestGorgoniaAddAllocates pins it), and G.Grad sums every gradient with
// more than one contribution with it: a residual stream's, a tied table's.
// qkv's add (add.go) is the same arithmetic, a[i] + b[i], into an output it
// keeps.
func plainAdd(n *G.Node, in []*G.Node) G.Op {
	if len(in) != 2 || n.IsScalar() || reflect.TypeOf(n.Op()).String() != "gorgonia.elemBinOp" || n.Op().String() != "+ false" {
		return nil
	}
	shape := n.Shape()
	for _, c := range in {
		if c.IsScalar() || !c.Shape().Eq(shape) || c.Dtype() != n.Dtype() {
			return nil
		}
	}
	if n.Dtype() != tensor.Float64 && n.Dtype() != tensor.Float32 {
		return nil
	}
	return addOp{shape: shape, buf: new(output)}
}

// isConstant reports whether op is one of gorgonia's constants, whose node
// holds its value without running.
func isConstant(op G.Op) bool {
	_, ok := op.(interface{ Value() G.Value })
	return ok
}

// RunAll runs every op of the graph once. An error names the node whose op
// failed; a panic inside an op is returned as such an error too, since it
// happens in the caller's goroutine here.
func (m *Machine) RunAll() error {
	if m.ran && m.workers > 1 {
		return m.runConcurrently()
	}
	for i := range m.steps {
		if err := m.steps[i].runRecovering(); err != nil {
			return err
		}
	}
	if !m.ran {
		m.ran = true
		m.keepShared()
		for i := range m.steps {
			if s := &m.steps[i]; s.own {
				if err := s.copyOwned(s.out); err != nil {
					return fmt.Errorf("graph: run: node %v (%v): %w", s.node.Name(), s.op, err)
				}
			}
		}
	}
	return nil
}

// keepShared stops every step whose output, after the first run, is
// another node's value too (an op that returns its input or a view of it,
// or one of gorgonia's constants, which all graphs share) from writing into
// that output: it would change the other value.
func (m *Machine) keepShared() {
	owners := map[uintptr]int{}
	count := func(v G.Value) {
		if p := address(v); p != 0 {
			owners[p]++
		}
	}
	seen := map[*G.Node]bool{}
	for _, s := range m.steps {
		for _, c := range s.in {
			if !seen[c] {
				seen[c] = true
				count(c.Value())
			}
		}
	}
	for i := range m.steps {
		if !seen[m.steps[i].node] {
			count(m.steps[i].out)
		}
	}
	for i := range m.steps {
		s := &m.steps[i]
		if p := address(s.out); p != 0 && owners[p] > 1 {
			s.into = nil
			s.own = isGradient(s.node)
		}
	}
}

// isGradient reports whether n is the gradient of an input node: the value
// an optimizer reads, clips and zeroes in place.
func isGradient(n *G.Node) bool {
	for _, x := range n.DerivOf() {
		if x.Op() == nil {
			return true
		}
	}
	return false
}

// address returns where v's data begins, 0 for no value: a dense tensor's
// first element, or the scalar a gorgonia scalar value points to.
func address(v G.Value) uintptr {
	if d, ok := v.(*tensor.Dense); ok {
		return d.Uintptr()
	}
	if r := reflect.ValueOf(v); r.Kind() == reflect.Pointer {
		return r.Pointer()
	}
	return 0
}

// run reads the step's inputs, runs its op and binds the result to its node
// where it is a new value (the first run, or an op that cannot write into
// last run's output).
func (s *step) run() error {
	for i, c := range s.in {
		if s.args[i] = c.Value(); s.args[i] == nil {
			return fmt.Errorf("input %d (%v) has no value: bind it with G.Let before running", i, c.Name())
		}
	}
	if s.read != nil {
		return copyInto(s.read, s.args[0])
	}
	var v G.Value
	var err error
	if s.into != nil && s.out != nil {
		if v, err = s.into.UsePreallocDo(s.out, s.args...); err != nil {
			s.into = nil // as the tape machine does: Do, from now on
		}
	}
	if v == nil {
		if v, err = s.op.Do(s.args...); err != nil {
			return err
		}
	}
	if s.own {
		return s.copyOwned(v)
	}
	if v == s.out {
		return nil
	}
	s.out = v
	return bind(s.node, v)
}

// copyOwned copies v into the step's own value and binds that to its node.
func (s *step) copyOwned(v G.Value) error {
	if s.owned == nil {
		c, err := G.CloneValue(v)
		if err != nil {
			return err
		}
		s.owned = c
		return bind(s.node, c)
	}
	_, err := G.Copy(s.owned, v)
	return err
}

// LetOnce binds v to n with G.Let unless n holds v already: for inputs
// whose buffer the caller rewrites in place between runs (targets, masks,
// a decoder's caches), so that a run costs no G.Let, which clones the
// node's shape to check it.
func LetOnce(n *G.Node, v *tensor.Dense) error {
	if n.Value() == G.Value(v) {
		return nil
	}
	return G.Let(n, v)
}

// bind binds v to n as the tape machine does, without G.UnsafeLet's checks:
// some of gorgonia's ops return a value whose shape differs from the one
// their node declares (a slice down to one element returns a scalar for a
// (1, 1) node), and the tape machine binds it regardless; G.UnsafeLet
// refuses it, and clones the node's shape on every call.
//
//go:linkname bind gorgonia.org/gorgonia.(*Node).bind
func bind(n *G.Node, v G.Value) error

// readInto returns where op, if it is the op of a G.Read node, puts what it
// reads; nil for any other op.
//
// Workaround: gorgonia's readOp.Do does nothing. Its tape machine
// recognises the op while compiling and copies the value itself, through
// the op's unexported field. So this reads that field by reflection
// (TestReadOpIsDoneByTheMachine pins the defect).
func readInto(op G.Op) *G.Value {
	v := reflect.ValueOf(op)
	if v.Kind() != reflect.Struct || v.Type().String() != "gorgonia.readOp" {
		return nil
	}
	f := v.FieldByName("into")
	if f.Kind() != reflect.Pointer || f.Type().Elem() != reflect.TypeFor[G.Value]() {
		return nil
	}
	return (*G.Value)(f.UnsafePointer())
}

// copyInto does what the tape machine does for a G.Read: it copies v into
// the value *dst holds, or into a clone of v where *dst is nil, so that a
// later run cannot overwrite what was read.
func copyInto(dst *G.Value, v G.Value) error {
	if *dst != nil {
		_, err := G.Copy(*dst, v)
		return err
	}
	c, err := G.CloneValue(v)
	if err != nil {
		return err
	}
	*dst = c
	return nil
}

// Reset does nothing: a Machine needs no reset between runs. It is there so
// that a Machine is a G.VM.
func (m *Machine) Reset() {}

// Close does nothing: a Machine holds no resources beyond its memory. It is
// there so that a Machine is a G.VM.
func (m *Machine) Close() error { return nil }

var _ G.VM = (*Machine)(nil)
