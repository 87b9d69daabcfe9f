package train

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/graphtest"
	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/infer"
	"github.com/qkv-dev/qkv/train/model"
)

// charsConfig is a small character model on a text of its own: a verse
// repeated with variations, so that 60 steps learn something.
func charsConfig(t *testing.T) config.Config {
	t.Helper()
	var b strings.Builder
	for i := range 200 {
		b.WriteString([]string{"the cat sat on the mat.\n", "a dog ran in the fog!\n", "one fish, two fish; red fish.\n"}[i%3])
	}
	b.WriteString("Zebras are unseen.\n") // Z is in the validation text only
	path := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Preset(config.PresetNanoGPTCPU)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Task.Params.Data, cfg.Task.Params.Context = path, 16
	cfg.Model.Dim, cfg.Model.Heads, cfg.Model.Layers, cfg.Model.Hidden = 32, 2, 1, 64
	cfg.Steps, cfg.Warmup, cfg.EvalEvery, cfg.TestSize, cfg.CheckpointEvery = 60, 5, 20, 40, 20
	cfg.LR = 3e-3
	return cfg
}

// A chars run reports its validation loss, in nats and bits, in every
// evaluation of metrics.jsonl and in summary.json; the loss falls below a
// uniform guess over the vocabulary; and it is the loss the training
// graph's own cross-entropy gives the same windows.
func TestCharsRun(t *testing.T) {
	cfg := charsConfig(t)
	out := t.TempDir()
	sum, err := Run(context.Background(), cfg, Options{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	var evals []infer.EvalResult
	for _, m := range readMetrics(t, out) {
		if m.Eval != nil {
			evals = append(evals, *m.Eval)
		}
	}
	if len(evals) != 3 {
		t.Fatalf("%d evaluations in metrics.jsonl, want 3 (every 20 of 60 steps)", len(evals))
	}
	for _, e := range evals {
		if !(e.Loss > 0) || math.Abs(e.BPC-e.Loss/math.Ln2) > 1e-12 || e.N != cfg.TestSize {
			t.Errorf("evaluation %+v: want a positive loss in nats, bits = nats/ln 2, %d windows", e, cfg.TestSize)
		}
	}
	last := evals[len(evals)-1]
	if sum.ValLoss != last.Loss || sum.ValBPC != last.BPC {
		t.Errorf("summary val_loss %v, val_bpc %v; the last evaluation %v, %v", sum.ValLoss, sum.ValBPC, last.Loss, last.BPC)
	}
	if uniform := math.Log(float64(sum.Config.Model.Vocab)); !(last.Loss < 0.6*uniform) || !(last.Loss < evals[0].Loss) {
		t.Errorf("validation loss %.3f after %d steps (first evaluation %.3f), want below 0.6·ln(vocab) = %.3f and falling", last.Loss, sum.Steps, evals[0].Loss, 0.6*uniform)
	}
	if sum.Config.Task.Params.Unknown == 0 {
		t.Fatalf("the validation text's Z is not counted unknown: %+v", sum.Config.Task.Params)
	}

	// The same windows through the training graph's cross-entropy.
	resolved := sum.Config
	task, err := resolved.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	stream, err := data.NewStream(task, resolved.Seed, resolved.TestSize)
	if err != nil {
		t.Fatal(err)
	}
	windows := stream.Test()
	m, err := model.Build(resolved, len(windows), resolved.Model.MaxLen, model.Options{Train: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ck, err := checkpoint.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.LoadParams(m.Params, ck.Weights, checkpoint.File(out, checkpoint.ModelFile)); err != nil {
		t.Fatal(err)
	}
	batch, err := data.BatchFor(task, windows)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetBatch(model.Batch{Batch: batch}); err != nil {
		t.Fatal(err)
	}
	if err := m.Targets.Set(batch.Targets, batch.Weights); err != nil {
		t.Fatal(err)
	}
	var cost float64
	if err := m.Run(func() error {
		v, err := graph.Float64s(m.Cost.Value())
		if err == nil {
			cost = v[0]
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("validation loss %.7f (first evaluation %.4f), the training graph's cross-entropy %.7f", last.Loss, evals[0].Loss, cost)
	if d := math.Abs(cost - last.Loss); d > 1e-5*last.Loss {
		t.Errorf("validation loss %.7f, the training graph's cross-entropy of the same windows %.7f (|diff| %.2g)", last.Loss, cost, d)
	}
}

// A chars run stopped and resumed ends with the bytes of one that ran
// straight through, and the same losses and validation losses.
func TestCharsResumeBitForBit(t *testing.T) {
	cfg := charsConfig(t)
	cfg.Steps = 30
	cfg.EvalEvery = 10
	straight, split := t.TempDir(), t.TempDir()
	if _, err := Run(context.Background(), cfg, Options{Out: straight}); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), cfg, Options{Out: split, StopAfter: 15}); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("stopped run: got %v, want ErrInterrupted", err)
	}
	if _, err := Run(context.Background(), cfg, Options{Out: split, Resume: true}); err != nil {
		t.Fatal(err)
	}
	sameRun(t, straight, split)
}

// A chars run refuses what a language model cannot be: an encoder–decoder,
// or a target exact match.
func TestCharsConfigErrors(t *testing.T) {
	for _, c := range []struct {
		field string
		edit  func(*config.Config)
	}{
		{"arch", func(c *config.Config) { c.Arch = config.ArchEncDec }},
		{"target_exact", func(c *config.Config) { c.TargetExact = 1 }},
		{"task.params.val_fraction", func(c *config.Config) { c.Task.Params.ValFraction = math.NaN() }},
		{"test_size", func(c *config.Config) { c.TestSize = data.MaxTestSize + 1 }},
	} {
		cfg := charsConfig(t)
		c.edit(&cfg)
		var ce *config.Error
		if _, err := cfg.Resolve(); !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%s: error %v, want a *config.Error naming it", c.field, err)
		}
	}
}

// tools/nanogpt's PyTorch reference, which README's side-by-side figures
// come from, passes its own self-test here: its bad-input messages, finite
// losses, and a loss that falls on a repetitive text.
func TestNanoGPTReferenceCheck(t *testing.T) {
	script := filepath.Join("..", "tools", "nanogpt", "nanogpt_chars.py")
	py := graphtest.TorchPython(t, script)
	out, err := exec.Command(py, script, "--check").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --check: %v\n%s", script, err, out)
	}
}
