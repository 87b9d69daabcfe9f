//go:build amd64 && !purego

package decode

import "golang.org/x/sys/cpu"

var asm = func() *kernels {
	if cpu.X86.HasAVX512F {
		return &kernels{name: "AVX-512 assembly", mv4: mv4AVX512, mv4x2: mv4x2AVX512, mv1: mv1AVX512}
	}
	return nil
}()

//go:noescape
func mv4AVX512(y, x, w *float32, k, pstride int)

//go:noescape
func mv1AVX512(y, x, w *float32, k int)

//go:noescape
func mv4x2AVX512(y0, y1, x0, x1, w *float32, k, pstride int)
