//go:build amd64 && !purego

package gemm

import "unsafe"

// prefetchRows asks the CPU to bring rows rows of bytes bytes each, stride
// bytes apart from p, into L1 (for writing, with write): the operands a tile
// is about to read or store, whose lines the kernels would otherwise miss
// one demand load after another (see prefetchA and prefetchC).
//
//go:noescape
func prefetchRows(p unsafe.Pointer, stride, rows, bytes int, write bool)
