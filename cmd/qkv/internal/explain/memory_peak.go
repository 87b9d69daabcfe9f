package explain

import (
	"fmt"

	"github.com/qkv-dev/qkv/cmd/qkv/internal/attncost"
	"github.com/qkv-dev/qkv/internal/plot"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
)

// peakSizes are the lengths memory-peak measures each implementation that
// forms the weights at.
func peakSizes(o Options) map[layers.AttentionImpl][]int {
	return sizesFor(o, map[layers.AttentionImpl][]int{
		layers.AttentionFused:    {256, 512, 1024, 2048},
		layers.AttentionComposed: {256, 512, 1024},
	})
}

// peakBreakdown is one measurement of memory-peak, in bytes.
type peakBreakdown struct {
	n                      int
	params, square, other  float64 // held by the graph: parameters, (n, n) tensors, the rest
	peak, allocPerStep, nn float64 // heap peak, allocated per step, one (B, H, n, n) tensor
}

// memoryPeak measures with attncost.Measure one attention layer's
// parameter bytes, the bytes of the (n, n) tensors its graph holds after a
// forward and backward pass (the weights, and what backward keeps and
// makes: their gradient, and in composed attention the scores and every
// intermediate), the rest the graph holds, and the heap's high-water mark,
// at growing n.
func memoryPeak(o Options) (Result, error) {
	sizes := peakSizes(o)
	c0 := costLayer(o, "", 1, 1)
	elem := 4 // float32
	r := Result{
		Statement: "At long sequences the memory peak of attention is the (B, H, n, n) attention matrices and what backward keeps of them, not the parameters.",
		Method: fmt.Sprintf("one attention layer (B=%d, D=%d, H=%d, float32, no mask), forward and backward twice, a warm-up and a timed pass (attncost.Measure): the parameters' bytes (count × %d), the bytes of the tensors of shape (…, n, n) the graph holds after the pass, of everything else it holds, the bytes one pass allocates, and the Go heap's high-water mark above the start, sampled every 200 µs, per implementation and n",
			c0.Batch, c0.Heads*c0.HeadDim, c0.Heads, elem),
		Measured: map[string]float64{},
	}
	var panels []plot.Panel
	var last []peakBreakdown
	for _, impl := range []layers.AttentionImpl{layers.AttentionFused, layers.AttentionComposed} {
		kinds := []plot.Series{{Name: "heap peak"}, {Name: "(n, n) tensors held"}, {Name: "other values held"}, {Name: "parameters"}}
		var b peakBreakdown
		for _, n := range sizes[impl] {
			c := costLayer(o, impl, n, 1)
			m, err := attncost.Measure(c)
			if err != nil {
				return r, fmt.Errorf("%s n=%d: %w", impl, n, err)
			}
			b = peakBreakdown{n: n, params: float64(m.ParamBytes), square: float64(m.SquareBytes),
				other: float64(m.GraphBytes - m.SquareBytes - m.ParamBytes), peak: float64(m.PeakBytes),
				allocPerStep: float64(m.AllocBytesPerStep), nn: float64(c.Batch * c.Heads * n * n * elem)}
			for i, v := range []float64{b.peak, b.square, b.other, b.params} {
				kinds[i].X = append(kinds[i].X, float64(n))
				kinds[i].Y = append(kinds[i].Y, max(v, 1))
			}
			for name, v := range map[string]float64{"peak_bytes": b.peak, "square_bytes": b.square, "other_bytes": b.other,
				"step_alloc_bytes": b.allocPerStep, "square_tensors": b.square / b.nn} {
				r.Measured[fmt.Sprintf("%s_%s_n%d", impl, name, n)] = v
			}
		}
		r.Measured["param_bytes"] = b.params
		r.Measured[string(impl)+"_param_share_of_peak"] = b.params / b.peak
		r.Measured[string(impl)+"_square_share_of_held"] = b.square / (b.square + b.other)
		last = append(last, b)
		for i := range kinds {
			kinds[i].Y = inMiB(kinds[i].Y)
		}
		panels = append(panels, plot.Panel{Title: fmt.Sprintf("%s attention", impl), XLabel: "sequence length n", YLabel: "MiB",
			LogX: true, LogY: true, Series: kinds})
	}
	if err := r.draw(o, "memory-peak", "", "memory-peak: what one attention layer's forward and backward hold", panels); err != nil {
		return r, err
	}
	var parts []bool
	for _, b := range last {
		parts = append(parts, peakDominated(b))
	}
	r.Holds, r.Verdict = verdict(parts...)
	f, c := last[0], last[1]
	r.Why = fmt.Sprintf("fused at n=%d: heap peak %s; the graph holds %s in (n, n) tensors (%.0f of B·H·n² floats: the weights and their gradient) and %s else; parameters %s (%.2g of the peak); a pass allocates %s more. composed at n=%d: peak %s, (n, n) tensors %s (%.0f), else %s",
		f.n, config.FormatBytes(f.peak), config.FormatBytes(f.square), f.square/f.nn, config.FormatBytes(f.other), config.FormatBytes(f.params), f.params/f.peak, config.FormatBytes(f.allocPerStep),
		c.n, config.FormatBytes(c.peak), config.FormatBytes(c.square), c.square/c.nn, config.FormatBytes(c.other))
	return r, nil
}

// peakDominated says whether b's memory is the attention matrices' and not
// the parameters': the parameters under 1% of the heap peak, the (n, n)
// tensors at least 80% of what the graph holds besides the parameters and
// at least a quarter of the peak, and the rest the graph holds under 10%
// of it.
func peakDominated(b peakBreakdown) bool {
	return b.params < 0.01*b.peak && b.square >= 0.8*(b.square+b.other) && b.square >= 0.25*b.peak && b.other < 0.1*b.peak
}

// inMiB returns byte counts in MiB, for an axis a reader reads without
// counting digits.
func inMiB(bytes []float64) []float64 {
	out := make([]float64, len(bytes))
	for i, b := range bytes {
		out[i] = b / (1 << 20)
	}
	return out
}
