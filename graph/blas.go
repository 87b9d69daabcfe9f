//go:build !openblas

package graph

import (
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	G "gorgonia.org/gorgonia"

	fastgemm "github.com/qkv-dev/qkv/internal/gemm"
)

// qkvBLAS is the BLAS qkv's own ops multiply with, called directly (never
// through gorgonia's or gonum's global BLAS, which are the user's): in the
// default build internal/gemm's, gonum's pure-Go BLAS with a packed,
// register-blocked GEMM in Go assembly, split over the cores (5 to 9 times
// gonum's GEMM on a Transformer's shapes; BenchmarkSgemm in internal/gemm).
// Pure Go, no cgo. A concrete type, so that its calls are static.
type qkvBLAS = fastgemm.BLAS

// UseFastGEMM makes qkv's GEMM (internal/gemm; OpenBLAS with the openblas
// build tag) the BLAS of gorgonia (G.Use, which also sets gorgonia.org/tensor's)
// and of gonum's blas32 and blas64, for the whole program: every
// gorgonia matrix product (G.Mul, G.BatchedMatMul, hence ComposedAttention)
// and everything else that multiplies through those globals, such as
// gonum's mat package, runs on it from then on.
//
// It is opt-in because those globals are the program's, not qkv's:
// importing graph changes none of them. qkv's own ops (Linear, the fused and
// flash attention) call qkv's GEMM directly and are as fast without it;
// call it once at start-up, before running graphs, if the program also
// multiplies with gorgonia's own ops. It does not restore what was set
// before.
func UseFastGEMM() {
	G.Use(qkvBLAS{})
	blas32.Use(qkvBLAS{})
	blas64.Use(qkvBLAS{})
}
