//go:build !amd64 || purego

package vec

// kernelSets lists no assembly kernels: everything runs the Go loops.
func kernelSets() []*kernelSet { return nil }
