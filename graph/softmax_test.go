package graph

import (
	"fmt"
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func TestSoftmaxLastAxis(t *testing.T) {
	for i, test := range []struct {
		shape tensor.Shape
		scale float64
	}{
		{shape: tensor.Shape{2, 5}, scale: 1},
		{shape: tensor.Shape{3, 4}, scale: 30},
		{shape: tensor.Shape{2, 3, 4}, scale: 1},
		{shape: tensor.Shape{2, 3, 4}, scale: 50},
		{shape: tensor.Shape{2, 2, 3, 4}, scale: 1},
		{shape: tensor.Shape{2, 2, 3, 4}, scale: 100},
		{shape: tensor.Shape{1, 1, 1, 1}, scale: 1},
	} {
		for _, dt := range floatTypes {
			rng := newRand(uint64(100 + i))
			n := test.shape[len(test.shape)-1]
			xs := roundTo(dt, uniform(rng, test.shape.TotalSize(), -test.scale, test.scale))
			// Rows of very different offsets, the case gorgonia's SoftMax gets wrong.
			for r := 0; r < len(xs)/n; r++ {
				for j := 0; j < n; j++ {
					xs[r*n+j] = roundTo(dt, []float64{xs[r*n+j] + float64(r%3)*500 - 500})[0]
				}
			}
			g := G.NewGraph()
			x := input(g, dt, test.shape, "x")
			sm, err := softmaxOf(x)
			if err != nil {
				t.Fatalf("test %d %v: Softmax: %v", i, dt, err)
			}
			lsm, err := LogSoftmax(x)
			if err != nil {
				t.Fatalf("test %d %v: LogSoftmax: %v", i, dt, err)
			}
			for _, out := range []*G.Node{sm, lsm} {
				if !out.Shape().Eq(test.shape) || out.Dtype() != dt {
					t.Errorf("test %d: output %v %v, want %v %v", i, out.Shape(), out.Dtype(), test.shape, dt)
				}
			}
			got := eval(t, map[*G.Node]G.Value{x: NewDense(dt, test.shape, xs)}, sm, lsm)
			tol := tolFor(dt)
			checkClose(t, fmt.Sprintf("test %d: Softmax %v %v", i, test.shape, dt), got[0], softmaxRef(xs, n), tol)
			// log-probabilities are compared in absolute terms up to the row's
			// magnitude: float32 carries ~7 digits of max(|x|).
			checkClose(t, fmt.Sprintf("test %d: LogSoftmax %v %v", i, test.shape, dt), got[1], logSoftmaxRef(xs, n), tol*(test.scale+1))
			for r := 0; r < len(xs)/n; r++ {
				var s float64
				for j := 0; j < n; j++ {
					s += got[0][r*n+j]
				}
				if !closeTo(s, 1, float64(n)*tol) {
					t.Errorf("test %d %v: row %d of the softmax sums to %v", i, dt, r, s)
				}
			}
		}
	}
}

// float32 logits near 1e3 and within-row gaps above 88 (exp(88) is the edge of
// float32) must stay finite and right.
func TestSoftmaxLargeFloat32(t *testing.T) {
	shape := tensor.Shape{4, 4}
	xs := []float64{
		1000, 999, 1002, 998,
		0, 100, -50, 95, // the max is not the row's first entry
		1000, 850, 900, 1001,
		-1000, 1000, 0, 999.5,
	}
	g := G.NewGraph()
	x := input(g, tensor.Float32, shape, "x")
	sm, err := softmaxOf(x)
	if err != nil {
		t.Fatal(err)
	}
	lsm, err := LogSoftmax(x)
	if err != nil {
		t.Fatal(err)
	}
	got := eval(t, map[*G.Node]G.Value{x: NewDense(tensor.Float32, shape, xs)}, sm, lsm)
	if !allFinite(got[0]) || !allFinite(got[1]) {
		t.Fatalf("not finite: softmax %v, log-softmax %v", got[0], got[1])
	}
	checkClose(t, "Softmax float32", got[0], softmaxRef(xs, 4), 1e-6)
	// log(p) = -2000 for the smallest entry: ~7 float32 digits of that.
	want := logSoftmaxRef(xs, 4)
	for i := range want {
		if math.Abs(got[1][i]-want[i]) > 1e-6*math.Max(1, math.Abs(want[i]))+1e-6 {
			t.Errorf("LogSoftmax float32 [%d] = %v, want %v", i, got[1][i], want[i])
		}
	}
}

// maskFromFunc returns a (b, sq, sk) mask allowing (n, i, j) when allow says so.
func maskFromFunc(b, sq, sk int, allow func(n, i, j int) bool) Mask {
	m := Mask{B: b, Sq: sq, Sk: sk, Allow: make([]bool, b*sq*sk)}
	for n := 0; n < b; n++ {
		for i := 0; i < sq; i++ {
			for j := 0; j < sk; j++ {
				m.Allow[(n*sq+i)*sk+j] = allow(n, i, j)
			}
		}
	}
	return m
}

// testMask is a (2, 3, 4) mask with a ragged pattern, one fully visible row
// and one fully hidden row (sequence 1, query 2).
func testMask() Mask {
	return maskFromFunc(2, 3, 4, func(n, i, j int) bool {
		switch {
		case n == 1 && i == 2:
			return false
		case n == 0 && i == 0:
			return true
		default:
			return (n+i+j)%3 != 0
		}
	})
}

func TestSoftmaxErrors(t *testing.T) {
	g := G.NewGraph()
	for _, test := range []struct {
		name  string
		build func() (*G.Node, error)
		want  string
	}{
		{"softmax of a vector", func() (*G.Node, error) {
			return softmaxOf(G.NewVector(g, tensor.Float64, G.WithShape(4), G.WithName("v")))
		}, "2-D, 3-D or 4-D"},
		{"softmax of a 5-D tensor", func() (*G.Node, error) {
			return softmaxOf(input(g, tensor.Float64, tensor.Shape{1, 2, 1, 2, 3}, "t5"))
		}, "2-D, 3-D or 4-D"},
		{"softmax of ints", func() (*G.Node, error) {
			return softmaxOf(G.NewMatrix(g, tensor.Int, G.WithShape(2, 3), G.WithName("ints")))
		}, "not supported"},
		{"log-softmax of a vector", func() (*G.Node, error) {
			return LogSoftmax(G.NewVector(g, tensor.Float64, G.WithShape(4), G.WithName("v2")))
		}, "2-D, 3-D or 4-D"},
	} {
		var out *G.Node
		err := noPanic(t, test.name, func() (err error) {
			out, err = test.build()
			return err
		})
		if err == nil {
			t.Errorf("%s: no error, got node of shape %v", test.name, out.Shape())
			continue
		}
		if !strings.Contains(err.Error(), test.want) {
			t.Errorf("%s: error %q does not mention %q", test.name, err, test.want)
		}
	}
}
