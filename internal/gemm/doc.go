// Package gemm multiplies matrices fast enough that a Transformer's training
// step is not spent waiting on them: C = alpha op(A) op(B) + beta C for
// row-major float32 and float64 matrices, in pure Go with Go assembly
// (AVX-512, or AVX2 and FMA) for the inner product of a block, split over
// the cores.
//
// qkv's graph package calls it directly for its own ops (Linear, attention)
// in the default build; BLAS (gonum's BLAS with Sgemm and Dgemm replaced)
// is what graph.UseFastGEMM installs, when a program opts in, as
// gorgonia's, tensor's and gonum's global BLAS. Why: gonum's pure-Go GEMM
// reaches about 9 GFLOP/s on a Transformer's shapes because its inner
// loops are SSE axpy and dot products that reload C for every element of
// the shared dimension. Here,
// as in BLIS and OpenBLAS, op(A) and op(B) are copied into panels that the
// kernel reads in order, and a block of C stays in registers for the whole
// shared dimension: 12 x 32 float32 (12 x 16 float64) in 24 of AVX-512's
// 32 zmm registers where the CPU has AVX512F, else 6 x 16 (6 x 8) in 12 of
// AVX2's 16 ymm registers. Machines without AVX2 and FMA, other
// architectures and the purego build tag use gonum's GEMM instead: the same
// blocking compiled from Go loops was slower than it.
//
// GemmBF16 is the float32 product with its operands rounded to bf16 and
// the products summed in float32 on AMX (TDPBF16PS), where the CPU has it
// (HasAMX): 2.9-4.5 times one core's float32 Gemm on the nanoGPT preset's
// projections. graph.UseBF16Linear routes Linear layers to it, opt-in.
package gemm
