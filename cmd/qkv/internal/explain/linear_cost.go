package explain

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/qkv-dev/qkv/cmd/qkv/internal/attncost"
	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/plot"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
)

// linVariant is one attention layer linear-cost measures: a softmax
// implementation, with or without a sliding window, or linear attention
// with a feature map.
type linVariant struct {
	name   string // in Measured's keys and the legend
	impl   layers.AttentionImpl
	window int
	linear *layers.LinearOptions
}

// linWindow is the sliding window of the windowed flash variant.
const linWindow = 256

// linVariants are the layers linear-cost compares, in the order reported:
// the three softmax implementations, flash with a sliding window, and
// linear attention in its chunked form with Based's Taylor map of 16-wide
// queries and keys (273 features a head) and with elu(x)+1 of the head's
// width.
var linVariants = []linVariant{
	{name: "composed", impl: layers.AttentionComposed},
	{name: "fused", impl: layers.AttentionFused},
	{name: "flash", impl: layers.AttentionFlash},
	{name: "flash_window", impl: layers.AttentionFlash, window: linWindow},
	{name: "linear_taylor16", impl: layers.AttentionFused, linear: &layers.LinearOptions{FeatureMap: graph.FeatureTaylor, FeatureDim: 16}},
	{name: "linear_elu1", impl: layers.AttentionFused, linear: &layers.LinearOptions{FeatureMap: graph.FeatureELU1}},
}

// label is v's name in the figure.
func (v linVariant) label() string {
	switch {
	case v.window > 0:
		return fmt.Sprintf("flash, window %d", v.window)
	case v.linear != nil && v.linear.FeatureDim > 0:
		return fmt.Sprintf("linear, %s d'=%d", v.linear.FeatureMap, v.linear.FeatureDim)
	case v.linear != nil:
		return fmt.Sprintf("linear, %s", v.linear.FeatureMap)
	}
	return v.name
}

// linSizes are the lengths linear-cost tries: 256 to 16,384, doubling
// (128 to 1024 with o.Small).
func linSizes(o Options) []int {
	lo, hi := 256, 16384
	if o.Small {
		lo, hi = 128, 1024
	}
	var ns []int
	for n := lo; n <= hi; n *= 2 {
		ns = append(ns, n)
	}
	return ns
}

// linBudget is the most memory a measurement may be estimated to need
// (attncost.EstimateBytes): 4 GiB, or half of what the machine has
// available if that is less. Composed and fused attention stop where
// their (B, H, n, n) tensors would pass it.
func linBudget() float64 {
	b := float64(4 << 30)
	if avail := memAvailable(); avail > 0 {
		b = min(b, avail/2)
	}
	return b
}

// memAvailable is /proc/meminfo's MemAvailable in bytes, 0 where it
// cannot be read.
func memAvailable() float64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kb float64
		if _, err := fmt.Sscanf(sc.Text(), "MemAvailable: %g kB", &kb); err == nil {
			return kb * 1024
		}
	}
	return 0
}

// cpuModel is /proc/cpuinfo's first "model name", or "unknown CPU".
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// linLayer is the layer of v at length n: causal, B = 1, D = 64 in 4
// heads of 16 (16 in 2 heads of 8 with o.Small), float32.
func linLayer(o Options, v linVariant, n int) attncost.Config {
	c := attncost.Config{Impl: v.impl, Seq: n, Batch: 1, Heads: 4, HeadDim: 16, Causal: true, Window: v.window, Repeats: linRepeats(o, n)}
	if o.Small {
		c.Heads, c.HeadDim = 2, 8
	}
	if v.linear != nil {
		c.Linear, c.LinearOptions = true, *v.linear
	}
	return c
}

// linRepeats is the number of timed passes at length n: fewer as a pass
// grows long (flash's takes seconds at 16,384), one with o.Small.
func linRepeats(o Options, n int) int {
	switch {
	case o.Small:
		return 1
	case n >= 8192:
		return 2
	case n >= 1024:
		return 3
	}
	return 5
}

// repeatsText says how many passes linRepeats times.
func repeatsText(o Options) string {
	if o.Small {
		return "1"
	}
	return fmt.Sprintf("%d (%d from n = 1024, %d from 8192)", linRepeats(o, 256), linRepeats(o, 1024), linRepeats(o, 8192))
}

// linSeries is what linear-cost measured of one variant: the lengths,
// the least CPU ms, the median wall ms and the heap peak of a pass at
// each, and the first length it skipped with that length's estimate.
type linSeries struct {
	v                linVariant
	n, cpu, wall, mb []float64
	skippedAt        int
	skippedEst       float64
	slopes           costSlopes
}

// linearCost times one causal attention layer's forward and backward pass
// with attncost.Measure for each linVariant at doubling lengths up to
// 16,384, skipping the lengths whose estimated memory is above linBudget,
// fits the log-log slopes of CPU time, wall time and heap peak against n
// over each variant's largest three lengths, and finds where linear
// attention's time falls below flash's.
func linearCost(o Options) (Result, error) {
	budget := linBudget()
	cpu := cpuModel()
	c0 := linLayer(o, linVariants[0], 1)
	r := Result{
		Statement: "Linear attention costs time and memory linear in the sequence length n, where softmax attention that forms the (B, H, n, n) weights (composed, fused) costs both quadratic and flash quadratic time in linear memory; so past some n linear attention is faster than flash, and a sliding window makes flash linear too.",
		Method: fmt.Sprintf("one causal attention layer (B=%d, D=%d, H=%d, float32) on %s: forward and backward of a random linear function of its output, per variant and n from %d to %d doubling (attncost.Measure: a warm-up, then %s timed passes; least CPU time of the process and median wall time; Go heap high-water mark above the start); variants composed, fused, flash, flash with a window of %d, linear attention chunked (chunk %d) with Based's Taylor map of d' = 16 (dφ = %d) and with elu+1 (dφ = %d); a length is skipped where attncost.EstimateBytes exceeds %s (4 GiB, or half the available memory); slopes of log time and log peak against log n by least squares over each variant's %d largest lengths; the crossover interpolates log(linear/flash CPU time) linearly in log n",
			c0.Batch, c0.Heads*c0.HeadDim, c0.Heads, cpu, linSizes(o)[0], linSizes(o)[len(linSizes(o))-1], repeatsText(o), linWindow, graph.DefaultLinearChunk,
			graph.FeatureTaylor.Dim(16), graph.FeatureELU1.Dim(c0.HeadDim), config.FormatBytes(budget), slopeFit),
		Measured: map[string]float64{},
	}
	series := make([]*linSeries, len(linVariants))
	for i, v := range linVariants {
		s := &linSeries{v: v}
		series[i] = s
		for _, n := range linSizes(o) {
			c := linLayer(o, v, n)
			if est := attncost.EstimateBytes(c); est > budget {
				s.skippedAt, s.skippedEst = n, est
				break
			}
			m, err := attncost.Measure(c)
			if err != nil {
				return r, fmt.Errorf("%s n=%d: %w", v.name, n, err)
			}
			s.n = append(s.n, float64(n))
			s.cpu = append(s.cpu, max(m.CPUMsMin, 1e-3))
			s.wall = append(s.wall, max(m.MsPerStep, 1e-3))
			s.mb = append(s.mb, max(float64(m.PeakBytes), 1)/(1<<20))
			r.Measured[fmt.Sprintf("%s_cpu_ms_n%d", v.name, n)] = m.CPUMsMin
			r.Measured[fmt.Sprintf("%s_ms_n%d", v.name, n)] = m.MsPerStep
			r.Measured[fmt.Sprintf("%s_peak_mib_n%d", v.name, n)] = float64(m.PeakBytes) / (1 << 20)
		}
		if len(s.n) == 0 {
			return r, fmt.Errorf("%s: every length needs more than %s", v.name, config.FormatBytes(budget))
		}
		k := max(len(s.n)-slopeFit, 0)
		s.slopes = costSlopes{plot.Slope(s.n[k:], s.cpu[k:]), plot.Slope(s.n[k:], s.wall[k:]), plot.Slope(s.n[k:], s.mb[k:])}
		r.Measured[v.name+"_time_slope"] = s.slopes.time
		r.Measured[v.name+"_wall_time_slope"] = s.slopes.wall
		r.Measured[v.name+"_memory_slope"] = s.slopes.memory
		r.Measured[v.name+"_max_n"] = s.n[len(s.n)-1]
	}
	byName := map[string]*linSeries{}
	for _, s := range series {
		byName[s.v.name] = s
	}
	flash := byName["flash"]
	cross := map[string]crossover{}
	for _, name := range []string{"linear_taylor16", "linear_elu1"} {
		x := crossoverN(byName[name].n, byName[name].cpu, flash.n, flash.cpu)
		cross[name] = x
		r.Measured[name+"_crossover_n"] = x.n
		r.Measured[name+"_vs_flash_time_ratio_max_n"] = x.lastRatio
		xw := crossoverN(byName[name].n, byName[name].wall, flash.n, flash.wall)
		r.Measured[name+"_crossover_n_wall"] = xw.n
	}
	if err := drawLinearCost(&r, o, cpu, c0, series); err != nil {
		return r, err
	}
	parts, failed := linearParts(byName, cross)
	r.Holds, r.Verdict = verdict(parts...)
	slope := func(name string) string {
		s := byName[name].slopes
		return fmt.Sprintf("%s %.2f/%.2f", name, s.time, s.memory)
	}
	r.Why = fmt.Sprintf("log-log slopes, CPU time/memory: %s, %s (linear: in [%.1f, %.1f)); %s, %s (quadratic: in [%.1f, %.1f)); %s (memory linear); %s (both linear); linear overtakes flash %s (Taylor), %s (elu+1)",
		slope("linear_taylor16"), slope("linear_elu1"), linMemory[0], linMemory[1], slope("composed"), slope("fused"), quadTime[0], quadTime[1],
		slope("flash"), slope("flash_window"), cross["linear_taylor16"], cross["linear_elu1"])
	var skipped []string
	for _, s := range series {
		if s.skippedAt > 0 {
			skipped = append(skipped, fmt.Sprintf("%s from n=%d (about %s)", s.v.name, s.skippedAt, config.FormatBytes(s.skippedEst)))
		}
	}
	if len(skipped) > 0 {
		r.Why += fmt.Sprintf("; skipped above %s of memory: %s", config.FormatBytes(budget), strings.Join(skipped, ", "))
	}
	if len(failed) > 0 {
		r.Why += "; failed: " + strings.Join(failed, "; ")
	}
	return r, nil
}

// crossover is where one variant's time falls below another's.
type crossover struct {
	// n is the interpolated length where the times are equal; the first
	// length measured if the variant is faster there already, -1 if it is
	// not faster at any length both were measured at.
	n       float64
	already bool
	// lastRatio is the variant's time over the other's at the largest
	// length both were measured at.
	lastRatio float64
	lastN     float64
}

func (x crossover) String() string {
	switch {
	case x.already:
		return fmt.Sprintf("already at n=%.0f (time ratio %.2f at n=%.0f)", x.n, x.lastRatio, x.lastN)
	case x.n < 0:
		return fmt.Sprintf("at no n measured (time ratio %.2f at n=%.0f)", x.lastRatio, x.lastN)
	}
	return fmt.Sprintf("at n≈%.0f (time ratio %.2f at n=%.0f)", x.n, x.lastRatio, x.lastN)
}

// crossoverN finds where time ta (at lengths na) falls below tb (at nb):
// the lengths both were measured at, the first where ta < tb, and the
// point between it and the length before where log(ta/tb) crosses 0,
// linear in log n.
func crossoverN(na, ta, nb, tb []float64) crossover {
	var ns, lr []float64
	for i, n := range na {
		for j, m := range nb {
			if n == m {
				ns, lr = append(ns, n), append(lr, math.Log(ta[i]/tb[j]))
			}
		}
	}
	x := crossover{n: -1}
	if len(ns) == 0 {
		return x
	}
	x.lastRatio, x.lastN = math.Exp(lr[len(lr)-1]), ns[len(ns)-1]
	for i := range ns {
		if lr[i] >= 0 {
			continue
		}
		if i == 0 {
			x.n, x.already = ns[0], true
			return x
		}
		f := lr[i-1] / (lr[i-1] - lr[i])
		x.n = math.Exp(math.Log(ns[i-1]) + f*(math.Log(ns[i])-math.Log(ns[i-1])))
		return x
	}
	return x
}

// linearParts are linear-cost's parts: each linear variant linear in time
// and memory; composed and fused quadratic in both; flash linear in
// memory; flash with a window linear in both; each linear variant faster
// than flash by the largest length. failed names the parts that do not
// hold.
func linearParts(s map[string]*linSeries, cross map[string]crossover) (parts []bool, failed []string) {
	lin := func(c costSlopes) bool { return within(c.time, linMemory) && within(c.memory, linMemory) }
	quad := func(c costSlopes) bool { return within(c.time, quadTime) && within(c.memory, quadMemory) }
	add := func(ok bool, what string) {
		parts = append(parts, ok)
		if !ok {
			failed = append(failed, what)
		}
	}
	for _, name := range []string{"linear_taylor16", "linear_elu1"} {
		add(lin(s[name].slopes), name+" not linear in time and memory")
	}
	for _, name := range []string{"composed", "fused"} {
		add(quad(s[name].slopes), name+" not quadratic in time and memory")
	}
	add(within(s["flash"].slopes.memory, linMemory), "flash memory not linear")
	add(lin(s["flash_window"].slopes), "flash with a window not linear in time and memory")
	for _, name := range []string{"linear_taylor16", "linear_elu1"} {
		add(cross[name].n > 0, name+" not faster than flash at any n measured")
	}
	return parts, failed
}

// drawLinearCost draws linear-cost's figure: CPU time and heap peak
// against n, log-log, a line per variant with its slope in the legend.
func drawLinearCost(r *Result, o Options, cpu string, c attncost.Config, series []*linSeries) error {
	var ts, ms []plot.Series
	for _, s := range series {
		ts = append(ts, plot.Series{Name: fmt.Sprintf("%s (slope %.2f)", s.v.label(), s.slopes.time), X: s.n, Y: s.cpu})
		ms = append(ms, plot.Series{Name: fmt.Sprintf("%s (slope %.2f)", s.v.label(), s.slopes.memory), X: s.n, Y: s.mb})
	}
	panels := []plot.Panel{
		{Title: "CPU time of a forward and backward pass", XLabel: "sequence length n", YLabel: "ms", LogX: true, LogY: true, Series: ts},
		{Title: "Go heap peak", XLabel: "sequence length n", YLabel: "MiB", LogX: true, LogY: true, Series: ms},
	}
	title := fmt.Sprintf("linear-cost: one causal attention layer (D=%d, H=%d) on %s", c.Heads*c.HeadDim, c.Heads, cpu)
	return r.draw(o, "linear-cost", "", title, panels)
}
