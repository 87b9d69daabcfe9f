//go:build linux && amd64 && !purego

package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// TestAMXArgs checks amxArgs' layout against the offsets amxRow reads.
func TestAMXArgs(t *testing.T) {
	var p amxArgs
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"a", unsafe.Offsetof(p.a), 0}, {"lda", unsafe.Offsetof(p.lda), 8}, {"kc", unsafe.Offsetof(p.kc), 16},
		{"b", unsafe.Offsetof(p.b), 24}, {"panel", unsafe.Offsetof(p.panel), 32}, {"nb", unsafe.Offsetof(p.nb), 40},
		{"c", unsafe.Offsetof(p.c), 48}, {"ldc", unsafe.Offsetof(p.ldc), 56}, {"rows", unsafe.Offsetof(p.rows), 64},
		{"direct", unsafe.Offsetof(p.direct), 72}, {"beta1", unsafe.Offsetof(p.beta1), 80},
		{"mask0", unsafe.Offsetof(p.mask0), 88}, {"mask1", unsafe.Offsetof(p.mask1), 96},
		{"alpha", unsafe.Offsetof(p.alpha), 104}, {"beta", unsafe.Offsetof(p.beta), 108},
		{"cfg", unsafe.Offsetof(p.cfg), 112}, {"tmp", unsafe.Offsetof(p.tmp), 120}, {"readC", unsafe.Offsetof(p.readC), 128},
		{"first", unsafe.Offsetof(p.first), 136}, {"last", unsafe.Offsetof(p.last), 144},
	} {
		if f.got != f.want {
			t.Errorf("amxArgs.%s at offset %d, amxRow reads %d", f.name, f.got, f.want)
		}
	}
}

// TestGemmBF16 checks GemmBF16 against the product of the bf16-rounded
// operands summed in float64, within float32 sums' rounding (1e-5 of the
// sum of |alpha a b| and |beta c|), for every transposition, odd sizes and
// leading dimensions, alpha and beta; on both one goroutine and the
// process's, since large products are split by rows.
func TestGemmBF16(t *testing.T) {
	if !HasAMX() {
		t.Skip("no AMX-BF16 on this CPU, or Linux refused the tile state: GemmBF16 is Gemm here")
	}
	sizes := []int{1, 15, 17, 33, 65}
	type shape struct{ m, n, k int }
	var shapes []shape
	for i, m := range sizes {
		for j, n := range sizes {
			shapes = append(shapes, shape{m, n, sizes[(i+j)%len(sizes)]}, shape{m, n, sizes[(i+2*j+1)%len(sizes)]})
		}
	}
	shapes = append(shapes, shape{780, 128, 128}, shape{780, 106, 128}, shape{128, 512, 780}, shape{106, 128, 780}, shape{64, 64, 1},
		shape{33, 40, 300}, shape{40, 33, 600}) // blocks of k, on every path
	scales := []struct{ alpha, beta float32 }{{1, 0}, {1, 1}, {0.5, -2}, {-1.5, 0}, {0, 0.5}}
	rng := rand.New(rand.NewPCG(7, 8))
	for si, s := range shapes {
		for tr := range 4 {
			transA, transB := tr&1 != 0, tr&2 != 0
			sc := scales[(si+tr)%len(scales)]
			if s.m >= 780 || s.k >= 780 {
				sc = scales[tr%2] // the direct paths, beta 0 and 1
			}
			name := fmt.Sprintf("%dx%dx%d/transA=%t,transB=%t/alpha=%g,beta=%g", s.m, s.n, s.k, transA, transB, sc.alpha, sc.beta)
			checkGemmBF16(t, rng, name, transA, transB, s.m, s.n, s.k, sc.alpha, sc.beta)
		}
	}
	// one goroutine: the large products are not split
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	checkGemmBF16(t, rng, "780x512x128 on one goroutine", false, false, 780, 512, 128, 1, 1)
	checkGemmBF16(t, rng, "780x128x512 on one goroutine", false, true, 780, 128, 512, 1, 0)
}

func checkGemmBF16(t *testing.T, rng *rand.Rand, name string, transA, transB bool, m, n, k int, alpha, beta float32) {
	t.Helper()
	ra, ca := m, k
	if transA {
		ra, ca = k, m
	}
	rb, cb := k, n
	if transB {
		rb, cb = n, k
	}
	lda, ldb, ldc := ca+3, cb+5, n+2
	a, b, c := make([]float32, ra*lda), make([]float32, rb*ldb), make([]float32, m*ldc)
	for _, x := range [][]float32{a, b, c} {
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
	}
	if beta == 0 {
		for i := range c {
			c[i] = float32(math.NaN()) // not read
		}
	}
	at := func(i, p int) float64 {
		if transA {
			return float64(fromBF16(toBF16(a[p*lda+i])))
		}
		return float64(fromBF16(toBF16(a[i*lda+p])))
	}
	bt := func(p, j int) float64 {
		if transB {
			return float64(fromBF16(toBF16(b[j*ldb+p])))
		}
		return float64(fromBF16(toBF16(b[p*ldb+j])))
	}
	want, bound := make([]float64, m*n), make([]float64, m*n)
	for i := range m {
		for j := range n {
			var sum, abs float64
			for p := range k {
				sum += at(i, p) * bt(p, j)
				abs += math.Abs(at(i, p) * bt(p, j))
			}
			want[i*n+j] = float64(alpha) * sum
			bound[i*n+j] = math.Abs(float64(alpha)) * abs
			if beta != 0 {
				want[i*n+j] += float64(beta) * float64(c[i*ldc+j])
				bound[i*n+j] += math.Abs(float64(beta) * float64(c[i*ldc+j]))
			}
		}
	}
	pad := append([]float32(nil), c...)
	GemmBF16(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	var bad []string
	for i := range m {
		for j := range ldc {
			got := c[i*ldc+j]
			if j >= n {
				if math.Float32bits(got) != math.Float32bits(pad[i*ldc+j]) {
					bad = append(bad, fmt.Sprintf("C[%d][%d] beyond n changed", i, j))
				}
				continue
			}
			if d := math.Abs(float64(got) - want[i*n+j]); !(d <= 1e-5*bound[i*n+j]+1e-30) {
				bad = append(bad, fmt.Sprintf("C[%d][%d] = %v, want %v (bound %.3g)", i, j, got, want[i*n+j], 1e-5*bound[i*n+j]))
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("%s: %d wrong, e.g. %s", name, len(bad), strings.Join(bad[:min(3, len(bad))], "; "))
	}
}

// BenchmarkGemmBF16 compares, on the nanoGPT preset's products (benchShapes'
// nano/*), one goroutine's float32 GEMM (Workspace.Gemm) with GemmBF16 on
// one goroutine, its rounding and packing included: GFLOP/s of each.
func BenchmarkGemmBF16(b *testing.B) {
	if !HasAMX() {
		b.Skip("no AMX-BF16 on this CPU, or Linux refused the tile state")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, s := range benchShapes {
		if !strings.HasPrefix(s.name, "nano/") {
			continue
		}
		r := rand.New(rand.NewPCG(1, 2))
		x, y, c := make([]float32, s.m*s.k), make([]float32, s.k*s.n), make([]float32, s.m*s.n)
		for _, v := range [][]float32{x, y} {
			for i := range v {
				v[i] = float32(r.NormFloat64())
			}
		}
		lda, ldb := s.k, s.n
		if s.transA {
			lda = s.m
		}
		if s.transB {
			ldb = s.k
		}
		var ws Workspace[float32]
		for _, path := range []struct {
			name string
			f    func()
		}{
			{"float32", func() { ws.Gemm(s.transA, s.transB, s.m, s.n, s.k, 1, x, lda, y, ldb, 0, c, s.n) }},
			{"bf16", func() { GemmBF16(s.transA, s.transB, s.m, s.n, s.k, 1, x, lda, y, ldb, 0, c, s.n) }},
		} {
			b.Run(s.name+"/"+path.name, func(b *testing.B) {
				for b.Loop() {
					path.f()
				}
				b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// TestTranspose32 checks the assembly transposition against the
// definition, on the shapes GemmBF16 gives it.
func TestTranspose32(t *testing.T) {
	if !hasBF16 {
		t.Skip("no AVX-512 here")
	}
	for _, s := range [][2]int{{16, 16}, {32, 16}, {16, 32}, {32, 400}, {400, 32}} {
		rows, cols := s[0], s[1]
		src, dst := make([]uint32, rows*cols), make([]uint32, rows*cols)
		for i := range src {
			src[i] = uint32(i)*2654435761 + 1
		}
		transpose32(dst, src, rows, cols)
		for i := range rows {
			for j := range cols {
				if dst[j*rows+i] != src[i*cols+j] {
					t.Fatalf("%dx%d: dst[%d][%d] = %#x, src[%d][%d] = %#x", rows, cols, j, i, dst[j*rows+i], i, j, src[i*cols+j])
				}
			}
		}
	}
}
