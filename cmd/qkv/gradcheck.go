package main

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
)

func runGradcheck(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("gradcheck", "[flags]", stderr)
	cfg := layers.StackConfig{Vocab: 7, MaxLen: 5, Dim: 8, Heads: 2, Layers: 2, Hidden: 16, Activation: layers.ActivationGELU, Bias: true}
	fs.IntVar(&cfg.Layers, "layers", cfg.Layers, fmt.Sprintf("number of blocks (at most %d)", gradcheckMaxLayers))
	fs.IntVar(&cfg.Heads, "heads", cfg.Heads, "attention heads (must divide --dim)")
	fs.IntVar(&cfg.Dim, "dim", cfg.Dim, fmt.Sprintf("model width (at most %d)", gradcheckMaxDim))
	fs.IntVar(&cfg.Hidden, "hidden", cfg.Hidden, fmt.Sprintf("feed-forward width (at most %d)", gradcheckMaxHidden))
	fs.Var(kindFlag[layers.Activation]{&cfg.Activation}, "activation", "relu or gelu")
	fs.BoolVar(&cfg.PostLN, "post-ln", cfg.PostLN, "post-LN blocks")
	fs.Var(kindFlag[layers.AttentionImpl]{&cfg.Attention}, "attention", "attention whose gradient is checked: composed (gorgonia's autodiff), fused (default) or flash (both hand-written backward passes)")
	fs.Var(defaultKind[layers.AttentionScale]{&cfg.AttnScale, layers.ScaleDK}, "attn-scale", "factor of the attention scores: dk (default), dmodel or none")
	fs.Var(kindFlag[layers.PositionsKind]{&cfg.Positions}, "positions", "positional encoding: learned (default), sinusoidal, none, rope, rope-interleaved or alibi")
	fs.IntVar(&cfg.Window, "window", 0, "sliding window of w keys (0: none)")
	fs.Float64Var(&cfg.RoPEBase, "rope-base", 0, "base of RoPE's frequencies (0: 10000)")
	fs.IntVar(&cfg.KVHeads, "kv-heads", 0, "key/value heads of grouped-query attention, dividing --heads (0: as many as --heads)")
	fs.Float64Var(&cfg.Softcap, "softcap", 0, "cap the attention scores at c*tanh(s/c) (0: no cap)")
	fs.BoolVar(&cfg.Sinks, "sinks", false, "a learnable sink logit per head")
	fs.BoolVar(&cfg.QKNorm, "qk-norm", false, "RMSNorm of each head's queries and keys")
	fs.BoolVar(&cfg.Bias, "bias", cfg.Bias, "biases in the attention and feed-forward projections")
	fs.BoolVar(&cfg.TieEmbeddings, "tie-embeddings", false, "the head is the token embedding, transposed (nanoGPT's)")
	fs.BoolVar(&cfg.BiasFreeNorm, "bias-free-norm", false, "LayerNorms without their bias (nanoGPT's bias=False)")
	batch := fs.Int("batch", 2, fmt.Sprintf("sequences (at most %d)", gradcheckMaxBatch))
	seed := fs.Uint64("seed", 1, "seed of weights and data")
	tol := fs.Float64("tol", 1e-6, "largest norm-relative error that passes (finite, > 0)")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if err := checkGradcheck(cfg, *batch, *tol); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "checking %s\n", describeGradcheck(cfg, *batch))
	report, err := gradcheckDecoder(cfg, *batch, *seed, gradcheckProgress(stderr))
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, report)
	worst := report.Worst()
	if worst.Rel > *tol {
		return fmt.Errorf("gradient of %s is off: relative error %.3e > %.1e", worst.Name, worst.Rel, *tol)
	}
	fmt.Fprintf(stdout, "ok: every gradient within %.1e (worst %s, %.3e)\n", *tol, worst.Name, worst.Rel)
	return nil
}

// describeGradcheck names the model a gradcheck differentiates, so that a
// reader of its report knows which attention and options it covered.
func describeGradcheck(c layers.StackConfig, batch int) string {
	norm := "pre-LN"
	if c.PostLN {
		norm = "post-LN"
	}
	impl, pos, scale := c.Attention, c.Positions, c.AttnScale
	if impl == "" {
		impl = layers.AttentionFused
	}
	if pos == "" {
		pos = layers.PositionsLearned
	}
	if scale == "" {
		scale = layers.ScaleDK
	}
	var variants string
	if c.KVHeads != 0 {
		variants += fmt.Sprintf(", %s", plural(c.KVHeads, "key/value head"))
	}
	if c.Softcap != 0 {
		variants += fmt.Sprintf(", softcap %g", c.Softcap)
	}
	if c.Sinks {
		variants += ", sinks"
	}
	if c.QKNorm {
		variants += ", QK-norm"
	}
	if c.Window != 0 {
		variants += fmt.Sprintf(", window %d", c.Window)
	}
	if c.RoPEBase != 0 {
		variants += fmt.Sprintf(", RoPE base %g", c.RoPEBase)
	}
	if !c.Bias {
		variants += ", no projection biases"
	}
	if c.TieEmbeddings {
		variants += ", tied head"
	}
	if c.BiasFreeNorm {
		variants += ", gain-only LayerNorms"
	}
	return fmt.Sprintf("a float64 decoder (%s, dim %d, %s, hidden %d, %s, %s): attention %s, scale %s, positions %s%s; batch %d",
		plural(c.Layers, "block"), c.Dim, plural(c.Heads, "head"), c.Hidden, c.Activation, norm, impl, scale, pos, variants, batch)
}

// plural is "1 block", "2 blocks".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// gradcheckDecoder checks a float64 decoder with random weights (biases and
// gains too, which start at 0 and 1) on a random padded batch with a
// weighted cross-entropy.
func gradcheckDecoder(cfg layers.StackConfig, b int, seed uint64, progress func(param string, done, total int)) (graph.GradReport, error) {
	n := cfg.MaxLen
	m, err := model.Assemble(config.Config{Model: cfg, DType: config.Float64, Seed: seed}, b, n, model.Options{Train: true})
	if err != nil {
		return nil, err
	}
	ids, pad, targets, cost := m.IDs, m.Pad, m.Targets, m.Cost

	rng := rand.New(rand.NewPCG(seed, 7))
	for _, p := range m.Params {
		vals := p.Node.Value().Data().([]float64)
		for i := range vals {
			vals[i] += 0.3 * rng.NormFloat64()
		}
	}
	tok, tgt := make([]int, b*n), make([]int, b*n)
	w := make([]float64, b*n)
	lengths := make([]int, b)
	for r := range lengths {
		lengths[r] = n - r%2 // every other row ends in padding
		for i := 0; i < n; i++ {
			tok[r*n+i], tgt[r*n+i] = rng.IntN(cfg.Vocab), rng.IntN(cfg.Vocab)
			if i < lengths[r] {
				w[r*n+i] = 1
			}
		}
	}
	mask, err := graph.KeyPadding(lengths, n, n)
	if err != nil {
		return nil, err
	}
	if err := ids.Set(tok); err != nil {
		return nil, err
	}
	if err := pad.Set(mask); err != nil {
		return nil, err
	}
	if err := targets.Set(tgt, w); err != nil {
		return nil, err
	}
	return graph.GradCheck(cost, m.Params, nil, graph.GradCheckConfig{Progress: progress})
}

// gradcheckProgress shows on w how many weights have been differenced, as
// a bar on a terminal and elsewhere as a line per tenth, naming the
// parameter at hand: the check of a large model takes minutes.
func gradcheckProgress(w io.Writer) func(param string, done, total int) {
	var bar *progressbar.ProgressBar
	tenth, terminal, start := 0, isTerminal(w), time.Now()
	return func(param string, done, total int) {
		if !terminal {
			if t := 10 * done / total; t > tenth {
				tenth = t
				left := time.Since(start) * time.Duration(total-done) / time.Duration(done)
				fmt.Fprintf(w, "gradcheck: %d%% (%d of %d weights, about %s left), at %s\n", 10*t, done, total, left.Round(time.Second), param)
			}
			return
		}
		if bar == nil {
			bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription("gradcheck"),
				progressbar.OptionShowCount(), progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionSetPredictTime(true), progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }))
		}
		bar.Describe("gradcheck " + param)
		_ = bar.Set(done)
	}
}

// Bounds of gradcheck's sizes: finite differences run the model twice per
// weight, so the time grows with the weights times the cost of a run. At
// all four bounds (51,495 weights) the check takes about 4 minutes on two
// shared cores (README, "The command line"); at the earlier bounds (64,
// 256, 8, 16) it printed nothing for more than 20 minutes.
const (
	gradcheckMaxDim    = 32
	gradcheckMaxHidden = 128
	gradcheckMaxLayers = 4
	gradcheckMaxBatch  = 4
)

// checkGradcheck checks gradcheck's flags before anything is built.
func checkGradcheck(cfg layers.StackConfig, batch int, tol float64) error {
	for _, f := range []struct {
		name   string
		v, max int
	}{{"dim", cfg.Dim, gradcheckMaxDim}, {"heads", cfg.Heads, cfg.Dim}, {"layers", cfg.Layers, gradcheckMaxLayers},
		{"hidden", cfg.Hidden, gradcheckMaxHidden}, {"batch", batch, gradcheckMaxBatch}} {
		if f.v < 1 {
			return fmt.Errorf("%w: --%s: must be positive, got %d", errUsage, f.name, f.v)
		}
		if f.v > f.max && f.name == "heads" {
			return fmt.Errorf("%w: --heads: at most --dim, %d, got %d", errUsage, f.max, f.v)
		}
		if f.v > f.max {
			return fmt.Errorf("%w: --%s: at most %d, got %d: finite differences run the model twice per weight, and gradcheck at its bounds takes minutes, larger models hours", errUsage, f.name, f.max, f.v)
		}
	}
	if cfg.Dim%cfg.Heads != 0 {
		return fmt.Errorf("%w: --heads (with --dim): dim %d is not divisible by heads %d", errUsage, cfg.Dim, cfg.Heads)
	}
	if cfg.Activation != layers.ActivationReLU && cfg.Activation != layers.ActivationGELU {
		return fmt.Errorf("%w: --activation: unknown activation %q: want %q or %q", errUsage, cfg.Activation, layers.ActivationReLU, layers.ActivationGELU)
	}
	if cfg.Attention != "" {
		if _, err := layers.ParseAttentionImpl(string(cfg.Attention)); err != nil {
			return fmt.Errorf("%w: --attention: %v", errUsage, err)
		}
	}
	if cfg.AttnScale != "" {
		if _, err := layers.ParseAttentionScale(string(cfg.AttnScale)); err != nil {
			return fmt.Errorf("%w: --attn-scale: %v", errUsage, err)
		}
	}
	if cfg.Positions != "" {
		if _, err := layers.ParsePositionsKind(string(cfg.Positions)); err != nil {
			return fmt.Errorf("%w: --positions: %v", errUsage, err)
		}
	}
	if cfg.KVHeads < 0 || cfg.KVHeads > 0 && cfg.Heads%cfg.KVHeads != 0 {
		return fmt.Errorf("%w: --kv-heads (with --heads): %d does not divide heads %d", errUsage, cfg.KVHeads, cfg.Heads)
	}
	if math.IsNaN(cfg.Softcap) || math.IsInf(cfg.Softcap, 0) || cfg.Softcap < 0 {
		return fmt.Errorf("%w: --softcap: must be a finite number >= 0 (0: no cap), got %v", errUsage, cfg.Softcap)
	}
	if err := cfg.Validate(); err != nil { // RoPE's even dk, the window, RoPE's base
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if math.IsNaN(tol) || math.IsInf(tol, 0) || tol <= 0 {
		return fmt.Errorf("%w: --tol: must be a finite number > 0, got %v", errUsage, tol)
	}
	return nil
}
