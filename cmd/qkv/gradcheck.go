package main

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
)

func runGradcheck(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("gradcheck", "[flags]", stderr)
	cfg := gradcheckDefault()
	registerSchema(fs, &cfg, "dropout", "attn-dropout", "causal-encoder", "init") // no randomness inside a check, and a decoder
	for name, usage := range map[string]string{
		"layers":    fmt.Sprintf("number of blocks (at most %d)", gradcheckMaxLayers),
		"dim":       fmt.Sprintf("model width (at most %d)", gradcheckMaxDim),
		"hidden":    fmt.Sprintf("feed-forward width (at most %d)", gradcheckMaxHidden),
		"attention": "attention whose gradient is checked: composed (gorgonia's autodiff), fused (default) or flash (both hand-written backward passes)",
	} {
		fs.Lookup(name).Usage = usage
	}
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

// gradcheckDefault is the model gradcheck differentiates without flags.
func gradcheckDefault() layers.StackConfig {
	return layers.StackConfig{Vocab: 7, MaxLen: 5, Dim: 8, Heads: 2, Layers: 2, Hidden: 16, BlockOptions: layers.BlockOptions{Activation: layers.ActivationGELU, Bias: true}}
}

// ptr returns a pointer to a copy of v.
func ptr[T any](v T) *T { return &v }

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
	// Every other option that differs from gradcheck's own default, as
	// the flag that sets it: the schema's, so a new option is named too.
	var variants string
	def := schemaOf(ptr(gradcheckDefault()))
	for i, f := range schemaOf(&c) {
		switch f.flag {
		case "layers", "dim", "heads", "hidden", "activation", "post-ln", "attention", "attn-scale", "positions":
			continue // said above
		}
		if f.value.Equal(def[i].value) {
			continue
		}
		if f.value.Kind() == reflect.Bool && f.value.Bool() {
			variants += ", " + f.flag
		} else {
			variants += fmt.Sprintf(", %s=%v", f.flag, fieldFlag{f.value, f.zero})
		}
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
	if err := cfg.Validate(); err != nil {
		return schemaUsageError(err, &cfg)
	}
	if math.IsNaN(tol) || math.IsInf(tol, 0) || tol <= 0 {
		return fmt.Errorf("%w: --tol: must be a finite number > 0, got %v", errUsage, tol)
	}
	return nil
}
