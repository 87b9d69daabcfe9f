//go:build !openblas

package graph

import (
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	G "gorgonia.org/gorgonia"

	fastgemm "github.com/qkv-dev/qkv/internal/gemm"
)

// In the default build, the matrix products of gorgonia's ops and of Linear
// run on internal/gemm: gonum's BLAS with a packed, register-blocked GEMM in
// Go assembly, split over the cores (5 to 9 times gonum's GEMM on a
// Transformer's shapes; BenchmarkSgemm in internal/gemm). Pure Go, no cgo.
func init() {
	G.Use(fastgemm.BLAS{})
	blas32.Use(fastgemm.BLAS{})
	blas64.Use(fastgemm.BLAS{})
}
