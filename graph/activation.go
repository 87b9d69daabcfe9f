package graph

import (
	"fmt"
	"hash"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// GELU returns the Gaussian error linear unit of x in its tanh form,
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as PyTorch's
// gelu(approximate="tanh") and GPT-2 compute it. gorgonia has no erf op, and
// the tanh form differs from the exact one by less than 1e-3.
//
// It is one op each way instead of the nine elementwise gorgonia ops the
// formula takes (each of which allocates its result); the gradient
// recomputes the tanh from x rather than keeping it.
func GELU(x *G.Node) (*G.Node, error) { return activation(x, actGELU) }

// ReLU returns max(x, 0) elementwise. Its gradient is 1 where x > 0 and 0
// elsewhere, 0 included, as PyTorch's.
func ReLU(x *G.Node) (*G.Node, error) { return activation(x, actReLU) }

// The activations an activationOp computes.
const (
	actGELU = iota
	actReLU
)

var actNames = [...]string{actGELU: "gelu", actReLU: "relu"}

func activation(x *G.Node, kind int) (*G.Node, error) {
	if err := CheckNode(x, "input"); err != nil {
		return nil, fmt.Errorf("graph: %s: %w", actNames[kind], err)
	}
	if err := CheckFloat(x.Dtype()); err != nil {
		return nil, fmt.Errorf("graph: %s: %w", actNames[kind], err)
	}
	return G.ApplyOp(activationOp{kind: kind, shape: x.Shape().Clone()}, x)
}

// activationOp computes f(x), or with grad, dx = dy f'(x) from (x, dy).
type activationOp struct {
	kind  int
	shape tensor.Shape
	grad  bool
}

func (op activationOp) Arity() int {
	if op.grad {
		return 2
	}
	return 1
}

func (op activationOp) Type() hm.Type {
	in := []int{op.shape.Dims()}
	if op.grad {
		in = append(in, op.shape.Dims())
	}
	return opType(in, op.shape.Dims())
}

func (op activationOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.shape.Clone(), nil }

func (op activationOp) Do(vals ...G.Value) (G.Value, error) {
	return runKernel(op, vals, op.Arity(), op.shape,
		func(in [][]float64, out []float64) { runActivation(op, in, out) },
		func(in [][]float32, out []float32) { runActivation(op, in, out) })
}

// activationChunk is the number of elements one goroutine takes at a time.
const activationChunk = 1 << 13

// GELU's constants: sqrt(2/pi) and the cubic's coefficient.
const (
	geluC = 0.7978845608028654
	geluA = 0.044715
)

// runActivation works elementwise in chunks over the cores, in the dtype of
// its data: converting each float32 to float64 and back costs more than
// the arithmetic, because each conversion also waits for the previous
// element's (the SSE conversions keep the upper bits of their destination
// register), which chains the elements one after another.
func runActivation[T float32 | float64](op activationOp, in [][]T, out []T) {
	n := len(out)
	tanh := func(u T) T { return T(math.Tanh(float64(u))) }
	if f, ok := any(tanhFloat32).(func(T) T); ok {
		tanh = f
	}
	parallel((n+activationChunk-1)/activationChunk, func() any { return nil }, func(_ any, c int) {
		lo, hi := c*activationChunk, min((c+1)*activationChunk, n)
		x := in[0][lo:hi]
		y := out[lo:hi]
		switch {
		case op.kind == actReLU && !op.grad:
			for i, v := range x {
				y[i] = max(v, 0)
			}
		case op.kind == actReLU:
			for i, dy := range in[1][lo:hi] {
				if x[i] > 0 {
					y[i] = dy
				} else {
					y[i] = 0
				}
			}
		case !op.grad: // 0.5 x (1 + tanh(c (x + a x^3)))
			for i, u := range x {
				y[i] = 0.5 * u * (1 + tanh(geluC*(u+geluA*u*u*u)))
			}
		default: // dy (0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2))
			for i, dy := range in[1][lo:hi] {
				u := x[i]
				t := tanh(geluC * (u + geluA*u*u*u))
				y[i] = dy * (0.5*(1+t) + 0.5*u*(1-t*t)*geluC*(1+3*geluA*u*u))
			}
		}
	})
}

// tanhFloat32 is tanh to float32's precision (within 7 units in the last
// place, 4e-7 relative, of math.Tanh; TestTanhFloat32): Eigen's rational
// approximation, odd degree 13 over even degree 6, on x clamped to
// ±7.9053, where tanh rounds to ±1 in float32. math.Tanh calls math.Exp for
// |x| > 0.625 and took a third of a float32 training step in GELU.
func tanhFloat32(x float32) float32 {
	const (
		a1, a3, a5, a7 = 4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05, 5.12229709037114e-08
		a9, a11, a13   = -8.60467152213735e-11, 2.00018790482477e-13, -2.76076847742355e-16
		b0, b2, b4, b6 = 4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04, 1.19825839466702e-06
		limit          = 7.90531110763549805
	)
	if x > limit {
		x = limit
	} else if x < -limit {
		x = -limit
	}
	x2 := x * x
	p := ((((((a13*x2+a11)*x2+a9)*x2+a7)*x2+a5)*x2+a3)*x2 + a1) * x
	q := ((b6*x2+b4)*x2+b2)*x2 + b0
	return p / q
}

func (op activationOp) ReturnsPtr() bool     { return false }
func (op activationOp) CallsExtern() bool    { return false }
func (op activationOp) OverwritesInput() int { return -1 }

func (op activationOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.activation %d %v %t", op.kind, op.shape, op.grad)
}
func (op activationOp) Hashcode() uint32 { return hashOf(op) }

func (op activationOp) String() string {
	if op.grad {
		return "qkv." + actNames[op.kind] + "Grad"
	}
	return "qkv." + actNames[op.kind]
}

// DiffWRT: f(x) is differentiable in x; the gradient op is not
// differentiated again.
func (op activationOp) DiffWRT(inputs int) []bool {
	d := make([]bool, inputs)
	for i := range d {
		d[i] = !op.grad
	}
	return d
}

// SymDiff returns dx = dy f'(x) as an activationOp over (x, dy).
func (op activationOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	if op.grad {
		return nil, fmt.Errorf("graph: %v is not differentiable", op)
	}
	g := op
	g.grad = true
	dx, err := G.ApplyOp(g, inputs[0], grad)
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx}, nil
}
