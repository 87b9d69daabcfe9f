package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestGemmTriangle: on every path, GemmTriangle gives Gemm's C bit for bit
// where its triangle leaves C wanted, for A with zeros in the triangle
// (LowerA, UpperA) and for any A (LowerC), over every transpose, beta 0
// and 1, diagonals moved both ways, partial tiles and products deeper
// than a block of the shared dimension; with LowerC it leaves some tile
// wholly above the diagonal unwritten where there is one, and a stored
// tile with nothing to sum is 0.
func TestGemmTriangle(t *testing.T) {
	t.Run("float32", func(t *testing.T) { testGemmTriangle[float32](t) })
	t.Run("float64", func(t *testing.T) { testGemmTriangle[float64](t) })
}

func testGemmTriangle[T Float](t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	sentinel := T(math.NaN())
	for _, path := range paths() {
		usePath(t, path.set)
		for _, s := range []shape{{65, 65, 32, 0}, {65, 32, 65, 1}, {64, 64, 64, 0}, {130, 70, 300, 2}, {7, 40, 530, 0}, {300, 24, 300, 1}} {
			for _, tri := range []Triangle{{LowerC, 0}, {LowerC, 64}, {LowerC, -13}, {LowerA, 0}, {LowerA, 40}, {LowerA, -5}, {UpperA, 0}, {UpperA, 64}, {UpperA, -20}, {UpperA, 290}} {
				for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
					for _, beta := range []T{0, 1} {
						name := fmt.Sprintf("%s %+v %+v trans %v beta %v", path.name, s, tri, tr, beta)
						a, lda, b, ldb, c, ldc := operands[T](r, s, tr[0], tr[1])
						zeroTriangle(a, lda, tr[0], s, tri)
						want := append([]T(nil), c...)
						Gemm(tr[0], tr[1], s.m, s.n, s.k, 1, a, lda, b, ldb, beta, want, ldc)
						got := append([]T(nil), c...)
						if beta == 0 {
							for i := range got {
								got[i] = sentinel
							}
						}
						var w Workspace[T]
						w.GemmTriangle(tri, tr[0], tr[1], s.m, s.n, s.k, 1, a, lda, b, ldb, beta, got, ldc)
						skipped := 0
						for i := range s.m {
							for j := range s.n {
								g, x := got[i*ldc+j], want[i*ldc+j]
								if tri.Shape == LowerC && j > i+tri.Off {
									if g != g {
										skipped++
									}
									continue
								}
								if g != x && !(g != g && x != x) {
									t.Fatalf("%s: C[%d][%d] = %v, Gemm gives %v", name, i, j, g, x)
								}
							}
						}
						if path.set != nil && tri.Shape == LowerC && beta == 0 && whollyAbove[T](s, tri) && skipped == 0 {
							t.Errorf("%s: no tile above the diagonal was skipped", name)
						}
					}
				}
			}
		}
	}
}

// zeroTriangle sets to 0 the entries of op(A) (m, k) that tri says are 0:
// op(A)[i][q] for q > i + Off (LowerA) or q < i + Off (UpperA).
func zeroTriangle[T Float](a []T, lda int, transA bool, s shape, tri Triangle) {
	for i := range s.m {
		for q := range s.k {
			if tri.Shape == LowerA && q > i+tri.Off || tri.Shape == UpperA && q < i+tri.Off {
				if transA {
					a[q*lda+i] = 0
				} else {
					a[i*lda+q] = 0
				}
			}
		}
	}
}

// whollyAbove reports whether C (s.m, s.n) has a tile of the active kernels
// whose columns all lie past tri's diagonal for all its rows: one in the
// first row of tiles.
func whollyAbove[T Float](s shape, tri Triangle) bool {
	mr, nr := tile[T]()
	for j0 := 0; j0 < s.n; j0 += nr {
		if s.m > 0 && j0 > min(mr, s.m)-1+tri.Off {
			return true
		}
	}
	return false
}

// TestTriangleWork: the count is the terms GemmTriangle sums, read off its
// result for A and B of ones (each element of C is then the number of
// terms its tile summed; a skipped tile keeps its 0), on every path, and
// m n k where nothing is skipped.
func TestTriangleWork(t *testing.T) {
	for _, path := range paths() {
		usePath(t, path.set)
		for _, s := range []shape{{65, 65, 32, 0}, {65, 32, 65, 0}, {64, 1, 257, 0}, {130, 70, 300, 0}, {300, 24, 530, 0}} {
			for _, tri := range []Triangle{{Full, 0}, {LowerC, 0}, {LowerC, 64}, {LowerA, 0}, {LowerA, -5}, {UpperA, 0}, {UpperA, 64}} {
				a, b, c := ones(s.m*s.k), ones(s.k*s.n), make([]float64, s.m*s.n)
				var w Workspace[float64]
				w.GemmTriangle(tri, false, false, s.m, s.n, s.k, 1, a, s.k, b, s.n, 0, c, s.n)
				var summed float64
				for _, x := range c {
					summed += x
				}
				if got := TriangleWork[float64](tri, s.m, s.n, s.k); got != summed {
					t.Errorf("%s %+v %+v: TriangleWork = %v, GemmTriangle summed %v terms", path.name, s, tri, got, summed)
				}
				if full := float64(s.m * s.n * s.k); tri.Shape == Full && summed != full {
					t.Errorf("%s %+v: Full summed %v terms, want m n k = %v", path.name, s, summed, full)
				}
			}
		}
	}
}

func ones(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = 1
	}
	return s
}
