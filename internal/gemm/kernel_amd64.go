//go:build amd64 && !purego

package gemm

//go:generate go run gen_kernels.go

import "golang.org/x/sys/cpu"

func init() {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		asmKernel32 = func(k int, a, b, c []float32, ldc int) { kernel6x16(k, &a[0], &b[0], &c[0], ldc) }
		asmKernel64 = func(k int, a, b, c []float64, ldc int) { kernel6x8(k, &a[0], &b[0], &c[0], ldc) }
		asmDirect32 = func(k int, a []float32, lda int, b, c []float32, ldc int) {
			kernel6x16Direct(k, &a[0], lda, &b[0], &c[0], ldc)
		}
		asmDirect64 = func(k int, a []float64, lda int, b, c []float64, ldc int) {
			kernel6x8Direct(k, &a[0], lda, &b[0], &c[0], ldc)
		}
	}
}

// kernel6x16 adds to the 6x16 float32 tile at c (leading dimension ldc) the
// product of the packed panels a (k columns of 6) and b (k rows of 16).
//
//go:noescape
func kernel6x16(k int, a, b, c *float32, ldc int)

// kernel6x8 is kernel6x16 for float64: a 6x8 tile.
//
//go:noescape
func kernel6x8(k int, a, b, c *float64, ldc int)

// kernel6x16Direct is kernel6x16 reading A's six rows, lda apart, from a
// instead of a packed panel.
//
//go:noescape
func kernel6x16Direct(k int, a *float32, lda int, b, c *float32, ldc int)

// kernel6x8Direct is kernel6x16Direct for float64.
//
//go:noescape
func kernel6x8Direct(k int, a *float64, lda int, b, c *float64, ldc int)
