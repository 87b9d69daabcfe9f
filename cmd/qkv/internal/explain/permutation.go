package explain

import (
	"fmt"
	"math"
	"math/rand"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/internal/plot"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
)

// The encoder of the equivariance runs: batch, length, vocabulary, width,
// heads and blocks (eqLayers by default; the figure runs 1 to eqMaxLayers).
const eqB, eqS, eqVocab, eqDim, eqHeads, eqLayers, eqMaxLayers = 2, 10, 12, 32, 4, 2, 4

// encodeTokens runs tokens (eqB, eqS) through a qkv encoder stack
// (layers.NewEncoder, float64, no padding, no dropout) of the given
// positional encoding and depth, its weights drawn from seed 11 every time
// so that two calls differ only in their tokens, and returns its hidden
// states (eqB, eqS, eqDim).
func encodeTokens(tokens []int, pos layers.PositionsKind, nLayers int) ([]float64, error) {
	g := G.NewGraph()
	s, err := layers.NewScope(g, tensor.Float64, 11)
	if err != nil {
		return nil, err
	}
	enc, err := layers.NewEncoder(s, layers.StackConfig{
		Vocab:        eqVocab,
		MaxLen:       eqS,
		Dim:          eqDim,
		Heads:        eqHeads,
		Layers:       nLayers,
		Hidden:       4 * eqDim,
		BlockOptions: layers.BlockOptions{Activation: layers.ActivationGELU, Positions: pos, Bias: true},
	})
	if err != nil {
		return nil, err
	}
	ids, err := tokenIDs(g, eqB, eqS, eqVocab, tokens)
	if err != nil {
		return nil, err
	}
	h, _, err := enc.Forward(ids, nil)
	if err != nil {
		return nil, err
	}
	return runOne(g, h)
}

// equivarianceError draws tokens and a permutation perm of the positions,
// runs the encoder on X and on perm X (position i holds X's token perm[i])
// and returns max |enc(perm X)[i] − enc(X)[perm[i]]| over rows, positions
// and channels: 0 up to rounding exactly when the encoder is
// permutation-equivariant on these inputs.
func equivarianceError(rng *rand.Rand, pos layers.PositionsKind, nLayers int) (float64, error) {
	x := make([]int, eqB*eqS)
	for i := range x {
		x[i] = rng.Intn(eqVocab)
	}
	perm := rng.Perm(eqS)
	px := make([]int, len(x))
	for b := 0; b < eqB; b++ {
		for i, p := range perm {
			px[b*eqS+i] = x[b*eqS+p]
		}
	}
	y, err := encodeTokens(x, pos, nLayers)
	if err != nil {
		return 0, err
	}
	py, err := encodeTokens(px, pos, nLayers)
	if err != nil {
		return 0, err
	}
	return permutedDiff(y, py, perm, eqB, eqS, eqDim), nil
}

// permutedDiff returns max |py[b, i, c] − y[b, perm[i], c]|: how far py, the
// output on the permuted input, is from the permuted output y.
func permutedDiff(y, py []float64, perm []int, b, s, d int) float64 {
	worst := 0.0
	for n := 0; n < b; n++ {
		for i, p := range perm {
			for c := 0; c < d; c++ {
				worst = max(worst, math.Abs(py[(n*s+i)*d+c]-y[(n*s+p)*d+c]))
			}
		}
	}
	return worst
}

// orderRun is one training run of the order-dependent task.
type orderRun struct {
	name  string // measured-name suffix: learned_decoder, none_encdec, ...
	label string // legend
	arch  config.Arch
	pos   layers.PositionsKind
}

// permutationEquivariance measures (a) that an encoder without positions
// is permutation-equivariant and one with positions is not, and (b) what
// reverse, whose answer depends on the order of its prompt, learns with and
// without positions in a decoder and in an encoder–decoder.
func permutationEquivariance(o Options) (Result, error) {
	const id = "permutation-equivariance"
	task := "reverse"
	steps := 400
	if o.Small {
		steps = 20
	}
	r := Result{
		Statement: "Without positional encoding self-attention is permutation-equivariant: permuting the input only permutes the output, so the model cannot use word order.",
		Method: fmt.Sprintf("(a) qkv's encoder stack (layers.NewEncoder, random weights, float64, D=%d, H=%d, %d blocks, no padding), tokens (B=%d, S=%d) and the same tokens with their positions permuted: max |enc(πX) − π enc(X)| with no, sinusoidal and learned positions, at 1 to %d blocks for the figure; "+
			"(b) %s (%s) trained as `qkv train` trains it, same seed, %d steps at most (stopping at held-out exact match 1), as the default decoder and as an encoder–decoder (--arch encdec), with learned positions and with none "+
			"(the encoder–decoder's positions are one setting for both halves: none means neither the encoder nor the decoder has any); final held-out exact match",
			eqDim, eqHeads, eqLayers, eqB, eqS, eqMaxLayers, task, data.DefaultConfig(task), steps),
		Measured: map[string]float64{},
	}

	// (a) Equivariance of the encoder.
	kinds := []layers.PositionsKind{layers.PositionsNone, layers.PositionsSinusoidal, layers.PositionsLearned}
	var errSeries []plot.Series
	for _, k := range kinds {
		se := plot.Series{Name: "positions " + string(k)}
		if k == layers.PositionsNone {
			se.Name += " (an exact 0 drawn at 1e-17)"
		}
		for nl := 1; nl <= eqMaxLayers; nl++ {
			if o.Small && nl != eqLayers {
				continue
			}
			e, err := equivarianceError(rand.New(rand.NewSource(o.Seed)), k, nl)
			if err != nil {
				return r, err
			}
			if nl == eqLayers {
				r.Measured["encoder_equivariance_error_"+string(k)] = e
			}
			// A log axis cannot show an exact 0: it is drawn at 1e-17.
			se.X, se.Y = append(se.X, float64(nl)), append(se.Y, max(e, 1e-17))
		}
		errSeries = append(errSeries, se)
	}

	// (b) Training with and without positions.
	runs := []orderRun{
		{"learned_decoder", "decoder, learned positions", config.ArchDecoder, layers.PositionsLearned},
		{"none_decoder", "decoder, no positions", config.ArchDecoder, layers.PositionsNone},
		{"learned_encdec", "encoder–decoder, learned positions", config.ArchEncDec, layers.PositionsLearned},
		{"none_encdec", "encoder–decoder, no positions", config.ArchEncDec, layers.PositionsNone},
	}
	var curves []plot.Series
	for _, run := range runs {
		cfg := config.Default()
		cfg.Task = config.TaskSpec{Name: task, Params: data.DefaultConfig(task)}
		cfg.Arch = run.arch
		cfg.Model.Positions = run.pos
		cfg.Seed = uint64(o.Seed)
		cfg.Steps = steps
		cfg.CheckpointEvery = steps
		cfg.EvalEvery = 50
		if o.Small {
			cfg.Warmup, cfg.EvalEvery, cfg.TestSize = 5, 20, 20
		}
		tr, err := trainModel(cfg)
		if err != nil {
			return r, err
		}
		tr.Close()
		r.Measured["exact_match_"+task+"_"+run.name] = tr.Summary.ExactMatch
		r.Measured["steps_"+task+"_"+run.name] = float64(tr.Summary.Steps)
		se := plot.Series{Name: run.label}
		for _, m := range tr.Metrics {
			if m.Eval != nil {
				se.X, se.Y = append(se.X, float64(m.Step)), append(se.Y, m.Eval.ExactMatch)
			}
		}
		if len(se.X) > 0 {
			curves = append(curves, se)
		}
	}
	panels := []plot.Panel{
		{Title: "encoder: largest entry of enc(πX) − π enc(X)", XLabel: "encoder blocks", YLabel: "max abs difference", LogY: true, Series: errSeries},
	}
	if len(curves) > 0 {
		panels = append(panels, plot.Panel{Title: task + ": held-out exact match", XLabel: "step", YLabel: "exact match", Series: curves})
	}
	if err := r.draw(o, id, "", "permutation-equivariance: without positions the encoder only permutes; order tasks need positions", panels); err != nil {
		return r, err
	}

	m := r.Measured
	none, sin, learned := m["encoder_equivariance_error_none"], m["encoder_equivariance_error_sinusoidal"], m["encoder_equivariance_error_learned"]
	decL, decN := m["exact_match_"+task+"_learned_decoder"], m["exact_match_"+task+"_none_decoder"]
	edL, edN := m["exact_match_"+task+"_learned_encdec"], m["exact_match_"+task+"_none_encdec"]
	equivariant := none < 1e-12 && sin > 1e-3 && learned > 1e-3
	// The order-blind encoder–decoder must fail where the one with
	// positions succeeds: 0.9 and below 0.5 leave room for a noisy held-out
	// set, and at the small size nothing is learned either way.
	blind := edL >= 0.9 && edN < 0.5
	r.Holds, r.Verdict = verdict(equivariant, blind)
	// The causal decoder is not order-blind: query i sees exactly i+1
	// keys, so it can count from the start. Say what it did with that.
	var decoderNote string
	switch {
	case decN >= 0.9:
		decoderNote = fmt.Sprintf("the causal decoder without positions learned it all the same (%.3f, with them %.3f): its mask leaks position, since query i sees exactly i+1 keys and can count from the start", decN, decL)
	case decN > edN+0.2:
		decoderNote = fmt.Sprintf("the causal decoder without positions learned it in part (%.3f, with them %.3f, against %.3f for the order-blind encoder–decoder): its mask leaks position, since query i sees exactly i+1 keys and can count from the start, but less readily than a position table gives it", decN, decL, edN)
	default:
		decoderNote = fmt.Sprintf("the causal decoder without positions did no better (%.3f, with them %.3f): although its mask leaks position (query i sees i+1 keys), it did not learn to use it in this budget", decN, decL)
	}
	r.Why = fmt.Sprintf("without positions the encoder's output on a permuted input is the permuted output to %.1e (with sinusoidal positions off by %.2g, learned %.2g); on %s the encoder–decoder reached exact match %.3f with positions and %.3f without, its encoder order-blind; %s",
		none, sin, learned, task, edL, edN, decoderNote)
	return r, nil
}
