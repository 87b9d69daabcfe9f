package graph

import (
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	G "gorgonia.org/gorgonia"
)

// UseFastGEMM makes qkvBLAS, qkv's GEMM (internal/gemm; OpenBLAS with the
// openblas build tag), the BLAS of gorgonia (G.Use, which also sets
// gorgonia.org/tensor's) and of gonum's blas32 and blas64, for the whole
// program: every gorgonia matrix product (G.Mul, G.BatchedMatMul, hence
// ComposedAttention) and everything else that multiplies through those
// globals, such as gonum's mat package, runs on it from then on.
//
// It is opt-in because those globals are the program's, not qkv's:
// importing graph changes none of them, in either build. qkv's own ops
// (Linear, the fused and flash attention) call qkvBLAS directly and are as
// fast without it; call it once at start-up, before running graphs, if the
// program also multiplies with gorgonia's own ops. It does not restore what
// was set before.
func UseFastGEMM() {
	G.Use(qkvBLAS{})
	blas32.Use(qkvBLAS{})
	blas64.Use(qkvBLAS{})
}
