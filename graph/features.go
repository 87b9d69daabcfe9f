package graph

import (
	"fmt"
	"hash"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/internal/gemm/par"
)

// FeatureMap is a feature map φ of linear attention (LinearAttend), by the
// name config.json and the CLI use. Linear attention replaces the softmax
// weight exp(q·k/sqrt(d)) by φ(q)·φ(k), which lets the sum over keys be
// carried as a (dφ, dv) state instead of an (Sq, Sk) matrix.
type FeatureMap string

// The feature maps.
const (
	// FeatureELU1 is elu(x)+1: x+1 for x > 0, exp(x) otherwise, always
	// positive (Katharopoulos et al. 2020, "Transformers are RNNs").
	FeatureELU1 FeatureMap = "elu1"
	// FeatureReLU is max(x, 0).
	FeatureReLU FeatureMap = "relu"
	// FeatureTaylor is Based's second-order Taylor map of exp (Arora et al.
	// 2024; zoology/mixers/based.py TaylorExp.forward): for one head's d
	// features x,
	//
	//	φ(x) = [1, x/d^(1/4), vec(x⊗x)/(sqrt(2)·sqrt(d))]      1 + d + d² features
	//
	// so that φ(q)·φ(k) = 1 + s + s²/2 with s = q·k/sqrt(d), the Taylor
	// series of exp(s) to the second order, which is positive (at least
	// 1/2). vec(x⊗x)[i*d+j] = x_i x_j, the outer product flattened row by
	// row, as torch's flatten(-2).
	FeatureTaylor FeatureMap = "taylor"
	// FeatureIdentity is φ(x) = x: Features returns x itself.
	FeatureIdentity FeatureMap = "identity"
)

// Valid reports whether f is one of the feature maps.
func (f FeatureMap) Valid() bool {
	switch f {
	case FeatureELU1, FeatureReLU, FeatureTaylor, FeatureIdentity:
		return true
	}
	return false
}

// Dim is the number of features per head after the map, for d features
// per head before it: 1 + d + d² for FeatureTaylor, d otherwise.
func (f FeatureMap) Dim(d int) int {
	if f == FeatureTaylor {
		return 1 + d + d*d
	}
	return d
}

// Features applies f to each head's d features of x (..., heads*d) and
// returns (..., heads*f.Dim(d)): head h's features of the result are
// φ of head h's of x, side by side in head order as x's. It is
// differentiable in x, with a hand-written backward pass:
//
//	elu1     dx = dy             where x > 0, dy exp(x) elsewhere
//	relu     dx = dy             where x > 0, 0 elsewhere (0 at x = 0)
//	taylor   dx_i = dy1_i/d^(1/4) + sum_j (dy2_ij + dy2_ji) x_j / (sqrt(2) sqrt(d))
//	identity x is returned unchanged (no op)
//
// Errors name what is wrong: the node, its rank or dtype, heads that do not
// divide the last axis, an unknown map, a result too large.
func Features(x *G.Node, heads int, f FeatureMap) (*G.Node, error) {
	const what = "graph: linear attention features"
	if err := CheckNode(x, "input"); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if !f.Valid() {
		return nil, fmt.Errorf("%s: unknown feature map %q, want %q, %q, %q or %q", what, string(f), FeatureELU1, FeatureReLU, FeatureTaylor, FeatureIdentity)
	}
	s := x.Shape()
	if s.Dims() < 1 {
		return nil, shapeErrorf("%s: input %q is a scalar, want (..., heads*d)", what, x.Name())
	}
	if err := CheckFloat(x.Dtype()); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	w := s[len(s)-1]
	if heads <= 0 || w%heads != 0 {
		return nil, shapeErrorf("%s: input %q has %d features, which %d heads do not divide", what, x.Name(), w, heads)
	}
	if f == FeatureIdentity {
		return x, nil
	}
	d := w / heads
	if f == FeatureTaylor && d > 46340 { // d² would pass MaxElements (and could overflow int)
		return nil, fmt.Errorf("%s: %d features per head give %d²-wide Taylor features, more than graph.MaxElements", what, d, d)
	}
	if err := CheckElements(heads, f.Dim(d)); err != nil {
		return nil, fmt.Errorf("%s: features per row %w", what, err)
	}
	out := s.Clone()
	out[len(out)-1] = heads * f.Dim(d)
	if err := CheckElements(out...); err != nil {
		return nil, fmt.Errorf("%s: output %w", what, err)
	}
	return apply(featureOp{shape: s.Clone(), heads: heads, f: f}, x)
}

// featureOp is Features' op: φ(x) from x, or (grad) dx from x and dy.
type featureOp struct {
	pureOp
	shape tensor.Shape // of x
	heads int
	f     FeatureMap
	grad  bool
	buf   *output
}

func (op featureOp) withOutput(b *output) G.Op { op.buf = b; return op }

func (op featureOp) Arity() int {
	if op.grad {
		return 2
	}
	return 1
}

func (op featureOp) Type() hm.Type {
	n := op.shape.Dims()
	if op.grad {
		return opType([]int{n, n}, n)
	}
	return opType([]int{n}, n)
}

// d is the number of features per head of x.
func (op featureOp) d() int { return op.shape[len(op.shape)-1] / op.heads }

// outShape is the shape of φ(x), in buf when it fits.
func (op featureOp) outShape(buf []int) tensor.Shape {
	s := tensor.Shape(append(buf[:0], op.shape...))
	s[len(s)-1] = op.heads * op.f.Dim(op.d())
	return s
}

func (op featureOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	if op.grad {
		return op.shape.Clone(), nil
	}
	return op.outShape(nil), nil
}

func (op featureOp) Do(vals ...G.Value) (G.Value, error) {
	var buf [8]int
	shape := op.shape
	if !op.grad {
		shape = op.outShape(buf[:])
	}
	// Sizes the kernel relies on: gorgonia checks ranks, not sizes.
	sizes := [2]int{op.shape.TotalSize(), op.outShape(buf[:]).TotalSize()}
	for i, want := range sizes[:min(len(vals), 2)] {
		if d, ok := vals[i].(*tensor.Dense); ok && d != nil && d.Shape().TotalSize() != want {
			return nil, fmt.Errorf("graph: %v: input %d has shape %v, want %d elements", op, i, d.Shape(), want)
		}
	}
	return runKernel(op, vals, op.Arity(), shape, op.buf, false)
}

func (op featureOp) run64(in [][]float64, out []float64) { runFeatures(op, in, out) }
func (op featureOp) run32(in [][]float32, out []float32) { runFeatures(op, in, out) }

// featureRows is the number of rows (of heads*d features) per item of
// runFeatures.
const featureRows = 64

// runFeatures maps the rows of x, featureRows rows per item, each item
// writing only its rows of out.
func runFeatures[T float32 | float64](op featureOp, in [][]T, out []T) {
	j := jobOf[featureJob[T]](op.buf)
	j.op, j.in, j.out = op, in, out
	rows := len(in[0]) / (op.heads * op.d())
	par.Run((rows+featureRows-1)/featureRows, par.WorkersFor(len(out)+len(in[0])), j)
}

// featureJob is runFeatures' work: item c is rows [c*featureRows, ...).
type featureJob[T float32 | float64] struct {
	op  featureOp
	in  [][]T
	out []T
}

func (j *featureJob[T]) Item(_, c int) {
	op, d := j.op, j.op.d()
	dd := op.f.Dim(d)
	w, wo := op.heads*d, op.heads*dd
	x := j.in[0]
	rows := len(x) / w
	c1 := T(1 / math.Sqrt(math.Sqrt(float64(d))))     // 1/d^(1/4)
	c2 := T(1 / (math.Sqrt2 * math.Sqrt(float64(d)))) // 1/(sqrt(2) sqrt(d))
	for r := c * featureRows; r < min((c+1)*featureRows, rows); r++ {
		for h := range op.heads {
			xh := x[r*w+h*d:][:d]
			if !op.grad {
				mapHead(op.f, xh, j.out[r*wo+h*dd:][:dd], c1, c2)
				continue
			}
			mapHeadGrad(op.f, xh, j.in[1][r*wo+h*dd:][:dd], j.out[r*w+h*d:][:d], c1, c2)
		}
	}
}

// mapHead writes φ(x) of one head into y.
func mapHead[T float32 | float64](f FeatureMap, x, y []T, c1, c2 T) {
	d := len(x)
	switch f {
	case FeatureELU1:
		for i, v := range x {
			if v > 0 {
				y[i] = v + 1
			} else {
				y[i] = T(math.Exp(float64(v)))
			}
		}
	case FeatureReLU:
		for i, v := range x {
			y[i] = max(v, 0)
		}
	case FeatureTaylor:
		y[0] = 1
		for i, v := range x {
			y[1+i] = v * c1
		}
		sq := y[1+d:]
		for i, a := range x {
			a *= c2
			for j, b := range x {
				sq[i*d+j] = a * b
			}
		}
	}
}

// mapHeadGrad writes dx of one head from x and dy = dL/dφ(x).
func mapHeadGrad[T float32 | float64](f FeatureMap, x, dy, dx []T, c1, c2 T) {
	d := len(x)
	switch f {
	case FeatureELU1:
		for i, v := range x {
			if v > 0 {
				dx[i] = dy[i]
			} else {
				dx[i] = dy[i] * T(math.Exp(float64(v)))
			}
		}
	case FeatureReLU:
		for i, v := range x {
			if v > 0 {
				dx[i] = dy[i]
			} else {
				dx[i] = 0
			}
		}
	case FeatureTaylor:
		// y2_ij = c2 x_i x_j: dx_i = c1 dy1_i + c2 sum_j (dy2_ij + dy2_ji) x_j
		sq := dy[1+d:]
		for i := range x {
			var s T
			for j, b := range x {
				s += (sq[i*d+j] + sq[j*d+i]) * b
			}
			dx[i] = c1*dy[1+i] + c2*s
		}
	}
}

func (op featureOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "qkv.features %v %d %s %v", op.shape, op.heads, op.f, op.grad)
}
func (op featureOp) Hashcode() uint32 { return hashOf(op) }

func (op featureOp) String() string {
	if op.grad {
		return "qkv.FeaturesGrad(" + string(op.f) + ")"
	}
	return "qkv.Features(" + string(op.f) + ")"
}

// DiffWRT: φ(x) is differentiable in x; the gradient op is not
// differentiated again.
func (op featureOp) DiffWRT(inputs int) []bool { return diffAll(inputs, !op.grad) }

// SymDiff returns dx as a featureOp over (x, dy).
func (op featureOp) SymDiff(inputs G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	if op.grad {
		return nil, fmt.Errorf("graph: %v is not differentiable", op)
	}
	if len(inputs) != 1 {
		return nil, fmt.Errorf("graph: %v: want 1 input, got %d", op, len(inputs))
	}
	g := op
	g.grad = true
	dx, err := apply(g, inputs[0], grad)
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx}, nil
}
