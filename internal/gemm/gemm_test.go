package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// naive is the definition: C = alpha op(A) op(B) + beta C, summed in float64.
func naive[T Float](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for q := 0; q < k; q++ {
				ai, bi := i*lda+q, q*ldb+j
				if transA {
					ai = q*lda + i
				}
				if transB {
					bi = j*ldb + q
				}
				av, bv := a[ai], b[bi]
				s += float64(av) * float64(bv)
			}
			prev := float64(beta) * float64(c[i*ldc+j])
			if beta == 0 {
				prev = 0
			}
			c[i*ldc+j] = T(float64(alpha)*s + prev)
		}
	}
}

type shape struct{ m, n, k, pad int }

// shapes cover single elements, partial tiles on every side, each blocking
// size crossed (kc, mc, nc), padded leading dimensions, and a Transformer's
// products (rows x model width x hidden width).
var shapes = []shape{
	{1, 1, 1, 0}, {6, 16, 1, 0}, {7, 17, 3, 2}, {5, 9, 300, 1}, {130, 20, 5, 0},
	{3, 2100, 4, 3}, {64, 64, 1024, 0}, {1024, 64, 64, 0}, {61, 33, 257, 5}, {0, 5, 5, 0}, {5, 5, 0, 0},
}

func randSlice[T Float](r *rand.Rand, n int) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = T(r.Float64()*2 - 1)
	}
	return s
}

// operands returns random A, B and C for op(A) (m, k) and op(B) (k, n) with
// leading dimensions padded by pad.
func operands[T Float](r *rand.Rand, s shape, transA, transB bool) (a []T, lda int, b []T, ldb int, c []T, ldc int) {
	rowA, colA := s.m, s.k
	if transA {
		rowA, colA = s.k, s.m
	}
	rowB, colB := s.k, s.n
	if transB {
		rowB, colB = s.n, s.k
	}
	lda, ldb, ldc = colA+s.pad, colB+s.pad, s.n+s.pad
	return randSlice[T](r, rowA*lda), lda, randSlice[T](r, rowB*ldb), ldb, randSlice[T](r, s.m*ldc), ldc
}

func testGemm[T Float](t *testing.T, tol float64) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range shapes {
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			for _, ab := range [][2]T{{1, 0}, {1, 1}, {-0.5, 0.25}, {0, 2}} {
				a, lda, b, ldb, c, ldc := operands[T](r, s, tr[0], tr[1])
				if ab[1] == 0 {
					for i := range c {
						c[i] = T(math.NaN()) // beta 0 must overwrite, not scale
					}
				}
				want := append([]T(nil), c...)
				naive(tr[0], tr[1], s.m, s.n, s.k, ab[0], a, lda, b, ldb, ab[1], want, ldc)
				Gemm(tr[0], tr[1], s.m, s.n, s.k, ab[0], a, lda, b, ldb, ab[1], c, ldc)
				for i := range c {
					same := c[i] == want[i] || (c[i] != c[i] && want[i] != want[i]) // padding keeps even NaN
					if i%ldc >= s.n && !same || i%ldc < s.n && !(math.Abs(float64(c[i]-want[i])) <= tol*(1+math.Abs(float64(want[i])))) {
						t.Fatalf("%+v trans %v alpha %v beta %v: C[%d] = %v, want %v", s, tr, ab[0], ab[1], i, c[i], want[i])
					}
				}
			}
		}
	}
}

// TestGemm compares the assembly kernels (packed and direct), serial and
// split over two goroutines, and the path without them (gonum's GEMM), with
// the definition for every transpose, alpha and beta.
func TestGemm(t *testing.T) {
	asm32, asm64, direct32, direct64 := asmKernel32, asmKernel64, asmDirect32, asmDirect64
	defer func() { asmKernel32, asmKernel64, asmDirect32, asmDirect64 = asm32, asm64, direct32, direct64 }()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, k := range []string{"asm", "gonum"} {
		if k == "asm" && asm32 == nil {
			t.Log("no AVX2 and FMA here: only the path without them is tested")
			continue
		}
		if k == "gonum" {
			asmKernel32, asmKernel64, asmDirect32, asmDirect64 = nil, nil, nil, nil
		}
		for _, procs := range []int{1, 2} {
			runtime.GOMAXPROCS(procs)
			t.Run(fmt.Sprintf("%s/procs=%d/float32", k, procs), func(t *testing.T) { testGemm[float32](t, 2e-5) })
			t.Run(fmt.Sprintf("%s/procs=%d/float64", k, procs), func(t *testing.T) { testGemm[float64](t, 1e-13) })
		}
	}
}

// TestBLASRefusesLikeGonum: arguments BLAS forbids panic with gonum's
// message instead of reading out of bounds.
func TestBLASRefusesLikeGonum(t *testing.T) {
	a, b, c := make([]float32, 6), make([]float32, 6), make([]float32, 4)
	for _, tc := range []struct {
		name    string
		call    func(blas.Float32Level3)
		message string
	}{
		{"short lda", func(i blas.Float32Level3) { i.Sgemm(blas.NoTrans, blas.NoTrans, 2, 2, 3, 1, a, 2, b, 2, 0, c, 2) }, "bad leading dimension"},
		{"short A", func(i blas.Float32Level3) { i.Sgemm(blas.NoTrans, blas.NoTrans, 3, 2, 3, 1, a, 3, b, 2, 0, c, 2) }, "insufficient length"},
		{"negative m", func(i blas.Float32Level3) { i.Sgemm(blas.NoTrans, blas.NoTrans, -1, 2, 3, 1, a, 3, b, 2, 0, c, 2) }, "m < 0"},
		{"bad transpose", func(i blas.Float32Level3) { i.Sgemm('x', blas.NoTrans, 2, 2, 3, 1, a, 3, b, 2, 0, c, 2) }, "transpose"},
	} {
		want := panicOf(func() { tc.call(gonum.Implementation{}) })
		got := panicOf(func() { tc.call(BLAS{}) })
		if want == "" || got != want || !strings.Contains(strings.ToLower(got), tc.message) {
			t.Errorf("%s: BLAS panicked with %q, gonum with %q (want it to mention %q)", tc.name, got, want, tc.message)
		}
	}
}

func panicOf(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}

// A Transformer step's products at batch 32 x sequence 32, width 64 and
// feed-forward 256: forward (rows x in x out), the input gradient, and the
// weight gradient (in x out over all rows).
var benchShapes = []struct {
	name           string
	transA, transB bool
	m, n, k        int
}{
	{"xW/1024x64x256", false, false, 1024, 256, 64},
	{"dyWt/1024x256x64", false, true, 1024, 64, 256},
	{"xtdy/64x256x1024", true, false, 64, 256, 1024},
	{"square/256", false, false, 256, 256, 256},
}

func BenchmarkSgemm(b *testing.B) {
	for _, s := range benchShapes {
		for _, impl := range []struct {
			name string
			blas blas.Float32Level3
		}{{"qkv", BLAS{}}, {"gonum", gonum.Implementation{}}} {
			b.Run(s.name+"/"+impl.name, func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, 2))
				a, lda, bm, ldb, c, ldc := operands[float32](r, shape{s.m, s.n, s.k, 0}, s.transA, s.transB)
				tA, tB := blas.NoTrans, blas.NoTrans
				if s.transA {
					tA = blas.Trans
				}
				if s.transB {
					tB = blas.Trans
				}
				for b.Loop() {
					impl.blas.Sgemm(tA, tB, s.m, s.n, s.k, 1, a, lda, bm, ldb, 0, c, ldc)
				}
				b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// TestWorkspaceEqualsGemm: a Workspace's Gemm gives the package's Gemm's
// result bit for bit, split over goroutines or not, call after call.
func TestWorkspaceEqualsGemm(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	r := rand.New(rand.NewPCG(9, 9))
	var w Workspace[float32]
	for _, s := range []shape{{130, 70, 300, 1}, {1024, 64, 64, 0}, {7, 300, 40, 2}} {
		a, lda, b, ldb, c, ldc := operands[float32](r, s, true, false)
		c2 := append([]float32(nil), c...)
		Gemm(true, false, s.m, s.n, s.k, 1, a, lda, b, ldb, 0.5, c, ldc)
		w.Gemm(true, false, s.m, s.n, s.k, 1, a, lda, b, ldb, 0.5, c2, ldc)
		for i := range c {
			if c[i] != c2[i] {
				t.Fatalf("%+v: C[%d] = %v from Gemm, %v from a Workspace", s, i, c[i], c2[i])
			}
		}
	}
}
