package explain

import (
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/plot"
)

// stableSoftmax runs one float32 graph over rows of logits (0, c, -c, c/2)
// for growing c: a naive softmax, exp(x)/sum(exp(x)) from gorgonia's raw
// ops, beside exp of qkv's max-subtracted graph.LogSoftmax.
func stableSoftmax(o Options) (Result, error) {
	cs := []float64{1, 10, 50, 80, 100, 1e3, 1e4, 1e6}
	const last = 4
	data := make([]float32, 0, len(cs)*last)
	for _, c := range cs {
		data = append(data, 0, float32(c), float32(-c), float32(c/2))
	}
	r := Result{
		Statement: "A naive softmax exp(x)/Σexp(x) overflows to Inf/NaN in float32 once a logit passes about 88, while subtracting the row max first keeps it finite for any finite logits.",
		Method:    fmt.Sprintf("float32 rows (0, c, -c, c/2) for c in %v: gorgonia's Exp, Sum and broadcast division composed naively, beside exp(graph.LogSoftmax)", cs),
		Measured:  map[string]float64{},
	}
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float32, 2, G.WithShape(len(cs), last), G.WithName("logits"),
		G.WithValue(tensor.New(tensor.WithShape(len(cs), last), tensor.WithBacking(data))))
	e, err := G.Exp(x)
	if err != nil {
		return r, err
	}
	sum, err := G.Sum(e, 1)
	if err != nil {
		return r, err
	}
	naive, err := G.BroadcastHadamardDiv(e, sum, nil, []byte{1})
	if err != nil {
		return r, err
	}
	logp, err := graph.LogSoftmax(x)
	if err != nil {
		return r, err
	}
	stable, err := G.Exp(logp)
	if err != nil {
		return r, err
	}
	v, err := run(g, naive, stable)
	if err != nil {
		return r, err
	}
	naiveFirst, stableBad, worstSum := math.Inf(1), 0.0, 0.0
	finiteShare := [2]plot.Series{{Name: "naive exp(x) / Σ exp(x)"}, {Name: "exp(x − max x) / Σ exp(x − max x)"}}
	for i, c := range cs {
		row := func(p []float64) []float64 { return p[i*last : (i+1)*last] }
		for way := range finiteShare {
			n := 0.0
			for _, p := range row(v[way]) {
				if !math.IsInf(p, 0) && !math.IsNaN(p) {
					n++
				}
			}
			finiteShare[way].X = append(finiteShare[way].X, c)
			finiteShare[way].Y = append(finiteShare[way].Y, n/last)
		}
		if !finite(row(v[0])) && math.IsInf(naiveFirst, 1) {
			naiveFirst = c
		}
		if !finite(row(v[1])) {
			stableBad++
		}
		s := 0.0
		for _, p := range row(v[1]) {
			s += p
		}
		worstSum = max(worstSum, math.Abs(s-1))
	}
	if err := r.draw(o, "stable-softmax", "", "stable-softmax: float32 rows (0, c, −c, c/2)", []plot.Panel{{
		Title: "weights that are finite numbers", XLabel: "c (largest logit)", YLabel: "fraction of the row", LogX: true,
		Series: finiteShare[:],
	}}); err != nil {
		return r, err
	}
	r.Measured["naive_first_nonfinite_c"] = naiveFirst
	r.Measured["stable_nonfinite_rows"] = stableBad
	r.Measured["stable_worst_row_sum_error"] = worstSum
	breaks := !math.IsInf(naiveFirst, 1)
	r.Holds, r.Verdict = verdict(breaks, stableBad == 0 && worstSum < 1e-6)
	switch {
	case r.Holds:
		r.Why = fmt.Sprintf("the naive softmax first gives Inf/NaN at c = %g; the max-subtracted one is finite in every row, each summing to 1 within %.1g", naiveFirst, worstSum)
	case !breaks:
		r.Why = "the naive softmax stayed finite at every c tried"
	default:
		r.Why = fmt.Sprintf("the max-subtracted softmax has %g non-finite rows, worst row-sum error %.3g", stableBad, worstSum)
	}
	return r, nil
}

// finite reports whether every value of x is finite.
func finite(x []float64) bool {
	for _, v := range x {
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return false
		}
	}
	return true
}
