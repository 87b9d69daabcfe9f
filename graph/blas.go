//go:build !openblas

package graph

import fastgemm "github.com/qkv-dev/qkv/internal/gemm"

// qkvBLAS is the BLAS qkv's own ops multiply with, called directly (never
// through gorgonia's or gonum's global BLAS, which are the user's): in the
// default build internal/gemm's, gonum's pure-Go BLAS with a packed,
// register-blocked GEMM in Go assembly, split over the cores (5 to 9 times
// gonum's GEMM on a Transformer's shapes; BenchmarkSgemm in internal/gemm).
// Pure Go, no cgo. A concrete type, so that its calls are static.
type qkvBLAS = fastgemm.BLAS
