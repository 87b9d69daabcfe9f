package gemm

import (
	"bufio"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Peak is the floating-point rate one kernel set's instructions can reach on
// this machine, measured by a loop of independent fused multiply-adds on
// registers alone (no loads, no stores, no dependencies the FMA units wait
// on): the ceiling a GEMM built on them approaches and cannot pass, on this
// machine as it runs now (its clock, its load).
type Peak struct {
	// Set names the kernel set, as Kernels does ("AVX-512 assembly
	// (12x32)"), or "scalar Go" for the loop the purego build and machines
	// without the assembly run.
	Set string
	// F32 and F64 are one goroutine's GFLOP/s (2 operations per
	// multiply-add), float32 and float64.
	F32, F64 float64
	// Threads goroutines, each on its own OS thread, ran the loop at once:
	// runtime.NumCPU(), at least 2 (GOMAXPROCS raised for the measurement
	// where lower). F32All and F64All are their GFLOP/s together.
	Threads        int
	F32All, F64All float64
}

// peakLoop is one kernel set's register-only FMA loop for each type: f32(n)
// runs n iterations of ops32 float32 operations.
type peakLoop struct {
	set          string
	f32, f64     func(n int)
	ops32, ops64 float64
}

// scalarLoop is the loop of scalar Go: 8 independent multiply-add chains,
// 16 operations an iteration, in float32 and float64.
var scalarLoop = peakLoop{set: "scalar Go", f32: scalarFMA[float32], f64: scalarFMA[float64], ops32: 16, ops64: 16}

// peakX and peakY are the scalar loop's operands, variables so that the
// compiler cannot fold the loop away; peakSink keeps its result.
var (
	peakX, peakY float64       = 1, 0
	peakSink     atomic.Uint64 // the float64 bits; atomic: the loop runs on several goroutines at once
)

func scalarFMA[T Float](n int) {
	x, y := T(peakX), T(peakY)
	var a0, a1, a2, a3, a4, a5, a6, a7 T
	for range n {
		a0 = a0*x + y
		a1 = a1*x + y
		a2 = a2*x + y
		a3 = a3*x + y
		a4 = a4*x + y
		a5 = a5*x + y
		a6 = a6*x + y
		a7 = a7*x + y
	}
	peakSink.Store(math.Float64bits(float64(a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7)))
}

// measured holds each loop of peakLoops and, once measured, its peak.
var measured = sync.OnceValue(func() []*measuredPeak {
	var ms []*measuredPeak
	for _, l := range peakLoops() {
		ms = append(ms, &measuredPeak{loop: l})
	}
	return ms
})

type measuredPeak struct {
	loop peakLoop
	once sync.Once
	peak Peak
}

func (m *measuredPeak) get() Peak {
	m.once.Do(func() { m.peak = measurePeak(m.loop) })
	return m.peak
}

// Peaks measures, once a process, the peak of each kernel set this machine
// runs, the one Gemm runs first and the scalar Go loop last. Each set takes
// about half a second; later calls return the first's answer.
func Peaks() []Peak {
	var ps []Peak
	for _, m := range measured() {
		ps = append(ps, m.get())
	}
	return ps
}

// ActivePeak is the peak of the kernels Gemm runs, measured once a process
// (the first of Peaks, measured alone): the scalar Go loop's where Gemm is
// gonum's.
func ActivePeak() Peak { return measured()[0].get() }

// measurePeak times l's loops: alone on one goroutine, then on Threads at
// once. Each figure is the best of 15 runs of about 5 ms, since a
// peak is what the machine can do, and another process taking the core
// for a while only slows some runs.
func measurePeak(l peakLoop) Peak {
	p := Peak{Set: l.set, Threads: max(runtime.NumCPU(), 2)}
	p.F32 = bestRate(l.f32, l.ops32, 1)
	p.F64 = bestRate(l.f64, l.ops64, 1)
	if prev := runtime.GOMAXPROCS(0); prev < p.Threads {
		runtime.GOMAXPROCS(p.Threads)
		defer runtime.GOMAXPROCS(prev)
	}
	p.F32All = bestRate(l.f32, l.ops32, p.Threads)
	p.F64All = bestRate(l.f64, l.ops64, p.Threads)
	return p
}

// bestRate returns the best GFLOP/s of threads goroutines, each locked to
// an OS thread, running f(n) at once, over 15 runs; ops is the operations
// an iteration, n is chosen for about 5 ms a run. Each goroutine's rate is
// its operations over its thread's CPU time where the system measures it
// (Linux), else over the wall time, and the rates add up: on a shared
// machine a run's wall time counts the slices other processes took, its
// CPU time only the loop's own, so the figure is the cores' rate while the
// loop runs on them. Where the cores share their FMA units (hyperthreads)
// and the threads ran at the same time, each thread's rate shows it.
func bestRate(f func(int), ops float64, threads int) float64 {
	n := 1 << 10
	for { // calibrate on one goroutine
		start := time.Now()
		f(n)
		if d := time.Since(start); d > time.Millisecond || n >= 1<<30 {
			n = max(1, int(float64(n)*float64(5*time.Millisecond)/float64(max(d, 1))))
			break
		}
		n *= 4
	}
	best := 0.0
	rates := make([]float64, threads)
	for range 15 {
		var ready, done sync.WaitGroup
		startGate := make(chan struct{})
		ready.Add(threads)
		done.Add(threads)
		for i := range threads {
			go func() {
				defer done.Done()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				ready.Done()
				<-startGate
				wall := time.Now()
				cpu0, ok := threadCPUTime()
				f(n)
				d := time.Since(wall)
				if cpu1, _ := threadCPUTime(); ok && cpu1 > cpu0 {
					d = cpu1 - cpu0
				}
				rates[i] = float64(n) * ops / max(d, 1).Seconds() / 1e9
			}()
		}
		ready.Wait()
		close(startGate)
		done.Wait()
		sum := 0.0
		for _, r := range rates {
			sum += r
		}
		best = max(best, sum)
	}
	return best
}

// CPUModel returns the processor's name, /proc/cpuinfo's first "model
// name", or runtime.GOARCH where there is none.
func CPUModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}
