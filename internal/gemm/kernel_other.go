//go:build !amd64 || purego

package gemm

// kernelSets lists no assembly kernels: Gemm is gonum's.
func kernelSets() []*kernelSet { return nil }
