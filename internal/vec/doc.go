// Package vec holds the elementwise kernels that a Transformer step calls
// on every activation, in Go assembly with a Go version of the same
// arithmetic for other machines: Go does not vectorise loops, and GELU's
// tanh alone, one element at a time, took a fifth of a float32 training
// step (and two fifths of a float64 one, GELU64). The assembly comes in two
// sets, chosen at run time (kernels.go): AVX-512 (sixteen float32 or eight
// float64 lanes, the last block of a row under a mask) where the CPU has
// AVX512F and AVX512VL, else AVX2 and FMA (eight or four lanes, the last
// few elements in Go; Adam runs the AVX2 kernels on both). Most kernels are float32; ReLU, Adam, the row sums
// and GELU64 have float64 forms.
package vec
