package graph

import (
	"fmt"
	"hash"
	"hash/fnv"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// opType is the gorgonia type of a custom op whose inputs are tensors of
// the given ranks and whose output has rank out, all of one dtype.
func opType(inputs []int, out int) hm.Type {
	a := hm.TypeVariable('a')
	ts := make([]hm.Type, 0, len(inputs)+1)
	for _, dims := range inputs {
		ts = append(ts, &G.TensorType{Dims: dims, Of: a})
	}
	return hm.NewFnType(append(ts, &G.TensorType{Dims: out, Of: a})...)
}

// output is where a kernel op writes its result, kept from one run of the
// graph to the next: allocating (and zeroing) a fresh tensor for every op of
// every step was most of a training step's allocations and its garbage
// collection, and reusing one keeps it in cache. So, as in PyTorch's or any
// framework's buffer reuse, a node's value is valid until the graph runs
// again; read or copy it before then (train and infer copy what they keep).
//
// It also keeps what the op needs at every run besides its output, so that
// a run allocates nothing: the inputs' element slices, and the op's job for
// internal/gemm/par with its per-worker scratch (see jobOf).
type output struct {
	t    *tensor.Dense
	in32 [][]float32
	in64 [][]float64
	job  any
}

// get returns the output tensor for dtype dt and the given shape: last run's
// when it has them, else a new one; zero clears a reused tensor for kernels
// that add into their output.
func (o *output) get(dt tensor.Dtype, shape tensor.Shape, zero bool) *tensor.Dense {
	if o == nil {
		return tensor.New(tensor.Of(dt), tensor.WithShape(shape.Clone()...))
	}
	if o.t == nil || o.t.Dtype() != dt || !o.t.Shape().Eq(shape) {
		o.t = tensor.New(tensor.Of(dt), tensor.WithShape(shape.Clone()...))
	} else if zero {
		o.t.Zero()
	}
	return o.t
}

// kernelOp is a custom op that writes into an output of its own.
type kernelOp interface {
	G.Op
	withOutput(*output) G.Op
}

// apply applies op to inputs with a new output. Every kernel op is applied
// through it, so no two nodes share an output (TestOutputsAreNotShared).
func apply(op kernelOp, inputs ...*G.Node) (*G.Node, error) {
	return G.ApplyOp(op.withOutput(new(output)), inputs...)
}

// kernel is a custom op's computation, instantiated for each dtype. A type
// parameter rather than closures or an interface value: either would
// allocate at every call.
type kernel interface {
	fmt.Stringer
	run64(in [][]float64, out []float64)
	run32(in [][]float32, out []float32)
}

// runKernel is the Do of qkv's custom ops: it checks that the arity inputs
// are dense tensors of one float dtype, takes the output of the given shape
// from buf (zeroed if zero), and fills it with the kernel instantiated for
// that dtype.
func runKernel[K kernel](op K, vals []G.Value, arity int, shape tensor.Shape, buf *output, zero bool) (G.Value, error) {
	if len(vals) != arity {
		return nil, fmt.Errorf("graph: %v: want %d inputs, got %d", op, arity, len(vals))
	}
	dt, err := denseInputs(op, vals)
	if err != nil {
		return nil, err
	}
	out := buf.get(dt, shape, zero)
	switch dt {
	case tensor.Float64:
		op.run64(typed(vals, buf.inputs64()), out.Float64s())
	case tensor.Float32:
		op.run32(typed(vals, buf.inputs32()), out.Float32s())
	}
	return out, nil
}

// denseInputs checks that vals, op's inputs (at least one), are dense
// tensors of one float dtype, and returns it. Generic in op, so that
// passing it allocates nothing.
func denseInputs[K fmt.Stringer](op K, vals []G.Value) (tensor.Dtype, error) {
	dt := vals[0].Dtype()
	for _, v := range vals {
		if _, ok := v.(*tensor.Dense); !ok || v.Dtype() != dt {
			return dt, fmt.Errorf("graph: %v: inputs must be dense %v tensors, got %T %v", op, dt, v, v.Dtype())
		}
	}
	if dt != tensor.Float64 && dt != tensor.Float32 {
		return dt, fmt.Errorf("graph: %v: dtype %v is not supported", op, dt)
	}
	return dt, nil
}

// typed returns the element slices of vals, dense tensors of T's dtype, in
// *in, which it reuses.
func typed[T float32 | float64](vals []G.Value, in *[][]T) [][]T {
	*in = (*in)[:0]
	for _, v := range vals {
		*in = append(*in, elements[T](v.(*tensor.Dense)))
	}
	return *in
}

// inputs32 and inputs64 are where typed puts a run's inputs: o's, or a
// new slice for an op without an output of its own.
func (o *output) inputs32() *[][]float32 {
	if o == nil {
		return new([][]float32)
	}
	return &o.in32
}

func (o *output) inputs64() *[][]float64 {
	if o == nil {
		return new([][]float64)
	}
	return &o.in64
}

// elements returns d's elements as a []T, for d of T's dtype. Dense.Data
// would box the slice in an interface: two allocations per call, for every
// input and output of every kernel of every step.
func elements[T float32 | float64](d *tensor.Dense) []T {
	if _, ok := any(T(0)).(float32); ok {
		return any(d.Float32s()).([]T)
	}
	return any(d.Float64s()).([]T)
}

// hashOf hashes what an op writes with WriteHash.
func hashOf(op interface{ WriteHash(hash.Hash) }) uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}

// heads returns head h of sequence b of an (B, n, w) tensor from row i on:
// an (n - i, dk) matrix whose rows are w apart, read and written in place.
func heads[T float32 | float64](x []T, b, n, w, h, dk, i int) []T {
	return x[(b*n+i)*w+h*dk:]
}
