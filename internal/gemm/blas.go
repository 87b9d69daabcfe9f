package gemm

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// BLAS is gonum's pure-Go BLAS with its matrix products, Sgemm and Dgemm,
// computed by Gemm. It satisfies gorgonia's and tensor's BLAS interfaces and
// gonum's blas32 and blas64.
type BLAS struct{ gonum.Implementation }

// Sgemm sets C = alpha op(A) op(B) + beta C for row-major float32 matrices.
// Arguments BLAS forbids panic with gonum's message, as they do in gonum.
func (impl BLAS) Sgemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if !valid(tA, tB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc) {
		impl.Implementation.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	Gemm(tA != blas.NoTrans, tB != blas.NoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Dgemm sets C = alpha op(A) op(B) + beta C for row-major float64 matrices.
// Arguments BLAS forbids panic with gonum's message, as they do in gonum.
func (impl BLAS) Dgemm(tA, tB blas.Transpose, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	if !valid(tA, tB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc) {
		impl.Implementation.Dgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	Gemm(tA != blas.NoTrans, tB != blas.NoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// valid reports whether a GEMM's arguments are ones BLAS accepts: known
// transpose flags, non-negative sizes, leading dimensions at least the
// stored rows' length, and slices long enough.
func valid(tA, tB blas.Transpose, m, n, k, lenA, lda, lenB, ldb, lenC, ldc int) bool {
	known := func(t blas.Transpose) bool { return t == blas.NoTrans || t == blas.Trans || t == blas.ConjTrans }
	if !known(tA) || !known(tB) || m < 0 || n < 0 || k < 0 {
		return false
	}
	rowA, colA := m, k
	if tA != blas.NoTrans {
		rowA, colA = k, m
	}
	rowB, colB := k, n
	if tB != blas.NoTrans {
		rowB, colB = n, k
	}
	fits := func(length, rows, cols, ld int) bool {
		return ld >= max(1, cols) && (rows == 0 || cols == 0 || length >= ld*(rows-1)+cols)
	}
	return fits(lenA, rowA, colA, lda) && fits(lenB, rowB, colB, ldb) && fits(lenC, m, n, ldc)
}
