package explain

import (
	"fmt"
	"strings"

	"github.com/qkv-dev/qkv/cmd/qkv/internal/attncost"
	"github.com/qkv-dev/qkv/internal/plot"
	"github.com/qkv-dev/qkv/layers"
)

// costSizes are the sequence lengths each implementation is measured at:
// composed keeps so many (B, H, n, n) tensors and takes so long that it
// stops first.
func costSizes(o Options) map[layers.AttentionImpl][]int {
	return sizesFor(o, map[layers.AttentionImpl][]int{
		layers.AttentionComposed: {256, 512, 1024},
		layers.AttentionFused:    {256, 512, 1024, 2048, 4096},
		layers.AttentionFlash:    {256, 512, 1024, 2048, 4096},
	})
}

// sizesFor returns the lengths full gives each implementation, or with
// o.Small the same short lengths, 32, 64 and 128, for each.
func sizesFor(o Options, full map[layers.AttentionImpl][]int) map[layers.AttentionImpl][]int {
	if !o.Small {
		return full
	}
	small := map[layers.AttentionImpl][]int{}
	for impl := range full {
		small[impl] = []int{32, 64, 128}
	}
	return small
}

// costImpls are the implementations in the order they are reported.
var costImpls = []layers.AttentionImpl{layers.AttentionComposed, layers.AttentionFused, layers.AttentionFlash}

// costLayer is the attention layer the cost claims measure at length n:
// D = 64 in 4 heads (16 in 2 with o.Small), one sequence, float32.
func costLayer(o Options, impl layers.AttentionImpl, n, repeats int) attncost.Config {
	c := attncost.Config{Impl: impl, Seq: n, Batch: 1, Heads: 4, HeadDim: 16, Repeats: repeats}
	if o.Small {
		c.Heads, c.HeadDim, c.Repeats = 2, 8, 1
	}
	return c
}

// costRepeats is the number of timed passes at length n: the larger n,
// the longer a pass and the less others' load moves its time.
func costRepeats(n int) int {
	if n >= 1024 {
		return 3
	}
	return 5
}

// slopeFit is how many of the largest lengths (two doublings) the slopes
// are fitted on: at small n fixed costs flatten them.
const slopeFit = 3

// costSlopes are the log-log slopes of CPU time, wall time and peak memory
// against n.
type costSlopes struct{ time, wall, memory float64 }

// quadraticCost times one forward and backward pass of one attention layer
// with attncost.Measure for each implementation at doubling lengths, and
// fits the log-log slopes of time and heap peak against n over the largest
// three lengths. The time whose slope decides is the process's CPU time:
// on cores shared with other programs the wall time measures them too.
func quadraticCost(o Options) (Result, error) {
	sizes := costSizes(o)
	c0 := costLayer(o, "", 1, costRepeats(1))
	r := Result{
		Statement: "Attention that forms the (B, H, n, n) weights costs time and memory quadratic in the sequence length n: doubling n about quadruples both; flash attention, which never forms them, still takes quadratic time but linear memory.",
		Method: fmt.Sprintf("one attention layer (B=%d, D=%d, H=%d, float32, no mask), forward and backward of a random linear function of its output, %d timed passes after a warm-up (%d from n = 1024) whose least CPU time of the process (user and system) and median wall time are reported, Go heap high-water mark sampled every 200 µs above the start (attncost.Measure), per implementation and n; slopes of log CPU time, log wall time and log peak against log n by least squares over the %d largest n",
			c0.Batch, c0.Heads*c0.HeadDim, c0.Heads, c0.Repeats, costLayer(o, "", 1, costRepeats(1024)).Repeats, slopeFit),
		Measured: map[string]float64{},
	}
	slopes := map[layers.AttentionImpl]costSlopes{}
	var timeSeries, memSeries []plot.Series
	for _, impl := range costImpls {
		var ns, ms, wall, bytes []float64
		for _, n := range sizes[impl] {
			m, err := attncost.Measure(costLayer(o, impl, n, costRepeats(n)))
			if err != nil {
				return r, fmt.Errorf("%s n=%d: %w", impl, n, err)
			}
			ns, bytes = append(ns, float64(n)), append(bytes, float64(max(m.PeakBytes, 1)))
			ms, wall = append(ms, max(m.CPUMsMin, 1e-3)), append(wall, m.MsPerStep)
			r.Measured[fmt.Sprintf("%s_cpu_ms_n%d", impl, n)] = m.CPUMsMin
			r.Measured[fmt.Sprintf("%s_ms_n%d", impl, n)] = m.MsPerStep
			r.Measured[fmt.Sprintf("%s_peak_bytes_n%d", impl, n)] = float64(m.PeakBytes)
		}
		k := max(len(ns)-slopeFit, 0)
		s := costSlopes{plot.Slope(ns[k:], ms[k:]), plot.Slope(ns[k:], wall[k:]), plot.Slope(ns[k:], bytes[k:])}
		slopes[impl] = s
		r.Measured[string(impl)+"_time_slope"] = s.time
		r.Measured[string(impl)+"_wall_time_slope"] = s.wall
		r.Measured[string(impl)+"_memory_slope"] = s.memory
		timeSeries = append(timeSeries, plot.Series{Name: fmt.Sprintf("%s (slope %.2f)", impl, s.time), X: ns, Y: ms})
		memSeries = append(memSeries, plot.Series{Name: fmt.Sprintf("%s (slope %.2f)", impl, s.memory), X: ns, Y: inMiB(bytes)})
	}
	panels := []plot.Panel{
		{Title: "CPU time of a forward and backward pass", XLabel: "sequence length n", YLabel: "ms", LogX: true, LogY: true, Series: timeSeries},
		{Title: "Go heap peak", XLabel: "sequence length n", YLabel: "MiB", LogX: true, LogY: true, Series: memSeries},
	}
	if err := r.draw(o, "quadratic-cost", "", "quadratic-cost: one attention layer against the sequence length", panels); err != nil {
		return r, err
	}
	parts := quadraticParts(slopes)
	r.Holds, r.Verdict = verdict(parts...)
	c, f, fl := slopes[layers.AttentionComposed], slopes[layers.AttentionFused], slopes[layers.AttentionFlash]
	r.Why = fmt.Sprintf("log-log slopes over the largest n, CPU time and memory: composed %.2f and %.2f, fused %.2f and %.2f (quadratic: in [%.1f, %.1f) for both); flash %.2f and %.2f (time quadratic, memory linear: in [%.1f, %.1f))",
		c.time, c.memory, f.time, f.memory, quadTime[0], quadTime[1], fl.time, fl.memory, linMemory[0], linMemory[1])
	var failed []string
	for i, name := range []string{"composed", "fused", "flash"} {
		if !parts[i] {
			failed = append(failed, name)
		}
	}
	if len(failed) > 0 {
		r.Why += fmt.Sprintf("; outside those ranges: %s", strings.Join(failed, ", "))
	}
	return r, nil
}

// The slopes that count as quadratic time, quadratic memory and linear
// memory: those whose nearest whole exponent is 2, or 1. At the lengths
// measured a part linear in n and the runtime's own slack (the heap grows
// past what is live until the collector catches up, more so on a loaded
// machine) still pull the memory slopes off their whole values.
var (
	quadTime   = [2]float64{1.5, 2.5}
	quadMemory = quadTime
	linMemory  = [2]float64{0.5, 1.5}
)

func within(x float64, r [2]float64) bool { return x >= r[0] && x < r[1] }

// quadraticParts are the claim's three parts: composed and fused each
// quadratic in time and memory, flash quadratic in time and linear in
// memory.
func quadraticParts(s map[layers.AttentionImpl]costSlopes) []bool {
	quad := func(c costSlopes) bool { return within(c.time, quadTime) && within(c.memory, quadMemory) }
	fl := s[layers.AttentionFlash]
	return []bool{quad(s[layers.AttentionComposed]), quad(s[layers.AttentionFused]), within(fl.time, quadTime) && within(fl.memory, linMemory)}
}
