//go:build !amd64 || purego

package decode

var asm *kernels
