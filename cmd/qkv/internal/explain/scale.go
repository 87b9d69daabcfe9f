package explain

import (
	"fmt"
	"strings"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/internal/plot"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
)

// scaleOrder is the order the scales are trained, reported and drawn in.
var scaleOrder = []layers.AttentionScale{layers.ScaleDK, layers.ScaleDModel, layers.ScaleNone}

// scaleConfig is the run of the scale-dk-not-dmodel claim under scale s:
// `qkv train --task reverse --min-length 3 --max-length 5 --alphabet 5
// --dim 128 --heads 8 --hidden 128 --layers 1 --batch 32 --steps 600
// --eval-every 20 --test-size 100 --attn-scale s`, stopping at 100%
// held-out exact match. D = 128 with 8 heads makes dk = 16, so the three
// factors are far apart: 1/4 (dk), 1/11.3 (dmodel), 1 (none). Reversing
// needs each answer position to find one prompt position, sharp attention
// that the scale of the scores governs. o.Small is a tiny model trained for
// a few steps, enough to exercise every measurement.
func scaleConfig(o Options, s layers.AttentionScale) config.Config {
	cfg := config.Default()
	cfg.Task = config.TaskSpec{Name: "reverse", Params: data.TaskConfig{MinLength: 3, MaxLength: 5, Alphabet: 5}}
	cfg.Model.Dim, cfg.Model.Heads, cfg.Model.Hidden, cfg.Model.Layers = 128, 8, 128, 1
	cfg.Batch, cfg.Steps, cfg.Warmup, cfg.EvalEvery, cfg.TestSize = 32, 600, 50, 20, 100
	cfg.CheckpointEvery = cfg.Steps // one checkpoint, at the end
	if o.Small {
		cfg.Task.Params = data.TaskConfig{MinLength: 2, MaxLength: 3, Alphabet: 3}
		cfg.Model.Dim, cfg.Model.Heads, cfg.Model.Hidden = 16, 4, 16
		cfg.Batch, cfg.Steps, cfg.Warmup, cfg.EvalEvery, cfg.TestSize = 8, 12, 2, 6, 8
		cfg.CheckpointEvery = cfg.Steps
	}
	if o.Seed > 0 {
		cfg.Seed = uint64(o.Seed)
	}
	cfg.TargetExact = 1
	cfg.Model.AttnScale = s
	if s == layers.ScaleDK {
		cfg.Model.AttnScale = "" // the default, as `qkv train` without the flag writes it
	}
	return cfg
}

// scaleRun is what one scale's training measured.
type scaleRun struct {
	Scale layers.AttentionScale
	// Loss[i] is the training loss of step i+1.
	Loss []float64
	// EvalStep and Exact are the held-out exact match at each evaluation.
	EvalStep, Exact []float64
	// StepsToExact is the first evaluated step at 100% exact match, -1 if
	// none.
	StepsToExact int
	FinalLoss    float64 // the loss of the last step run
	FinalExact   float64 // the last evaluation's exact match
}

// trainScale trains cfg (scaleConfig's) and reads back its metrics.
func trainScale(cfg config.Config, s layers.AttentionScale) (scaleRun, error) {
	tr, err := trainModel(cfg)
	if err != nil {
		return scaleRun{}, err
	}
	defer tr.Close()
	run := scaleRun{Scale: s, StepsToExact: tr.stepsToExact()}
	for _, m := range tr.Metrics {
		run.Loss = append(run.Loss, m.Loss)
		if m.Eval != nil {
			run.EvalStep = append(run.EvalStep, float64(m.Step))
			run.Exact = append(run.Exact, m.Eval.ExactMatch)
		}
	}
	if len(run.Loss) == 0 || len(run.Exact) == 0 {
		return run, fmt.Errorf("scale %s: the run recorded %d steps and %d evaluations", s, len(run.Loss), len(run.Exact))
	}
	run.FinalLoss, run.FinalExact = run.Loss[len(run.Loss)-1], run.Exact[len(run.Exact)-1]
	return run, nil
}

// scaleDKNotDModel trains one model three times, from the same seed (same
// initial weights, same batches), with the scores scaled by 1/sqrt(dk),
// 1/sqrt(d_model) and 1, and compares how fast each reaches 100% held-out
// exact match.
func scaleDKNotDModel(o Options) (Result, error) {
	base := scaleConfig(o, layers.ScaleDK)
	m := base.Model
	r := Result{
		Statement: "Attention scores must be divided by sqrt(d_k), the width of one head, not by sqrt(d_model): the wrong scale trains worse.",
		Method: fmt.Sprintf("the same decoder (D %d, H %d so d_k %d, %d layer, FF %d; seed %d) trained by train.Run on %s %v, batch %d, at most %d steps, stopping at 100%% held-out exact match (%d examples, evaluated every %d steps), once per scale: 1/sqrt(d_k) = %.3g, 1/sqrt(D) = %.3g, 1; steps_to_exact -1 means not reached; mean_loss is the mean training loss over the steps all three ran",
			m.Dim, m.Heads, m.Dim/m.Heads, m.Layers, m.Hidden, base.Seed, base.Task.Name, base.Task.Params, base.Batch, base.Steps, base.TestSize, base.EvalEvery,
			layers.ScaleDK.Factor(m.Dim, m.Heads), layers.ScaleDModel.Factor(m.Dim, m.Heads)),
		Measured: map[string]float64{"max_steps": float64(base.Steps), "dk": float64(m.Dim / m.Heads), "heads": float64(m.Heads)},
	}
	runs := make([]scaleRun, len(scaleOrder))
	for i, s := range scaleOrder {
		run, err := trainScale(scaleConfig(o, s), s)
		if err != nil {
			return r, err
		}
		runs[i] = run
	}
	common := len(runs[0].Loss)
	for _, run := range runs {
		common = min(common, len(run.Loss))
	}
	r.Measured["common_steps"] = float64(common)
	var loss, exact []plot.Series
	for _, run := range runs {
		s := string(run.Scale)
		r.Measured["steps_to_exact_"+s] = float64(run.StepsToExact)
		r.Measured["final_loss_"+s] = run.FinalLoss
		r.Measured["final_exact_"+s] = run.FinalExact
		r.Measured["steps_run_"+s] = float64(len(run.Loss))
		mean := 0.0
		for _, l := range run.Loss[:common] {
			mean += l / float64(common)
		}
		r.Measured["mean_loss_"+s] = mean
		name := scaleLabel(run.Scale, m.Dim, m.Heads)
		steps := make([]float64, len(run.Loss))
		for i := range steps {
			steps[i] = float64(i + 1)
		}
		loss = append(loss, plot.Series{Name: name, X: steps, Y: run.Loss})
		exact = append(exact, plot.Series{Name: name, X: run.EvalStep, Y: run.Exact})
	}
	panels := []plot.Panel{
		{Title: "training loss", XLabel: "step", YLabel: "cross-entropy (nats per token)", LogY: true, Series: loss},
		{Title: "held-out exact match", XLabel: "step", YLabel: "exact match", Series: exact},
	}
	if err := r.draw(o, "scale-dk-not-dmodel", "", fmt.Sprintf("scale-dk-not-dmodel: the same model (D %d, H %d) trained with three scales of the scores", m.Dim, m.Heads), panels); err != nil {
		return r, err
	}
	r.Holds, r.Verdict, r.Why = judgeScales(runs, base.Steps)
	return r, nil
}

// scaleLabel names a scale with its factor for the legend.
func scaleLabel(s layers.AttentionScale, dim, heads int) string {
	switch s {
	case layers.ScaleDModel:
		return fmt.Sprintf("1/sqrt(d_model) = %.3g", s.Factor(dim, heads))
	case layers.ScaleNone:
		return "1 (unscaled)"
	}
	return fmt.Sprintf("1/sqrt(d_k) = %.3g", s.Factor(dim, heads))
}

// beats reports whether run a did at least as well as run b: a reached
// 100% exact match no later than b (b never reaching it counts as later);
// when neither reached it, a ended with a higher exact match, or the same
// and a lower loss.
func beats(a, b scaleRun) bool {
	switch {
	case a.StepsToExact >= 0 && b.StepsToExact >= 0:
		return a.StepsToExact <= b.StepsToExact
	case a.StepsToExact >= 0:
		return true
	case b.StepsToExact >= 0:
		return false
	}
	if a.FinalExact != b.FinalExact {
		return a.FinalExact > b.FinalExact
	}
	return a.FinalLoss < b.FinalLoss
}

// judgeScales gives the verdict on runs, in scaleOrder (dk first): the
// claim holds if dk does at least as well as each wrong scale (see beats),
// in part if as well as one of them.
func judgeScales(runs []scaleRun, maxSteps int) (bool, string, string) {
	dk := runs[0]
	var parts []bool
	var says []string
	for _, run := range runs {
		reached := fmt.Sprintf("not reached in %d steps (exact match %.2f at the end, loss %.3g)", maxSteps, run.FinalExact, run.FinalLoss)
		if run.StepsToExact >= 0 {
			reached = fmt.Sprintf("%d steps", run.StepsToExact)
		}
		says = append(says, fmt.Sprintf("%s %s", run.Scale, reached))
		if run.Scale != layers.ScaleDK {
			parts = append(parts, beats(dk, run))
		}
	}
	holds, v := verdict(parts...)
	why := "to 100% held-out exact match: " + strings.Join(says, ", ") + "; "
	switch v {
	case Holds:
		why += "the d_k scale trained no slower than either wrong one"
	case HoldsInPart:
		why += "the d_k scale beat one wrong scale, not the other"
	default:
		why += "both wrong scales trained at least as fast here"
	}
	if v != Holds {
		why += " (one seed, so a gap of a few evaluations may be noise; and the learned Wq and Wk can grow to absorb a constant factor of the scores)"
	}
	return holds, v, why
}
