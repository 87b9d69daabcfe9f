package graph

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

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
//
// Some patterns run fused. A Linear's dx read only by a sum is added into
// that sum in place, and a LayerNorm's dx read only by a sum is summed in
// its own pass (accumulate.go): their nodes then hold no value. A fused
// attention's backward runs as one pass per head where it can, dP then
// the gradients of q, k and v, or the gradients of q and k as one op
// (attention_grads.go).
// Every node a caller can name (an input's or a node's gradient, a
// G.Read) keeps its value.
//
// Machine relies on a few of gorgonia's internals, all in engine.go, each
// checked once by NewMachine before the first graph runs.
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
	// failed is the lowest index of a step that failed in this concurrent
	// run, len(steps) if none did; errs holds each step's error.
	failed atomic.Int64
	errs   []error
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

// rewrite makes s run op on in, a fused op's inputs: op has no form
// writing into a given output, and the arguments are sized anew.
func (s *step) rewrite(op G.Op, in []*G.Node) {
	s.op, s.in, s.into = op, in, nil
	s.args = make([]G.Value, len(in))
}

// NewMachine returns a Machine for g, with its nodes in topological order.
// It returns an error for a nil graph or one with a cycle, and one matching
// ErrEngineChanged if the gorgonia the program is built with no longer
// behaves as engine.go relies on (checked once per program, on tiny graphs).
func NewMachine(g *G.ExprGraph) (*Machine, error) {
	if g == nil {
		return nil, errors.New("graph: compile: the graph is nil")
	}
	if err := checkEngine(); err != nil {
		return nil, err
	}
	return compile(g)
}

// compile is NewMachine without the engine's self-tests, which use it.
func compile(g *G.ExprGraph) (*Machine, error) {
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
	m.fuseAccumulations()
	m.fuseAttentionGrads()
	return m, nil
}

// plainAdd returns qkv's add op for n if n is gorgonia's add of two float
// tensors of n's shape, else nil.
//
// Workaround: gorgonia's add allocates at every run, even writing into a
// given output (its tensor.WithReuse option and its engine's iterators;
// TestGorgoniaAddAllocates pins it), and G.Grad sums every gradient with
// more than one contribution with it: a residual stream's, a tied table's.
// qkv's add (add.go) is the same arithmetic, a[i] + b[i], into an output it
// keeps. Which op is gorgonia's add is engine.go's isGorgoniaAdd.
func plainAdd(n *G.Node, in []*G.Node) G.Op {
	if len(in) != 2 || n.IsScalar() || !isGorgoniaAdd(n.Op()) {
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

// RunAll runs every op of the graph once. An error names the node whose op
// failed, the first in topological order, however the run is spread over
// goroutines (RunConcurrently); a panic inside an op, on whichever
// goroutine (internal/gemm/par raises its helpers' on the op's), is
// returned as such an error too.
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

// keepShared stops every step whose output, after the first run, shares
// memory with another node's value (an op that returns its input or a view
// of any part of it, or one of gorgonia's constants, which all graphs
// share) from writing into that output: it would change the other value.
// Values share memory when the bytes they span overlap (memRange), not
// only when they start at the same element.
func (m *Machine) keepShared() {
	var lo, hi []uintptr
	span := func(v G.Value) {
		l, h := memRange(v)
		lo, hi = append(lo, l), append(hi, h)
	}
	// One range per node: each step's output, then every other node a
	// step reads (inputs, parameters, constants).
	steps := map[*G.Node]bool{}
	for i := range m.steps {
		steps[m.steps[i].node] = true
		span(m.steps[i].out)
	}
	for _, s := range m.steps {
		for _, c := range s.in {
			if !steps[c] {
				steps[c] = true
				span(c.Value())
			}
		}
	}
	shared := overlapping(lo, hi)
	for i := range m.steps {
		if s := &m.steps[i]; shared[i] {
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
