// Package vec holds float32 elementwise kernels that a Transformer step
// calls on every activation, in Go assembly (AVX2 and FMA, eight lanes) with
// a Go version of the same arithmetic for other machines: Go does not
// vectorise loops, and GELU's tanh alone, one element at a time, took a
// fifth of a float32 training step.
package vec
