package explain

import (
	"fmt"
	"math"
	"math/rand"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/plot"
)

// rowsSumToOne runs graph.Attention, the fused op qkv's layers use, under a
// causal mask on random q, k, v and checks its weights and outputs: every
// weight at least 0, every row summing to 1, and every output coordinate
// within the min and max of that coordinate over the value rows the query
// may see.
func rowsSumToOne(o Options) (Result, error) {
	b, s, d, heads := 4, 32, 64, 4
	if o.Small {
		b, s, d, heads = 2, 6, 8, 2
	}
	rng := rand.New(rand.NewSource(o.Seed))
	r := Result{
		Statement: "Each output row of attention is a weighted average of the value rows: the weights are at least 0, each row of them sums to 1, and so the output lies inside the convex hull of V.",
		Method:    fmt.Sprintf("graph.Attention under a causal mask on unit-normal q, k, v (B=%d, S=%d, D=%d, H=%d); each coordinate of the output against the min/max of V over the keys its query sees", b, s, d, heads),
		Measured:  map[string]float64{},
	}
	g := G.NewGraph()
	q := constant(g, "q", normal(rng, b*s*d), b, s, d)
	k := constant(g, "k", normal(rng, b*s*d), b, s, d)
	vals := normal(rng, b*s*d)
	v := constant(g, "v", vals, b, s, d)
	causal, err := graph.MaskOf(graph.Causal(), b, s, s)
	if err != nil {
		return r, err
	}
	mask, err := graph.NewMaskConst(g, tensor.Float64, causal, "causal")
	if err != nil {
		return r, err
	}
	out, weights, err := graph.Attend(q, k, v, graph.Spec{Heads: heads, Mask: mask})
	if err != nil {
		return r, err
	}
	got, err := run(g, out, weights)
	if err != nil {
		return r, err
	}
	o64, p := got[0], got[1]
	minW, sumErr, outside := math.Inf(1), 0.0, 0.0
	// Per query position i, over batch, heads and coordinates: the least
	// and greatest row sum, and where the output falls in its values'
	// range (0 at the least value, 1 at the greatest).
	sums := [2]plot.Series{{Name: "least row sum"}, {Name: "greatest row sum"}}
	place := [2]plot.Series{{Name: "lowest output, within its values' range"}, {Name: "highest output, within its values' range"}}
	for k, start := range []float64{math.Inf(1), math.Inf(-1)} { // least, greatest
		for i := range s {
			sums[k].X, sums[k].Y = append(sums[k].X, float64(i)), append(sums[k].Y, start)
			if i > 0 { // query 0 sees one value row, which has no range
				place[k].X, place[k].Y = append(place[k].X, float64(i)), append(place[k].Y, start)
			}
		}
	}
	for row := 0; row < b*heads*s; row++ {
		sum := 0.0
		for _, w := range p[row*s : (row+1)*s] {
			minW = min(minW, w)
			sum += w
		}
		sumErr = max(sumErr, math.Abs(sum-1))
		i := row % s
		sums[0].Y[i], sums[1].Y[i] = min(sums[0].Y[i], sum), max(sums[1].Y[i], sum)
	}
	for bi := 0; bi < b; bi++ {
		for i := 0; i < s; i++ {
			for c := 0; c < d; c++ {
				lo, hi := math.Inf(1), math.Inf(-1)
				for j := 0; j <= i; j++ { // the keys query i sees
					lo, hi = min(lo, vals[(bi*s+j)*d+c]), max(hi, vals[(bi*s+j)*d+c])
				}
				y := o64[(bi*s+i)*d+c]
				outside = max(outside, lo-y, y-hi)
				if hi > lo {
					at := (y - lo) / (hi - lo)
					place[0].Y[i-1], place[1].Y[i-1] = min(place[0].Y[i-1], at), max(place[1].Y[i-1], at)
				}
			}
		}
	}
	if err := r.draw(o, "rows-sum-to-one", "", "rows-sum-to-one: attention weights average the value rows", []plot.Panel{
		{Title: "sum of each row of weights", XLabel: "query position i", YLabel: "row sum", Series: sums[:]},
		{Title: "output inside the values it averages", XLabel: "query position i", YLabel: "place in [min, max] of V over keys j ≤ i", Series: place[:]},
	}); err != nil {
		return r, err
	}
	r.Measured["min_weight"] = minW
	r.Measured["max_row_sum_error"] = sumErr
	r.Measured["max_outside_hull"] = max(outside, 0)
	const eps = 1e-12
	r.Holds, r.Verdict = verdict(minW >= 0, sumErr < eps, outside <= eps)
	r.Why = fmt.Sprintf("smallest weight %.3g, rows sum to 1 within %.1g, no output coordinate leaves its values' range by more than %.1g", minW, sumErr, max(outside, 0))
	if !r.Holds {
		r.Why = fmt.Sprintf("smallest weight %.3g, worst row-sum error %.3g, worst step outside the values' range %.3g (tolerance %g)", minW, sumErr, outside, eps)
	}
	return r, nil
}
