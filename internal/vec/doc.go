// Package vec holds float32 elementwise kernels that a Transformer step
// calls on every activation, in Go assembly with a Go version of the same
// arithmetic for other machines: Go does not vectorise loops, and GELU's
// tanh alone, one element at a time, took a fifth of a float32 training
// step. The assembly comes in two sets, chosen at run time (kernels.go):
// AVX-512 (sixteen float32 lanes, the last block of a row under a mask)
// where the CPU has AVX512F and AVX512VL, else AVX2 and FMA (eight lanes, the last few
// elements in Go).
package vec
