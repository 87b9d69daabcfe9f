//go:build !amd64 || purego

package gemm

import "unsafe"

// prefetchRows does nothing where the kernels are not qkv's assembly.
func prefetchRows(p unsafe.Pointer, stride, rows, bytes int, write bool) {}
