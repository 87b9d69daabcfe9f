package layers

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/graphtest"
)

// Helpers shared with the graph tests.
var (
	newRand     = graphtest.NewRand
	uniformVals = graphtest.Uniform
	roundTo     = graphtest.RoundTo
	allFinite   = graphtest.AllFinite
	noPanic     = graphtest.NoPanic
)

// The helpers in this file build inputs, run graphs and compare numbers. Every
// expected value in this package's tests comes from reference_test.go, which
// is plain Go, or from a property that needs no expected value at all.

// randomIDs returns n token ids in [0, vocab).
func randomIDs(rng *rand.Rand, n, vocab int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = rng.IntN(vocab)
	}
	return ids
}

// valueNode returns a node of dtype dt holding vals: an input whose value is
// bound once, or, wrapped in a graph.Param, a learnable input for GradCheck.
func valueNode(g *G.ExprGraph, dt tensor.Dtype, shape tensor.Shape, vals []float64, name string) *G.Node {
	return G.NewTensor(g, dt, len(shape), G.WithShape(shape...), G.WithName(name),
		G.WithValue(graph.NewDense(dt, shape, vals)))
}

// inputParam returns a float64 learnable input of random values in [-1, 1).
func inputParam(g *G.ExprGraph, rng *rand.Rand, shape tensor.Shape, name string) graph.Param {
	return graph.Param{Name: name, Node: valueNode(g, tensor.Float64, shape, uniformVals(rng, shape.TotalSize(), -1, 1), name)}
}

// perturb overwrites every parameter with random values, so that a zero bias
// or a unit gain cannot hide a wrong gradient or a wrong forward pass: gains
// go to [0.5, 1.5), everything else to [-0.7, 0.7).
func perturb(t *testing.T, params []graph.Param, rng *rand.Rand) {
	t.Helper()
	for _, p := range params {
		lo, hi := -0.7, 0.7
		if strings.HasSuffix(p.Name, ".gain") {
			lo, hi = 0.5, 1.5
		}
		switch d := p.Node.Value().Data().(type) {
		case []float64:
			for i := range d {
				d[i] = lo + (hi-lo)*rng.Float64()
			}
		case []float32:
			for i := range d {
				d[i] = float32(lo + (hi-lo)*rng.Float64())
			}
		default:
			t.Fatalf("perturb: parameter %q holds %T", p.Name, d)
		}
	}
}

// scaleParam multiplies the value of the parameter called name by f.
func scaleParam(t *testing.T, params []graph.Param, name string, f float64) {
	t.Helper()
	for _, p := range params {
		if p.Name != name {
			continue
		}
		switch d := p.Node.Value().Data().(type) {
		case []float64:
			for i := range d {
				d[i] *= f
			}
		case []float32:
			for i := range d {
				d[i] *= float32(f)
			}
		}
		return
	}
	t.Fatalf("scaleParam: no parameter %q", name)
}

// readParams copies the current values of params, by name.
func readParams(t *testing.T, params []graph.Param) map[string][]float64 {
	t.Helper()
	out := make(map[string][]float64, len(params))
	for _, p := range params {
		if _, dup := out[p.Name]; dup {
			t.Fatalf("two parameters are called %q", p.Name)
		}
		v, err := graph.Float64s(p.Node.Value())
		if err != nil {
			t.Fatalf("parameter %q: %v", p.Name, err)
		}
		out[p.Name] = v
	}
	return out
}

// weightedSum returns sum(out ⊙ C) for a fixed random constant C of out's
// shape: a scalar cost whose gradient reaches every entry of a non-scalar
// output with a different weight. It also returns C, flat.
func weightedSum(t *testing.T, out *G.Node, rng *rand.Rand) (*G.Node, []float64) {
	t.Helper()
	s := out.Shape()
	last := s[len(s)-1]
	flat := out
	var err error
	if len(s) != 2 {
		// Reduce a matrix only: gorgonia's reductions over several axes of a
		// 4-D tensor go through the defective middle-axis path.
		if flat, err = graph.Reshape(out, tensor.Shape{s.TotalSize() / last, last}); err != nil {
			t.Fatal(err)
		}
	}
	c := uniformVals(rng, s.TotalSize(), -1, 1)
	cn := G.NewConstant(graph.NewDense(out.Dtype(), flat.Shape(), c), G.WithName("C"))
	prod, err := G.HadamardProd(flat, cn)
	if err != nil {
		t.Fatal(err)
	}
	cost, err := G.Sum(prod)
	if err != nil {
		t.Fatal(err)
	}
	return cost, c
}

// runner runs one compiled graph many times, re-binding inputs in between,
// and returns copies of the values of the nodes it was made for.
type runner struct {
	vm    G.VM
	vals  []G.Value
	nodes []*G.Node
}

// newRunner compiles the graph of nodes[0]. The nodes are read through G.Read,
// which clones, so that a later run cannot overwrite a returned value.
func newRunner(t *testing.T, nodes []*G.Node) *runner {
	t.Helper()
	r := &runner{vals: make([]G.Value, len(nodes)), nodes: nodes}
	for i, n := range nodes {
		G.Read(n, &r.vals[i])
	}
	vm, err := graph.NewMachine(nodes[0].Graph())
	if err != nil {
		t.Fatal(err)
	}
	r.vm = vm
	t.Cleanup(func() { vm.Close() })
	return r
}

// run calls bind (which sets the inputs, may be nil), runs the graph once and
// returns the values of the runner's nodes as float64s.
func (r *runner) run(t *testing.T, bind func() error) [][]float64 {
	t.Helper()
	if bind != nil {
		if err := bind(); err != nil {
			t.Fatal(err)
		}
	}
	defer r.vm.Reset()
	if err := r.vm.RunAll(); err != nil {
		t.Fatalf("run: %v", err)
	}
	out := make([][]float64, len(r.vals))
	for i, v := range r.vals {
		if v == nil {
			t.Fatalf("run: node %s was not read", r.nodes[i].Name())
		}
		f, err := graph.Float64s(v)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = f
	}
	return out
}

// evalOnce compiles, runs once and returns the values of nodes.
func evalOnce(t *testing.T, bind func() error, nodes ...*G.Node) [][]float64 {
	t.Helper()
	return newRunner(t, nodes).run(t, bind)
}

// maxAbsDiff returns max_i |a_i - b_i|, +Inf if the lengths differ or any
// entry is NaN.
func maxAbsDiff(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var m float64
	for i := range a {
		d := math.Abs(a[i] - b[i])
		if math.IsNaN(d) {
			return math.Inf(1)
		}
		m = math.Max(m, d)
	}
	return m
}

// checkClose fails unless got and want agree within tol in every entry.
func checkClose(t *testing.T, what string, got, want []float64, tol float64) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: got %d values, want %d", what, len(got), len(want))
		return math.Inf(1)
	}
	d := maxAbsDiff(got, want)
	if !(d <= tol) {
		for i := range got {
			if !(math.Abs(got[i]-want[i]) <= tol) {
				t.Errorf("%s: max |got - want| = %.3g > %.3g; first at [%d]: got %v, want %v", what, d, tol, i, got[i], want[i])
				break
			}
		}
	}
	return d
}

// newScope returns the root scope of a fresh graph.
func newScope(t *testing.T, dt tensor.Dtype, seed uint64) *Scope {
	t.Helper()
	s, err := NewScope(G.NewGraph(), dt, seed)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// allowFunc returns m.At, or nil (everything allowed) for a nil mask.
func allowFunc(m *graph.Mask) func(b, i, j int) bool {
	if m == nil {
		return nil
	}
	return m.At
}

// paddingMask returns the key-padding mask for lengths, as graph.Mask, and the
// same as a (B, S, S) input node bound to it.
func paddingMask(t *testing.T, s *Scope, lengths []int, sq, sk int, name string) (graph.Mask, *graph.MaskNode) {
	t.Helper()
	m, err := graph.KeyPadding(lengths, sq, sk)
	if err != nil {
		t.Fatal(err)
	}
	return m, maskInput(t, s, m, name)
}

// maskInput returns a mask input node bound to m.
func maskInput(t *testing.T, s *Scope, m graph.Mask, name string) *graph.MaskNode {
	t.Helper()
	n, err := graph.NewMaskInput(s.Graph(), s.Dtype(), m.B, m.Sq, m.Sk, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Set(m); err != nil {
		t.Fatal(err)
	}
	return n
}
