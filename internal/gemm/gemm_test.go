package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"unsafe"

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

// shapes cover single elements, partial tiles on every side (of both
// kernel sets' tiles, 6x16 and 12x32), each blocking size crossed (kc, mc,
// nc), padded leading dimensions, products split along m and along n, and
// a Transformer's products (rows x model width x hidden width).
var shapes = []shape{
	{1, 1, 1, 0}, {6, 16, 1, 0}, {7, 17, 3, 2}, {5, 9, 300, 1}, {130, 20, 5, 0},
	{3, 2100, 4, 3}, {64, 64, 1024, 0}, {1024, 64, 64, 0}, {61, 33, 257, 5}, {0, 5, 5, 0}, {5, 5, 0, 0},
	{5, 0, 5, 0}, {0, 0, 0, 0}, {12, 32, 1, 0}, {11, 31, 2, 0}, {13, 33, 9, 4}, {25, 70, 40, 3},
	{24, 64, 513, 0}, {65, 65, 32, 1}, {65, 32, 65, 0}, {250, 106, 20, 2}, {1, 100, 7, 0}, {100, 1, 7, 1},
	{20, 1100, 100, 1},                                                   // split along n: few rows, over parallelWork
	{44, 40, 33, 2}, {128, 70, 300, 1}, {64, 40, 70, 0}, {65, 33, 65, 1}, // last panels of 8, 4 and 5 rows
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

// paths are the kernel sets this machine can run, by name, and "gonum"
// (nil), the path of other CPUs and of the purego tag, which runs anywhere.
func paths() []struct {
	name string
	set  *kernelSet
} {
	var ps []struct {
		name string
		set  *kernelSet
	}
	for _, s := range kernelSets() {
		name := "avx2"
		if s.f32.mr == 12 {
			name = "avx512"
		}
		ps = append(ps, struct {
			name string
			set  *kernelSet
		}{name, s})
	}
	return append(ps, struct {
		name string
		set  *kernelSet
	}{"gonum", nil})
}

// usePath makes set the active kernels until the test or benchmark ends.
func usePath(tb testing.TB, set *kernelSet) {
	prev := active
	active = set
	tb.Cleanup(func() { active = prev })
}

// TestGemm compares every path (each assembly kernel set, packed and
// direct kernels, and gonum's GEMM), serial and split over two goroutines,
// with the definition for every transpose, alpha and beta.
func TestGemm(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	if len(kernelSets()) == 0 {
		t.Log("no AVX2 and FMA here: only the path without them is tested")
	}
	for _, path := range paths() {
		usePath(t, path.set)
		for _, procs := range []int{1, 2} {
			runtime.GOMAXPROCS(procs)
			t.Run(fmt.Sprintf("%s/procs=%d/float32", path.name, procs), func(t *testing.T) { testGemm[float32](t, 2e-5) })
			t.Run(fmt.Sprintf("%s/procs=%d/float64", path.name, procs), func(t *testing.T) { testGemm[float64](t, 1e-13) })
		}
	}
}

// TestKernels calls each assembly kernel directly, packed and direct, edge
// kernels too, adding and storing, on one tile of its own size, against the
// definition: Gemm's tests would also pass if some kernel were never
// reached.
func TestKernels(t *testing.T) {
	for _, set := range kernelSets() {
		t.Run(set.name+"/float32", func(t *testing.T) { testKernels(t, &set.f32, 2e-5) })
		t.Run(set.name+"/float64", func(t *testing.T) { testKernels(t, &set.f64, 1e-13) })
	}
}

func testKernels[T Float](t *testing.T, ks *kernels[T], tol float64) {
	mr, nr := ks.mr, ks.nr
	type variant struct {
		name       string
		rows, cols int // of the tile, computed
		packed     func(k int, a, b, c []T, ldc int, alpha T, store bool)
		direct     func(k int, a []T, lda int, b, c []T, ldc int, alpha T, store bool, next ahead)
		trans      bool // direct reads A transposed
	}
	variants := []variant{{"kernel", mr, nr, ks.kernel, nil, false}, {"direct", mr, nr, nil, ks.direct, false}}
	if ks.h != nil {
		variants = append(variants, variant{"h", mr / 2, nr, ks.h, nil, false}, variant{"w", mr, nr / 2, ks.w, nil, false},
			variant{"hw", mr / 2, nr / 2, ks.hw, nil, false}, variant{"directW", mr, nr / 2, nil, ks.directW, false})
	}
	if ks.directT != nil {
		variants = append(variants, variant{"directT", mr, nr, nil, ks.directT, true}, variant{"directTW", mr, nr / 2, nil, ks.directTW, true})
	}
	for rows, f := range ks.directTRows {
		if f != nil {
			variants = append(variants, variant{fmt.Sprintf("directTRows[%d]", rows), rows, nr, nil, f, true})
		}
	}
	for rows, f := range ks.directRows {
		if f != nil {
			variants = append(variants, variant{fmt.Sprintf("directRows[%d]", rows), rows, nr, nil, f, false})
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, k := range []int{1, 2, 7, 256, 301} {
		ldc, lda := nr+3, k+5
		at := randSlice[T](r, mr*lda) // A in place: mr rows of k, lda apart
		packed := make([]T, k*mr)     // the same A packed: k columns of mr
		for i := range mr {
			for q := range k {
				packed[q*mr+i] = at[i*lda+q]
			}
		}
		ldaT := mr + 3
		aT := make([]T, k*ldaT) // the same A transposed: k rows of mr, ldaT apart
		for i := range mr {
			for q := range k {
				aT[q*ldaT+i] = at[i*lda+q]
			}
		}
		b := randSlice[T](r, k*nr)
		alphas := []T{1}
		if ks.scales {
			alphas = append(alphas, -0.75)
		}
		for _, v := range variants {
			for _, st := range []struct {
				store bool
				alpha T
			}{{false, alphas[0]}, {true, alphas[0]}, {false, alphas[len(alphas)-1]}, {true, alphas[len(alphas)-1]}} {
				store, alpha := st.store, st.alpha
				c := randSlice[T](r, mr*ldc)
				beta := T(1)
				if store { // C's values, even NaN, are overwritten
					beta = 0
					for i := range c {
						c[i] = T(math.NaN())
					}
				}
				want := append([]T(nil), c...)
				naive(false, false, v.rows, v.cols, k, alpha, at, lda, b, nr, beta, want, ldc)
				got := append([]T(nil), c...)
				// What a direct kernel prefetches changes nothing:
				// nothing, or this tile's own A and C again.
				var next ahead
				if store {
					next = ahead{uintptr(unsafe.Pointer(&at[0])), uintptr(unsafe.Pointer(&got[0]))}
				}
				if v.trans {
					v.direct(k, aT, ldaT, b, got, ldc, alpha, store, next)
				} else if v.direct != nil {
					v.direct(k, at, lda, b, got, ldc, alpha, store, next)
				} else {
					v.packed(k, packed, b, got, ldc, alpha, store)
				}
				for i := range got {
					// Outside the computed rows and columns C is
					// untouched, NaN included.
					outside := i/ldc >= v.rows || i%ldc >= v.cols
					same := got[i] == c[i] || got[i] != got[i] && c[i] != c[i]
					if outside && !same || !outside && !(math.Abs(float64(got[i]-want[i])) <= tol*(1+math.Abs(float64(want[i])))) {
						t.Fatalf("%s %dx%d k %d alpha %v store %v: C[%d] = %v, want %v", v.name, v.rows, v.cols, k, alpha, store, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestDeterministic: on one path, a product is the same bit for bit from
// one call to the next, whatever the goroutines' timing and whatever the
// pooled workspaces held before, and the same on one core or two (each
// element's sum runs in an order fixed by k alone): training runs repeat
// exactly because of it.
func TestDeterministic(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	r := rand.New(rand.NewPCG(5, 6))
	for _, path := range paths() {
		usePath(t, path.set)
		for _, s := range []shape{{780, 128, 128, 0}, {128, 106, 780, 3}, {65, 65, 32, 1}, {30, 700, 300, 0}} {
			for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}} {
				a, lda, b, ldb, c, ldc := operands[float32](r, s, tr[0], tr[1])
				var first []float32
				for _, procs := range []int{1, 2, 2, 1, 2} {
					runtime.GOMAXPROCS(procs)
					got := append([]float32(nil), c...)
					Gemm(tr[0], tr[1], s.m, s.n, s.k, 0.5, a, lda, b, ldb, 0.25, got, ldc)
					if first == nil {
						first = got
						continue
					}
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(first[i]) {
							t.Fatalf("%s %+v trans %v: C[%d] = %v on one core, %v with GOMAXPROCS %d", path.name, s, tr, i, first[i], got[i], procs)
						}
					}
				}
			}
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

// benchShapes are a Transformer step's products, forward (xW: rows x in x
// out), the input gradient (dyWt: rows x out x in) and the weight gradient
// (xtdy: in x out x rows, the rows summed over): at batch 32 x sequence 32, width 64 and feed-forward
// 256; and nanoGPT's CPU character model that qkv trains, 780 tokens (batch
// 12 x 65 positions) of width 128, feed-forward 512, 106 characters in the
// head, and attention's per-head products (65 positions, head width 32);
// and the default sort model's, 768 tokens (64 x 12) of width 48,
// feed-forward 192.
var benchShapes = []struct {
	name           string
	transA, transB bool
	m, n, k        int
}{
	{"xW/1024x64x256", false, false, 1024, 256, 64},
	{"dyWt/1024x256x64", false, true, 1024, 64, 256},
	{"xtdy/64x256x1024", true, false, 64, 256, 1024},
	{"square/256", false, false, 256, 256, 256},
	{"nano/xW/780x128x128", false, false, 780, 128, 128},
	{"nano/xW/780x128x512", false, false, 780, 512, 128},
	{"nano/xW/780x512x128", false, false, 780, 128, 512},
	{"nano/head/780x128x106", false, false, 780, 106, 128},
	{"nano/dyWt/780x128x128", false, true, 780, 128, 128},
	{"nano/dyWt/780x512x128", false, true, 780, 128, 512},
	{"nano/dyWt/780x128x512", false, true, 780, 512, 128},
	{"nano/dyWt/780x106x128", false, true, 780, 128, 106},
	{"nano/xtdy/128x128x780", true, false, 128, 128, 780},
	{"nano/xtdy/128x512x780", true, false, 128, 512, 780},
	{"nano/xtdy/512x128x780", true, false, 512, 128, 780},
	{"nano/xtdy/128x106x780", true, false, 128, 106, 780},
	{"nano/qkt/65x32x65", false, true, 65, 65, 32},
	{"nano/pv/65x65x32", false, false, 65, 32, 65},
	{"sort/xW/768x48x48", false, false, 768, 48, 48},
	{"sort/xW/768x48x192", false, false, 768, 192, 48},
	{"sort/xW/768x192x48", false, false, 768, 48, 192},
	{"sort/dyWt/768x48x192", false, true, 768, 192, 48},
	{"sort/dyWt/768x192x48", false, true, 768, 48, 192},
	{"sort/xtdy/48x48x768", true, false, 48, 48, 768},
	{"sort/xtdy/48x192x768", true, false, 48, 192, 768},
	{"sort/xtdy/192x48x768", true, false, 192, 48, 768},
}

// BenchmarkSgemm runs each shape on every path this machine has, side by
// side, in GFLOP/s; -cpu 1 measures one core, -cpu 2 the split over two.
func BenchmarkSgemm(b *testing.B) { benchGemm[float32](b) }

// BenchmarkDgemm is BenchmarkSgemm in float64.
func BenchmarkDgemm(b *testing.B) { benchGemm[float64](b) }

func benchGemm[T Float](b *testing.B) {
	for _, s := range benchShapes {
		for _, path := range paths() {
			b.Run(s.name+"/"+path.name, func(b *testing.B) {
				usePath(b, path.set)
				r := rand.New(rand.NewPCG(1, 2))
				a, lda, bm, ldb, c, ldc := operands[T](r, shape{s.m, s.n, s.k, 0}, s.transA, s.transB)
				for b.Loop() {
					Gemm(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bm, ldb, 0, c, ldc)
				}
				b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkKernel is one kernel call after another on the same panels,
// which stay in L1: the most its FMAs give, against which Gemm's GFLOP/s
// are measured.
func BenchmarkKernel(b *testing.B) {
	for _, set := range kernelSets() {
		b.Run(set.name+"/float32", func(b *testing.B) { benchKernel(b, set.f32.mr, set.f32.nr, set.f32.kernel) })
		b.Run(set.name+"/float64", func(b *testing.B) { benchKernel(b, set.f64.mr, set.f64.nr, set.f64.kernel) })
		b.Run(set.name+"/float32/direct", func(b *testing.B) { benchDirect(b, set.f32.mr, set.f32.nr, false, set.f32.direct) })
		if set.f32.directT != nil {
			b.Run(set.name+"/float32/directT", func(b *testing.B) { benchDirect(b, set.f32.mr, set.f32.nr, true, set.f32.directT) })
		}
	}
}

// benchDirect is benchKernel for a direct kernel, A in place (rows of k,
// or transposed, k rows of mr), all operands in L1.
func benchDirect[T Float](b *testing.B, mr, nr int, trans bool, kern func(int, []T, int, []T, []T, int, T, bool, ahead)) {
	const k = 256
	r := rand.New(rand.NewPCG(1, 2))
	lda := k
	if trans {
		lda = mr
	}
	a, bm, c := randSlice[T](r, k*mr), randSlice[T](r, k*nr), make([]T, mr*nr)
	next := ahead{uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&c[0]))}
	for b.Loop() {
		kern(k, a, lda, bm, c, nr, 1, false, next)
	}
	b.ReportMetric(2*float64(mr*nr*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func benchKernel[T Float](b *testing.B, mr, nr int, kern func(int, []T, []T, []T, int, T, bool)) {
	const k = 256
	r := rand.New(rand.NewPCG(1, 2))
	a, bm, c := randSlice[T](r, k*mr), randSlice[T](r, k*nr), make([]T, mr*nr)
	for b.Loop() {
		kern(k, a, bm, c, nr, 1, false)
	}
	b.ReportMetric(2*float64(mr*nr*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
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

// TestGemmAllocatesNothing: once its workspaces have grown, a product
// allocates nothing, on one core or split over two, in both element types.
// gonum's GEMM, where there are no assembly kernels, allocates its own.
func TestGemmAllocatesNothing(t *testing.T) {
	if active == nil {
		t.Skip("no assembly kernels: Gemm is gonum's")
	}
	testGemmAllocs[float32](t)
	testGemmAllocs[float64](t)
}

func testGemmAllocs[T Float](t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	r := rand.New(rand.NewPCG(3, 4))
	for _, procs := range []int{1, 2} {
		runtime.GOMAXPROCS(procs)
		for _, s := range []shape{{780, 128, 128, 0}, {65, 65, 32, 0}} {
			a, lda, b, ldb, c, ldc := operands[T](r, s, true, false)
			run := func() { Gemm(true, false, s.m, s.n, s.k, 1, a, lda, b, ldb, 0, c, ldc) }
			run()
			if n := testing.AllocsPerRun(20, run); n != 0 {
				t.Errorf("%T %+v at GOMAXPROCS %d: %v allocations per product, want 0", T(0), s, procs, n)
			}
		}
	}
}
