//go:build !linux || !amd64 || purego

package gemm

// HasAMX reports whether GemmBF16 runs on AMX: never in this build (AMX
// needs the amd64 assembly and Linux's permission for the tile state).
func HasAMX() bool { return false }

// GemmBF16 is, where HasAMX is false, Gemm: the float32 product.
func GemmBF16(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	Gemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}
