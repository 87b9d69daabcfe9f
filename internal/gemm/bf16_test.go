//go:build amd64 && !purego

package gemm

import (
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/cpu"
)

// TestBF16 checks the experiment's assembly: rounding as toBF16 does, and
// sgemmBF16 equal to the product of the rounded operands summed in float64,
// to float32 sums' rounding.
func TestBF16(t *testing.T) {
	if !hasBF16 {
		t.Skip("no AVX512_BF16 on this CPU")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]float32, 96)
	for i := range src {
		src[i] = float32(rng.NormFloat64())
	}
	src[3], src[4] = 1+1.0/256, 1+3.0/256 // ties: to even, down and up
	dst := make([]uint16, 96)
	roundBF16(96, &src[0], &dst[0])
	for i, x := range src {
		if dst[i] != toBF16(x) {
			t.Fatalf("roundBF16: element %d (%v): %#x, toBF16 %#x", i, x, dst[i], toBF16(x))
		}
	}
	for _, s := range []struct{ m, n, k int }{{12, 32, 2}, {24, 64, 40}, {36, 96, 130}} {
		lda, ldb, ldc := s.k+3, s.n+5, s.n+7
		a, b, c := make([]float32, s.m*lda), make([]float32, s.k*ldb), make([]float32, s.m*ldc)
		for _, x := range [][]float32{a, b, c} {
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
		}
		want := append([]float32(nil), c...)
		for i := range s.m {
			for j := range s.n {
				sum := float64(want[i*ldc+j])
				for q := range s.k {
					sum += float64(fromBF16(toBF16(a[i*lda+q]))) * float64(fromBF16(toBF16(b[q*ldb+j])))
				}
				want[i*ldc+j] = float32(sum)
			}
		}
		var w bf16Work
		sgemmBF16(s.m, s.n, s.k, a, lda, b, ldb, c, ldc, &w)
		for i := range s.m {
			for j := range s.n {
				if got, w := c[i*ldc+j], want[i*ldc+j]; math.Abs(float64(got-w)) > 1e-5*float64(s.k) {
					t.Fatalf("%v: C[%d][%d] = %v, want %v", s, i, j, got, w)
				}
			}
		}
	}
}

// TestBF16Speed (QKV_BF16_SPEED=1 go test -run BF16Speed -v ./internal/gemm)
// is the experiment's measurement: the peak of VDPBF16PS against
// VFMADD231PS, then on the nanoGPT preset's products (B S = 780 tokens, D
// 128, FF 512) one goroutine's float32 GEMM (Workspace.Gemm) against
// sgemmBF16, rounding included, and its kernels alone, as ratios in one run:
// the best of interleaved repeats.
func TestBF16Speed(t *testing.T) {
	if os.Getenv("QKV_BF16_SPEED") == "" {
		t.Skip("QKV_BF16_SPEED=1 runs the bf16 measurement")
	}
	if !hasBF16 || active != avx512 {
		t.Skip("no AVX512_BF16, or the AVX-512 kernels are not Gemm's")
	}
	t.Logf("CPU %s, load average %s", CPUModel(), loadAvg())
	f32, bf := bestRate(peakAVX512F32, 512, 1), bestRate(peakBF16, 1024, 1)
	t.Logf("peak, one core: VFMADD231PS %.0f GFLOP/s, VDPBF16PS %.0f GFLOP/s (bf16 product and sum as 2): %.2fx", f32, bf, bf/f32)
	for _, s := range []struct {
		name    string
		m, n, k int
	}{
		{"x Wqkvo: 780x128 . 128x128", 780, 128, 128},
		{"x W1:    780x128 . 128x512", 780, 512, 128},
		{"h W2:    780x512 . 512x128", 780, 128, 512},
		{"dW1:     128x780 . 780x512", 132, 512, 780},
		{"brief:   768x128 . 128x512", 768, 512, 128},
	} {
		rng := rand.New(rand.NewPCG(3, 4))
		a, b, c := make([]float32, s.m*s.k), make([]float32, s.k*s.n), make([]float32, s.m*s.n)
		for _, x := range [][]float32{a, b} {
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
		}
		var ws Workspace[float32]
		var w bf16Work
		sgemmBF16(s.m, s.n, s.k, a, s.k, b, s.n, c, s.n, &w) // sized
		kernelsOnly := func() {
			for j0 := 0; j0 < s.n; j0 += 32 {
				for i0 := 0; i0 < s.m; i0 += 12 {
					kernelBF16x12x32(s.k/2, &w.a[i0*s.k/2], &w.b[j0*s.k/2], &c[i0*s.n+j0], s.n)
				}
			}
		}
		runs := []func(){
			func() { ws.Gemm(false, false, s.m, s.n, s.k, 1, a, s.k, b, s.n, 1, c, s.n) },
			func() { sgemmBF16(s.m, s.n, s.k, a, s.k, b, s.n, c, s.n, &w) },
			kernelsOnly,
		}
		best := make([]time.Duration, len(runs))
		for range 30 {
			for i, f := range runs {
				start := time.Now()
				f()
				if d := time.Since(start); best[i] == 0 || d < best[i] {
					best[i] = d
				}
			}
		}
		flops := 2 * float64(s.m*s.n*s.k)
		g := func(d time.Duration) float64 { return flops / d.Seconds() / 1e9 }
		t.Logf("%s: float32 %6.1f GFLOP/s, bf16 with rounding %6.1f (%.2fx), bf16 kernels alone %6.1f (%.2fx)",
			s.name, g(best[0]), g(best[1]), best[0].Seconds()/best[1].Seconds(), g(best[2]), best[0].Seconds()/best[2].Seconds())
	}
	t.Logf("load average %s", loadAvg())
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return string(b[:min(len(b), 14)])
}

// TestAMXPeak (QKV_BF16_SPEED=1) asks Linux for the AMX tile state
// (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) and measures
// TDPBF16PS's peak on one core against VFMADD231PS's.
func TestAMXPeak(t *testing.T) {
	if os.Getenv("QKV_BF16_SPEED") == "" {
		t.Skip("QKV_BF16_SPEED=1 runs the AMX measurement")
	}
	if !cpu.X86.HasAMXTile || !cpu.X86.HasAMXBF16 {
		t.Skip("no AMX_BF16")
	}
	const archReqXcompPerm, xfeatureXtiledata = 0x1023, 18
	if _, _, e := syscall.Syscall(syscall.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXtiledata, 0); e != 0 {
		t.Skipf("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): %v: AMX is not permitted", e)
	}
	var cfg [64]byte
	cfg[0] = 1 // palette 1
	for i := range 8 {
		cfg[16+2*i] = 64 // bytes a row
		cfg[48+i] = 16   // rows
	}
	f := func(n int) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		peakAMX(n, &cfg[0])
	}
	f32, amx := bestRate(peakAVX512F32, 512, 1), bestRate(f, 65536, 1)
	t.Logf("peak, one core: VFMADD231PS %.0f GFLOP/s, AMX TDPBF16PS %.0f GFLOP/s: %.1fx (load average %s)", f32, amx, amx/f32, loadAvg())
}
