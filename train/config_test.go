package train

import (
	"context"
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/internal/memprobe"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
)

// TestConfigErrorNamesField: every invalid value, NaN and Inf included, is
// refused by Resolve (and Run) before anything is built, with a
// *config.Error naming its JSON field.
func TestConfigErrorNamesField(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	cases := []struct {
		field  string
		mutate func(*config.Config)
	}{
		{"model.dropout", func(c *config.Config) { c.Model.Dropout = nan }},
		{"model.dropout", func(c *config.Config) { c.Model.Dropout = 1 }},
		{"model.attn_dropout", func(c *config.Config) { c.Model.AttnDropout = inf }},
		{"model.attn_dropout", func(c *config.Config) { c.Model.AttnDropout = -0.5 }},
		{"lr", func(c *config.Config) { c.LR = nan }},
		{"lr", func(c *config.Config) { c.LR = inf }},
		{"lr", func(c *config.Config) { c.LR = 0 }},
		{"min_lr", func(c *config.Config) { c.MinLR = nan }},
		{"min_lr", func(c *config.Config) { c.MinLR = c.LR * 2 }},
		{"clip_norm", func(c *config.Config) { c.ClipNorm = inf }},
		{"clip_norm", func(c *config.Config) { c.ClipNorm = nan }},
		{"clip_norm", func(c *config.Config) { c.ClipNorm = -1 }},
		{"weight_decay", func(c *config.Config) { c.WeightDecay = nan }},
		{"weight_decay", func(c *config.Config) { c.WeightDecay = -1 }},
		{"target_exact", func(c *config.Config) { c.TargetExact = nan }},
		{"target_exact", func(c *config.Config) { c.TargetExact = 1.01 }},
		{"optimizer", func(c *config.Config) { c.Optimizer = "sgd" }},
		{"optimizer", func(c *config.Config) { c.Optimizer = "" }},
		{"dtype", func(c *config.Config) { c.DType = "int8" }},
		{"task.name", func(c *config.Config) { c.Task.Name = "juggle" }},
		{"task.params.length", func(c *config.Config) { c.Task.Params.Length = -1 }},
		{"task.params.alphabet", func(c *config.Config) { c.Task.Params.Alphabet = 99 }},
		{"task.params.length", func(c *config.Config) { c.Task.Params.MinLength, c.Task.Params.MaxLength = 2, 5 }},
		{"test_size", func(c *config.Config) { c.TestSize = 100000 }},
		{"test_size", func(c *config.Config) { c.TestSize = config.MaxTestSize + 1 }},
		{"test_size", func(c *config.Config) { c.Task.Params = data.TaskConfig{Length: 1, Alphabet: 3}; c.TestSize = 1 }},
		{"model.heads", func(c *config.Config) { c.Model.Heads = 5 }},
		{"model.dim", func(c *config.Config) { c.Model.Dim = 0 }},
		{"model.layers", func(c *config.Config) { c.Model.Layers = config.MaxLayers + 1 }},
		{"model.activation", func(c *config.Config) { c.Model.Activation = "swish" }},
		{"model.positions", func(c *config.Config) { c.Model.Positions = "rotary" }},
		{"batch", func(c *config.Config) { c.Batch = 0 }},
		{"steps", func(c *config.Config) { c.Steps = -1 }},
		{"warmup", func(c *config.Config) { c.Warmup = c.Steps + 1 }},
		{"eval_every", func(c *config.Config) { c.EvalEvery = 0 }},
		{"checkpoint_every", func(c *config.Config) { c.CheckpointEvery = 0 }},
	}
	for _, c := range cases {
		cfg := config.Default()
		c.mutate(&cfg)
		_, err := cfg.Resolve()
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%s: Resolve returned %v, want a *config.Error for %s", c.field, err, c.field)
			continue
		}
		if !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: message %q does not name the field", c.field, err)
		}
		// Run refuses it before creating the run directory.
		dir := t.TempDir() + "/run"
		if _, err := Run(context.Background(), cfg, Options{Out: dir}); !errors.As(err, &ce) {
			t.Errorf("%s: Run returned %v", c.field, err)
		}
	}
}

// TestAcceptedConfigsMarshal: the defaults of every task resolve, and a
// resolved configuration survives config.json unchanged.
func TestAcceptedConfigsMarshal(t *testing.T) {
	for _, name := range data.Names() {
		cfg := config.Default()
		if name == "chars" { // a language model has no exact match to target
			cfg.TargetExact = 0
		}
		cfg.Task = config.TaskSpec{Name: name, Params: data.DefaultConfig(name)}
		if _, err := cfg.Resolve(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := config.Marshal(cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		back, err := config.Unmarshal(b)
		if err != nil || back != cfg {
			t.Errorf("%s: round trip gave %+v, %v", name, back, err)
		}
	}
}

// TestBuildRefusesLargeModels: model.Build checks its estimate against
// the memory limit before allocating.
func TestBuildRefusesLargeModels(t *testing.T) {
	cfg := config.Default()
	if _, err := cfg.Resolve(); err != nil {
		t.Fatal(err)
	}
	// Far beyond any machine: 1e12 sequences.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := model.Build(cfg, 1_000_000_000_000, cfg.Model.MaxLen, model.Options{Train: true})
	runtime.ReadMemStats(&after)
	var me *config.MemoryError
	if !errors.As(err, &me) || !strings.Contains(err.Error(), "activations") {
		t.Fatalf("model.Build of 1e12 sequences: %v, want a *config.MemoryError with the breakdown", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("refusing allocated %d bytes", grew)
	}
	// A limit set by config.SetMemoryLimit applies, and restores.
	prev := config.SetMemoryLimit(1 << 10)
	_, err = model.Build(cfg, 1, cfg.Model.MaxLen, model.Options{})
	config.SetMemoryLimit(prev)
	if !errors.As(err, &me) || me.Limit != 1<<10 {
		t.Fatalf("model.Build under a 1 KiB limit: %v", err)
	}
	m, err := model.Build(cfg, 1, cfg.Model.MaxLen, model.Options{})
	if err != nil {
		t.Fatalf("after restoring the limit: %v", err)
	}
	m.Close()
}

// TestEstimateMemory: the parts add up, training needs more than
// inference, the parameter count is model.Build's, and absurd sizes are
// estimated without overflowing.
func TestEstimateMemory(t *testing.T) {
	cfg := config.Default()
	if _, err := cfg.Resolve(); err != nil {
		t.Fatal(err)
	}
	m, err := model.Build(cfg, 2, cfg.Model.MaxLen, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got, want := numParams(t, cfg), float64(m.NumParams()); got != want {
		t.Errorf("NumParams = %v, model.Build has %v", got, want)
	}
	for _, v := range []layers.AttentionVariants{{KVHeads: 2}, {KVHeads: 1, Sinks: true, QKNorm: true, Softcap: 3}} {
		c := cfg
		c.Model.Bias, c.Model.AttentionVariants = !cfg.Model.Bias, v // the other bias too
		vm, err := model.Build(c, 2, c.Model.MaxLen, model.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := numParams(t, c), float64(vm.NumParams()); got != want {
			t.Errorf("%+v, bias %v: NumParams = %v, model.Build has %v", v, c.Model.Bias, got, want)
		}
		vm.Close()
	}
	// nanoGPT's options: a tied head, bias-free norms, GPT-2's init (which
	// changes no count), alone and together, as a built model holds them.
	for _, o := range []layers.StackConfig{{TieEmbeddings: true}, {BlockOptions: layers.BlockOptions{BiasFreeNorm: true}}, {TieEmbeddings: true, BlockOptions: layers.BlockOptions{BiasFreeNorm: true}, Init: layers.InitGPT2}} {
		c := cfg
		c.Model.TieEmbeddings, c.Model.BiasFreeNorm, c.Model.Init, c.Model.Bias = o.TieEmbeddings, o.BiasFreeNorm, o.Init, !o.TieEmbeddings
		vm, err := model.Build(c, 2, c.Model.MaxLen, model.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := numParams(t, c), float64(vm.NumParams()); got != want || got >= numParams(t, cfg) {
			t.Errorf("tie %v, bias-free norm %v, bias %v: NumParams = %v, model.Build has %v (untied, biased: %v)", o.TieEmbeddings, o.BiasFreeNorm, c.Model.Bias, got, want, numParams(t, cfg))
		}
		vm.Close()
	}
	inf, _ := config.EstimateMemory(cfg, 8, 12, false)
	tr, _ := config.EstimateMemory(cfg, 8, 12, true)
	if !(tr.Total() > inf.Total()) || tr.Optimizer != numParams(t, cfg)*16 || inf.Grads != 0 || inf.Optimizer != 0 {
		t.Errorf("training %v vs inference %v", tr, inf)
	}
	if sum := tr.Params + tr.Grads + tr.Optimizer + tr.Activations + tr.Attention + tr.Logits; sum != tr.Total() {
		t.Errorf("parts sum to %v, Total %v", sum, tr.Total())
	}
	for _, s := range []string{"training B=8 S=12", "params", "grads", "optimizer", "activations", "attention", "logits"} {
		if !strings.Contains(tr.String(), s) {
			t.Errorf("String %q lacks %q", tr, s)
		}
	}
	huge := cfg
	huge.Model.Dim, huge.Model.Hidden, huge.Model.Heads = math.MaxInt, math.MaxInt, 1
	// The layers count the parameters, and refuse to count a model they
	// could not build: the estimate says which key is at fault.
	var ce *config.Error
	if _, err := config.EstimateMemory(huge, math.MaxInt, math.MaxInt, true); !errors.As(err, &ce) || ce.Field != "model.vocab" {
		t.Errorf("huge: %v, want an error on model.vocab", err)
	}
	if _, err := config.EstimateMemory(cfg, 0, 12, true); err == nil {
		t.Error("batch 0 was estimated")
	}
	run, _ := config.EstimateRun(cfg)
	if want := tr.Total(); !(run.Total() > want) {
		t.Errorf("config.EstimateRun %v is not more than the training model alone", run)
	}
}

func TestParseBytes(t *testing.T) {
	good := map[string]int64{"16GiB": 16 << 30, "512MiB": 512 << 20, "1.5G": 3 << 29, "100000": 100000, "2 kb": 2000, "1e9": 1e9, "8B": 8}
	for s, want := range good {
		if got, err := config.ParseBytes(s); err != nil || got != want {
			t.Errorf("config.ParseBytes(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "lots", "NaN", "Inf", "-1GiB", "0", "0.5", "1e30", "GiB", "16 GiBs"} {
		if got, err := config.ParseBytes(s); err == nil {
			t.Errorf("config.ParseBytes(%q) = %d, want an error", s, got)
		}
	}
	if n := memprobe.Probe().Bytes; n <= 0 {
		t.Errorf("memprobe.Probe().Bytes = %d", n)
	}
	if got := config.FormatBytes(1.5 * (1 << 30)); got != "1.5 GiB" {
		t.Errorf("config.FormatBytes = %q", got)
	}
}

// numParams is the layers' count of c's parameters.
func numParams(t *testing.T, c config.Config) float64 {
	t.Helper()
	n, err := c.NumParams()
	if err != nil {
		t.Fatal(err)
	}
	return float64(n)
}
