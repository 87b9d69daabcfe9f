//go:build openblas

package graph

import (
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/netlib/blas/netlib"
	G "gorgonia.org/gorgonia"
)

// qkvBLAS is, with the openblas build tag, OpenBLAS (cgo; needs
// libopenblas-dev and CGO_LDFLAGS=-lopenblas): Linear's matrix products run
// on it instead of internal/gemm, called directly as in the default build.
// Attention's stay on internal/gemm. The default build stays pure Go.
type qkvBLAS = netlib.Implementation

// UseFastGEMM makes OpenBLAS, qkv's BLAS in this build, the BLAS of
// gorgonia (G.Use, which also sets gorgonia.org/tensor's) and of gonum's
// blas32 and blas64, for the whole program: every gorgonia matrix product
// (G.Mul, G.BatchedMatMul, hence ComposedAttention) and everything else
// that multiplies through those globals runs on it from then on.
//
// It is opt-in because those globals are the program's, not qkv's:
// importing graph changes none of them, in this build as in the default
// one. Call it once at start-up, before running graphs. It does not
// restore what was set before.
func UseFastGEMM() {
	G.Use(qkvBLAS{})
	blas32.Use(qkvBLAS{})
	blas64.Use(qkvBLAS{})
}
