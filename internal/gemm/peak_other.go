//go:build !amd64 || purego

package gemm

// peakLoops returns the scalar Go loop alone: there are no assembly
// kernels.
func peakLoops() []peakLoop { return []peakLoop{scalarLoop} }
