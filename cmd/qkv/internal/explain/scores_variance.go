package explain

import (
	"fmt"
	"math"
	"math/rand"

	G "gorgonia.org/gorgonia"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/plot"
)

// scoresVariance multiplies n queries by n keys with gorgonia's matmul, as
// the composed attention does, for unit-normal q and k of each width d_k,
// and takes the variance of the n*n scores before and after the scale
// 1/sqrt(d_k).
func scoresVariance(o Options) (Result, error) {
	n, dks := 128, []int{4, 16, 64, 256, 1024}
	if o.Small {
		n, dks = 64, []int{4, 16, 64}
	}
	const tol = 0.15 // the sampling error of a variance of n*n correlated scores
	rng := rand.New(rand.NewSource(o.Seed))
	r := Result{
		Statement: "For q and k with independent unit-variance components, Var(q·k) = d_k, and dividing the scores by sqrt(d_k) brings the variance back to 1.",
		Method:    fmt.Sprintf("%d×%d scores Q·Kᵀ by gorgonia's matmul for unit-normal Q, K at each d_k, then scaled by 1/sqrt(d_k) in the graph; variance over all scores", n, n),
		Measured:  map[string]float64{},
	}
	worst := 0.0
	raws, normed := plot.Series{Name: "Var(q·k)"}, plot.Series{Name: "Var(q·k / sqrt(d_k))"}
	for _, dk := range dks {
		g := G.NewGraph()
		s, err := randomScores(g, rng, n, n, dk)
		if err != nil {
			return r, err
		}
		scaled, err := graph.Scale(s, 1/math.Sqrt(float64(dk)))
		if err != nil {
			return r, err
		}
		v, err := run(g, s, scaled)
		if err != nil {
			return r, err
		}
		raw, sc := variance(v[0]), variance(v[1])
		r.Measured[fmt.Sprintf("var_raw_dk%d", dk)] = raw
		r.Measured[fmt.Sprintf("var_scaled_dk%d", dk)] = sc
		worst = max(worst, math.Abs(raw/float64(dk)-1), math.Abs(sc-1))
		raws.X, raws.Y = append(raws.X, float64(dk)), append(raws.Y, raw)
		normed.X, normed.Y = append(normed.X, float64(dk)), append(normed.Y, sc)
	}
	if err := r.draw(o, "scores-variance", "", "scores-variance: the variance of q·k grows as d_k; scaled, it stays 1", []plot.Panel{{
		Title: "variance of the scores", XLabel: "d_k", YLabel: "variance", LogX: true, LogY: true,
		Series: []plot.Series{raws, normed},
	}}); err != nil {
		return r, err
	}
	r.Measured["worst_relative_error"] = worst
	r.Holds, r.Verdict = verdict(worst <= tol)
	r.Why = fmt.Sprintf("at every d_k the raw variance is within %.0f%% of d_k and the scaled one within %.0f%% of 1 (worst %.1f%%)", 100*tol, 100*tol, 100*worst)
	if !r.Holds {
		r.Why = fmt.Sprintf("the worst relative error is %.1f%%, beyond the %.0f%% sampling error", 100*worst, 100*tol)
	}
	return r, nil
}

// variance is the population variance of x.
func variance(x []float64) float64 {
	var mean, sq float64
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	for _, v := range x {
		sq += (v - mean) * (v - mean)
	}
	return sq / float64(len(x))
}
