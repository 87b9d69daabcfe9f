package graph

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/internal/graphtest"
)

// Helpers shared with the layers tests.
var (
	newRand   = graphtest.NewRand
	uniform   = graphtest.Uniform
	roundTo   = graphtest.RoundTo
	allFinite = graphtest.AllFinite
	noPanic   = graphtest.NoPanic
)

// The helpers in this file compute every expected value in plain Go, so that
// the tests never compare the package against itself.

// input returns a placeholder of dtype dt and the given shape.
func input(g *G.ExprGraph, dt tensor.Dtype, shape tensor.Shape, name string) *G.Node {
	return G.NewTensor(g, dt, len(shape), G.WithShape(shape...), G.WithName(name))
}

// param returns a float64 node holding vals, usable as a GradCheck parameter.
func param(g *G.ExprGraph, shape tensor.Shape, vals []float64, name string) Param {
	n := G.NewTensor(g, tensor.Float64, len(shape), G.WithShape(shape...), G.WithName(name),
		G.WithValue(NewDense(tensor.Float64, shape, vals)))
	return Param{Name: name, Node: n}
}

// eval binds lets, runs the graph of the first node once and returns copies of
// the values of nodes, read through G.Read so that reused buffers cannot alias
// them.
func eval(t *testing.T, lets map[*G.Node]G.Value, nodes ...*G.Node) [][]float64 {
	t.Helper()
	return evalOn(t, func(g *G.ExprGraph) (G.VM, error) { return NewMachine(g) }, lets, nodes...)
}

// evalTape is eval on gorgonia's own tape machine, for the defects that are
// that machine's.
func evalTape(t *testing.T, lets map[*G.Node]G.Value, nodes ...*G.Node) [][]float64 {
	t.Helper()
	return evalOn(t, func(g *G.ExprGraph) (G.VM, error) { return G.NewTapeMachine(g), nil }, lets, nodes...)
}

// evalOn is eval on the machine that compile makes.
func evalOn(t *testing.T, compile func(*G.ExprGraph) (G.VM, error), lets map[*G.Node]G.Value, nodes ...*G.Node) [][]float64 {
	t.Helper()
	if len(nodes) == 0 {
		t.Fatal("eval: no nodes")
	}
	vals := make([]G.Value, len(nodes))
	for i, n := range nodes {
		G.Read(n, &vals[i])
	}
	vm, err := compile(nodes[0].Graph())
	if err != nil {
		t.Fatalf("eval: %v", err)
	}
	defer vm.Close()
	for n, v := range lets {
		if err := G.Let(n, v); err != nil {
			t.Fatalf("eval: let %s: %v", n.Name(), err)
		}
	}
	if err := vm.RunAll(); err != nil {
		t.Fatalf("eval: run: %v", err)
	}
	out := make([][]float64, len(nodes))
	for i, v := range vals {
		if v == nil {
			t.Fatalf("eval: node %s was not read", nodes[i].Name())
		}
		if out[i], err = Float64s(v); err != nil {
			t.Fatalf("eval: %v", err)
		}
	}
	return out
}

// weightedSum returns sum(x ⊙ W) for a random constant W, a scalar cost whose
// gradient with respect to x is W pulled back through x: unlike sum(x) it does
// not vanish for softmax outputs, whose rows always sum to 1.
func weightedSum(t *testing.T, x *G.Node, rng *rand.Rand) *G.Node {
	t.Helper()
	shape := x.Shape().Clone()
	w := G.NewTensor(x.Graph(), x.Dtype(), len(shape), G.WithShape(shape...), G.WithName(fmt.Sprintf("w%d", rng.Uint32())),
		G.WithValue(NewDense(x.Dtype(), shape, uniform(rng, shape.TotalSize(), -1, 1))))
	p, err := G.HadamardProd(x, w)
	if err != nil {
		t.Fatal(err)
	}
	s, err := G.Sum(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// softmaxRef is the softmax of each row of length n of x, computed stably in
// float64.
func softmaxRef(x []float64, n int) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x); r += n {
		row := x[r : r+n]
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, v)
		}
		var s float64
		for j, v := range row {
			out[r+j] = math.Exp(v - m)
			s += out[r+j]
		}
		for j := range row {
			out[r+j] /= s
		}
	}
	return out
}

// logSoftmaxRef is the log-softmax of each row of length n of x.
func logSoftmaxRef(x []float64, n int) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x); r += n {
		row := x[r : r+n]
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, v)
		}
		var s float64
		for _, v := range row {
			s += math.Exp(v - m)
		}
		for j, v := range row {
			out[r+j] = v - m - math.Log(s)
		}
	}
	return out
}

// maskedSoftmaxRef is the softmax of each row of length n over the entries
// allow[i] permits; hidden entries and rows with nothing allowed are 0.
func maskedSoftmaxRef(x []float64, allow []bool, n int) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x); r += n {
		m := math.Inf(-1)
		for j := 0; j < n; j++ {
			if allow[r+j] {
				m = math.Max(m, x[r+j])
			}
		}
		var s float64
		for j := 0; j < n; j++ {
			if allow[r+j] {
				out[r+j] = math.Exp(x[r+j] - m)
				s += out[r+j]
			}
		}
		for j := 0; j < n; j++ {
			if s > 0 {
				out[r+j] /= s
			}
		}
	}
	return out
}

// tolFor is the relative tolerance of a value computed in dtype dt.
func tolFor(dt tensor.Dtype) float64 {
	if dt == tensor.Float32 {
		return 1e-5
	}
	return 1e-12
}

// closeTo reports whether got is within tol of want, relative to max(1, |want|).
func closeTo(got, want, tol float64) bool {
	if math.IsNaN(got) || math.IsNaN(want) {
		return false
	}
	return math.Abs(got-want) <= tol*math.Max(1, math.Abs(want))
}

// checkClose reports every entry of got that is not within tol of want.
func checkClose(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: got %d values, want %d", what, len(got), len(want))
		return
	}
	bad := 0
	for i := range got {
		if !closeTo(got[i], want[i], tol) {
			if bad < 5 {
				t.Errorf("%s: [%d] = %v, want %v (tol %g)", what, i, got[i], want[i], tol)
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d more mismatches", what, bad-5)
	}
}

var floatTypes = []tensor.Dtype{tensor.Float64, tensor.Float32}

// softmaxOf is the softmax over the last axis composed as
// exp(LogSoftmax(x)): the reference the defect pins and the softmax tests
// check, now that attention computes its softmax inside its own op and the
// package exports no separate softmax.
func softmaxOf(x *G.Node) (*G.Node, error) {
	l, err := LogSoftmax(x)
	if err != nil {
		return nil, err
	}
	return G.Exp(l)
}

// maskedSoftmaxOf returns softmax(scores + mask) of (B, Sq, Sk) scores as the
// weights of one-head Attention with the scores as queries and sqrt(Sk)·I as
// keys, so that Q K^T / sqrt(dk) is the scores again (exactly when Sk is a
// power of 4). It is differentiable in scores.
func maskedSoftmaxOf(scores *G.Node, mask *MaskNode) (*G.Node, error) {
	s := scores.Shape()
	b, sq, sk := s[0], s[1], s[2]
	eye := make([]float64, b*sk*sk)
	for n := 0; n < b; n++ {
		for j := 0; j < sk; j++ {
			eye[(n*sk+j)*sk+j] = math.Sqrt(float64(sk))
		}
	}
	k := G.NewConstant(NewDense(scores.Dtype(), tensor.Shape{b, sk, sk}, eye), G.WithName("sqrt_sk_eye"), G.In(scores.Graph()))
	_, w, err := Attend(scores, k, k, Spec{Heads: 1, Mask: mask})
	if err != nil {
		return nil, err
	}
	return Reshape(w, tensor.Shape{b, sq, sk})
}

// outputOf drops Attend's weights, for must.
func outputOf(out, _ *G.Node, err error) (*G.Node, error) { return out, err }
