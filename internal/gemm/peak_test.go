package gemm

import (
	"runtime"
	"slices"
	"testing"
	"time"
)

// TestPeak: every kernel set's peak is positive and plausible (below 32
// float32 multiply-adds a cycle at 6 GHz on each core, 384 GFLOP/s a
// core), float64's is at most float32's (with slack for noise), the active
// set is Gemm's, and a second call returns the cached answer.
func TestPeak(t *testing.T) {
	ps := Peaks()
	if len(ps) == 0 || ps[len(ps)-1].Set != "scalar Go" {
		t.Fatalf("Peaks() = %+v, want the scalar Go loop last", ps)
	}
	if active != nil && ActivePeak().Set != active.name {
		t.Errorf("ActivePeak().Set = %q, want %q", ActivePeak().Set, active.name)
	}
	for _, p := range ps {
		t.Logf("%s on %s: float32 %.1f GFLOP/s (%d threads %.1f), float64 %.1f (%.1f)", p.Set, CPUModel(), p.F32, p.Threads, p.F32All, p.F64, p.F64All)
		for _, r := range []float64{p.F32, p.F64} {
			if !(r > 0.05 && r < 384) {
				t.Errorf("%s: one core's peak %v GFLOP/s, not plausible", p.Set, r)
			}
		}
		for _, r := range []float64{p.F32All, p.F64All} {
			if !(r > 0.05 && r < 384*float64(p.Threads)) {
				t.Errorf("%s: %d threads' peak %v GFLOP/s, not plausible", p.Set, p.Threads, r)
			}
		}
		if p.F64 > 1.5*p.F32 {
			t.Errorf("%s: float64 %v GFLOP/s above float32's %v", p.Set, p.F64, p.F32)
		}
		if p.Threads < 2 || p.Threads < runtime.NumCPU() {
			t.Errorf("%s: %d threads, want at least 2 and NumCPU", p.Set, p.Threads)
		}
	}
	if len(ps) > 1 && ps[0].F32 < ps[len(ps)-1].F32 {
		t.Errorf("the assembly's peak %v GFLOP/s is below scalar Go's %v", ps[0].F32, ps[len(ps)-1].F32)
	}
	if again := Peaks(); again[0] != ps[0] || ActivePeak() != ps[0] {
		t.Error("Peaks() measured again")
	}
	if CPUModel() == "" {
		t.Error("CPUModel() is empty")
	}
}

// BenchmarkPeakSpread runs the active kernels' float32 FMA loop 60 times,
// about 2 ms each, 20 ms apart, each timed by its thread's CPU time as
// measurePeak times it, and reports the best (what Peaks takes), the
// median and the tenth percentile: on a shared machine the loop's rate
// moves from run to run, and a step timed over all its runs meets the
// median, not the best (go test ./internal/gemm -run X -bench PeakSpread
// -cpu 1 -count 3).
func BenchmarkPeakSpread(b *testing.B) {
	l := measured()[0].loop
	const n = 1 << 20
	for b.Loop() {
		runtime.LockOSThread()
		var rates []float64
		for range 60 {
			c0, _ := threadCPUTime()
			l.f32(n)
			c1, _ := threadCPUTime()
			rates = append(rates, n*l.ops32/max(c1-c0, 1).Seconds()/1e9)
			time.Sleep(20 * time.Millisecond)
		}
		runtime.UnlockOSThread()
		slices.Sort(rates)
		b.ReportMetric(rates[59], "best-GFLOP/s")
		b.ReportMetric(rates[30], "median-GFLOP/s")
		b.ReportMetric(rates[6], "p10-GFLOP/s")
	}
}
