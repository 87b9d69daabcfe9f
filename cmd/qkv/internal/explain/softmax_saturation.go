package explain

import (
	"fmt"
	"math"
	"math/rand"

	G "gorgonia.org/gorgonia"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/plot"
)

// softmaxSaturation computes the scores of unit-normal queries against 16
// keys by gorgonia's matmul at each d_k, unscaled and scaled by
// 1/sqrt(d_k), then puts each set through qkv's softmax (exp of
// graph.LogSoftmax) in a graph of its own whose input is the scores, so
// that G.Grad gives the gradient of a fixed random readout sum(p*r) with
// respect to the scores themselves.
func softmaxSaturation(o Options) (Result, error) {
	rows, keys, dks := 64, 16, []int{4, 16, 64, 256, 1024}
	if o.Small {
		rows, dks = 16, []int{4, 64}
	}
	rng := rand.New(rand.NewSource(o.Seed))
	r := Result{
		Statement: "Unscaled scores make softmax nearly one-hot and its gradient vanish as d_k grows; scores divided by sqrt(d_k) do not.",
		Method:    fmt.Sprintf("%d queries × %d keys, unit-normal, scores by gorgonia's matmul, through exp(graph.LogSoftmax); mean max weight, entropy (nats) and gradient norm of sum(p·r) with respect to the scores, per row, unscaled and scaled", rows, keys),
		Measured:  map[string]float64{},
	}
	readout := normal(rng, rows*keys)
	var top [2]stats // at the largest d_k: unscaled, scaled
	ways := [2]string{"unscaled", "scaled"}
	series := make([][2]plot.Series, 3) // max weight, entropy, gradient norm; unscaled, scaled
	for i := range series {
		series[i] = [2]plot.Series{{Name: "q·k"}, {Name: "q·k / sqrt(d_k)"}}
	}
	for _, dk := range dks {
		g := G.NewGraph()
		s, err := randomScores(g, rng, rows, keys, dk)
		if err != nil {
			return r, err
		}
		v, err := run(g, s)
		if err != nil {
			return r, err
		}
		for way, f := range []float64{1, 1 / math.Sqrt(float64(dk))} {
			scores := make([]float64, len(v[0]))
			for i, x := range v[0] {
				scores[i] = x * f
			}
			st, err := softmaxStats(scores, readout, rows, keys)
			if err != nil {
				return r, err
			}
			name := ways[way]
			for i, y := range []float64{st.maxWeight, st.entropy, st.gradNorm} {
				series[i][way].X = append(series[i][way].X, float64(dk))
				series[i][way].Y = append(series[i][way].Y, y)
			}
			r.Measured[fmt.Sprintf("%s_max_weight_dk%d", name, dk)] = st.maxWeight
			r.Measured[fmt.Sprintf("%s_entropy_dk%d", name, dk)] = st.entropy
			r.Measured[fmt.Sprintf("%s_grad_norm_dk%d", name, dk)] = st.gradNorm
			top[way] = st
		}
	}
	var panels []plot.Panel
	for i, p := range []struct{ title, y string }{
		{"largest weight of a row", "mean max weight"},
		{"entropy of a row", "nats"},
		{"gradient through softmax", "mean gradient norm"},
	} {
		panels = append(panels, plot.Panel{Title: p.title, XLabel: "d_k", YLabel: p.y, LogX: true, Series: series[i][:]})
	}
	if err := r.draw(o, "softmax-saturation", "", "softmax-saturation: unscaled scores saturate the softmax as d_k grows", panels); err != nil {
		return r, err
	}
	un, sc := top[0], top[1]
	r.Holds, r.Verdict = verdict(un.maxWeight > 0.8 && un.gradNorm < sc.gradNorm/2, sc.maxWeight < 0.5)
	r.Why = fmt.Sprintf("at d_k = %d unscaled rows put %.2f of their weight on one key (entropy %.2f nats, gradient norm %.3g); scaled rows %.2f (entropy %.2f, gradient norm %.3g)",
		dks[len(dks)-1], un.maxWeight, un.entropy, un.gradNorm, sc.maxWeight, sc.entropy, sc.gradNorm)
	return r, nil
}

// stats are per-row means of a softmax's rows.
type stats struct{ maxWeight, entropy, gradNorm float64 }

// softmaxStats runs exp(graph.LogSoftmax(x)) on the (rows, keys) scores x
// and differentiates sum(p*readout) with respect to x.
func softmaxStats(scores, readout []float64, rows, keys int) (stats, error) {
	g := G.NewGraph()
	x := G.NewMatrix(g, G.Float64, G.WithShape(rows, keys), G.WithName("scores"),
		G.WithValue(constant(G.NewGraph(), "v", scores, rows, keys).Value()))
	logp, err := graph.LogSoftmax(x)
	if err != nil {
		return stats{}, err
	}
	p, err := G.Exp(logp)
	if err != nil {
		return stats{}, err
	}
	prod, err := G.HadamardProd(p, constant(g, "r", readout, rows, keys))
	if err != nil {
		return stats{}, err
	}
	cost, err := G.Sum(prod)
	if err != nil {
		return stats{}, err
	}
	grads, err := G.Grad(cost, x)
	if err != nil {
		return stats{}, err
	}
	v, err := run(g, p, grads[0])
	if err != nil {
		return stats{}, err
	}
	var st stats
	for i := 0; i < rows; i++ {
		m, h, n := 0.0, 0.0, 0.0
		for j := 0; j < keys; j++ {
			w, dw := v[0][i*keys+j], v[1][i*keys+j]
			m = max(m, w)
			if w > 0 {
				h -= w * math.Log(w)
			}
			n += dw * dw
		}
		st.maxWeight += m / float64(rows)
		st.entropy += h / float64(rows)
		st.gradNorm += math.Sqrt(n) / float64(rows)
	}
	return st, nil
}
