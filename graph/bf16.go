package graph

import (
	"errors"
	"sync/atomic"

	fastgemm "github.com/qkv-dev/qkv/internal/gemm"
)

// bf16Linear is UseBF16Linear's switch, read by every float32 product of
// Linear and LinearT (linear.go's gemm).
var bf16Linear atomic.Bool

// ErrNoAMX is UseBF16Linear's refusal where the CPU lacks AMX-BF16 (or the
// operating system does not grant its tile state, or the build is purego):
// bf16 products there would be slower than float32's, not faster.
var ErrNoAMX = errors.New("no AMX-BF16 on this CPU (or Linux refused its tile state, or a purego build)")

// UseBF16Linear switches, for the whole program, the float32 matrix
// products of Linear and LinearT (forward, and both gradients) between
// float32 (off, the default) and bf16 (on): the operands rounded to bf16,
// the products summed in float32 on AMX (internal/gemm's GemmBF16), the
// weights, activations and gradients still float32. Attention's products,
// float64 graphs and gorgonia's own ops are unchanged. It returns the
// previous setting; turning it on where the CPU lacks AMX returns ErrNoAMX
// and changes nothing. Importing graph leaves it off.
//
// A switch and not an option of each op because it is a property of the
// run, not of the model: a checkpoint trained either way loads and runs
// with either. Graphs running while it changes see the change from their
// next product on.
func UseBF16Linear(on bool) (was bool, err error) {
	if on && !fastgemm.HasAMX() {
		return bf16Linear.Load(), ErrNoAMX
	}
	return bf16Linear.Swap(on), nil
}
