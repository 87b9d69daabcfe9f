package train

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
	"github.com/qkv-dev/qkv/train/optim"
)

// stepsByHand trains cfg's decoder for n steps through the public API, as a
// loop of one's own would: model.Build, the optimizer oc, config.ScheduleFor
// and Model.Step on the batches of the run's data stream. It returns the
// weights after the last step.
func stepsByHand(t *testing.T, cfg config.Config, oc optim.Config, n int) []checkpoint.NamedTensor {
	t.Helper()
	task, err := cfg.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	stream, err := data.NewStream(task, cfg.Seed, cfg.TestSize)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Build(cfg, cfg.Batch, task.MaxLen()-1, model.Options{Train: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	opt, err := optim.New(oc, m.Params)
	if err != nil {
		t.Fatal(err)
	}
	sched := config.ScheduleFor(cfg)
	for step := range n {
		examples, err := stream.Draw(cfg.Batch)
		if err != nil {
			t.Fatal(err)
		}
		batch, err := m.BatchFor(task, examples)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Step(batch, opt, model.StepOptions{LR: sched.LR(step), Clip: cfg.ClipNorm, Step: step}); err != nil {
			t.Fatal(err)
		}
	}
	w, err := checkpoint.ParamTensors(m.Params)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// differing returns the names of the tensors of a that differ in any bit
// from b's tensor of the same name; a and b must name the same tensors.
func differing(t *testing.T, a, b []checkpoint.NamedTensor) []string {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%d tensors against %d", len(a), len(b))
	}
	byName := make(map[string][]float64, len(b))
	for _, x := range b {
		byName[x.Name] = x.Data
	}
	var out []string
	for _, x := range a {
		y, ok := byName[x.Name]
		if !ok {
			t.Fatalf("tensor %q is missing", x.Name)
		}
		if len(x.Data) == 0 || !slices.Equal(x.Data, y) {
			out = append(out, x.Name)
		}
	}
	return out
}

// TestOptimizerForMatchesRun: the optimizer a library user builds for a
// run's settings through the public API (config.OptimizerFor, optim.New)
// gives, after 3 steps, the weights train.Run gives, bit for bit, with
// every optimizer setting away from its default. The old failure mode, a
// hand-built optimizer config silently dropping Beta1, Beta2 and Decay
// (every weight differed from Run's after 3 steps), cannot be written any
// more: optim.Config's fields are unexported and New refuses the zero
// Config. The settings it used to fall back to are tried too, to show that
// the comparison would catch them.
func TestOptimizerForMatchesRun(t *testing.T) {
	cfg := tinyConfig()
	cfg.Steps, cfg.Warmup = 10, 2
	cfg.Optimizer, cfg.WeightDecay, cfg.Decay = config.OptimizerAdamW, 0.1, config.DecayMatrices
	cfg.Beta1, cfg.Beta2 = 0.8, 0.95
	dir := t.TempDir()
	if _, err := Run(context.Background(), cfg, Options{Out: dir, StopAfter: 3}); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("Run stopped after 3 steps: %v, want ErrInterrupted", err)
	}
	ck, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Step != 3 {
		t.Fatalf("checkpoint at step %d, want 3", ck.Step)
	}

	oc, err := config.OptimizerFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if oc.Kind() != optim.AdamW || oc.Beta1() != 0.8 || oc.Beta2() != 0.95 || oc.WeightDecay() != 0.1 || oc.Decay() != optim.DecayMatrices || oc.Eps() != optim.DefaultEps {
		t.Errorf("config.OptimizerFor = %v, want every setting of the configuration", oc)
	}
	if d := differing(t, ck.Weights, stepsByHand(t, cfg, oc, 3)); len(d) != 0 {
		t.Errorf("after 3 steps the weights %q differ from train.Run's", d)
	}

	// What the hand-built config trained with: the betas and rule dropped.
	dropped, err := optim.NewAdamW(optim.DefaultBeta1, optim.DefaultBeta2, optim.DefaultEps, cfg.WeightDecay, optim.DecayWeights)
	if err != nil {
		t.Fatal(err)
	}
	if d := differing(t, ck.Weights, stepsByHand(t, cfg, dropped, 3)); len(d) != len(ck.Weights) {
		t.Errorf("with the betas and decay rule dropped only %d of %d weights differ from train.Run's", len(d), len(ck.Weights))
	}
	if _, err := optim.New(optim.Config{}, nil); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("optim.New(optim.Config{}) = %v, want the empty config refused", err)
	}
}

// The defaults of a configuration (betas 0, Decay "") map to PyTorch's
// betas and minGPT's rule, and a configuration the optimizer cannot run is
// an error of config.OptimizerFor naming it.
func TestOptimizerForDefaults(t *testing.T) {
	cfg := config.Default()
	oc, err := config.OptimizerFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if oc.Kind() != optim.AdamW || oc.Beta1() != optim.DefaultBeta1 || oc.Beta2() != optim.DefaultBeta2 || oc.WeightDecay() != cfg.WeightDecay || oc.Decay() != optim.DecayWeights {
		t.Errorf("config.OptimizerFor(config.Default()) = %v", oc)
	}
	cfg.Optimizer = config.OptimizerAdam
	if oc, err = config.OptimizerFor(cfg); err != nil || oc.Kind() != optim.Adam || oc.WeightDecay() != 0 || oc.Decay() != "" {
		t.Errorf("adam: %v, %v", oc, err)
	}
	for _, bad := range []func(*config.Config){
		func(c *config.Config) { c.Optimizer = "sgd" },
		func(c *config.Config) { c.WeightDecay = 0 },
		func(c *config.Config) { c.Decay = "all" },
		func(c *config.Config) { c.Beta2 = 1 },
	} {
		c := config.Default()
		bad(&c)
		if _, err := config.OptimizerFor(c); !errors.Is(err, config.ErrInvalid) {
			t.Errorf("config.OptimizerFor(%+v) = %v, want an error wrapping config.ErrInvalid", c, err)
		}
	}
	cfg = config.Default()
	cfg.Decay = "all"
	var ce *config.Error
	if err := cfg.Validate(); !errors.As(err, &ce) || ce.Field != "decay" {
		t.Errorf("config decay all: error %v, want a *config.Error naming decay", err)
	}
}

// The default decoder decays exactly what the name rule of earlier versions
// (two or more dimensions, no "emb" in the name) decayed, so that training
// runs repeat theirs bit for bit.
func TestAdamWDefaultDecoderDecays(t *testing.T) {
	cfg := config.Default()
	if _, err := cfg.Resolve(); err != nil {
		t.Fatal(err)
	}
	m, err := model.Assemble(cfg, 2, cfg.Model.MaxLen, model.Options{Train: true})
	if err != nil {
		t.Fatal(err)
	}
	oc, err := config.OptimizerFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := optim.New(oc, m.Params)
	if err != nil {
		t.Fatal(err)
	}
	var byName []string
	for _, p := range m.Params {
		if p.Node.Dims() >= 2 && !strings.Contains(p.Name, "emb") {
			byName = append(byName, p.Name)
		}
	}
	want := []string{
		"blocks.0.attn.wq", "blocks.0.attn.wk", "blocks.0.attn.wv", "blocks.0.attn.wo", "blocks.0.ff.w1", "blocks.0.ff.w2",
		"blocks.1.attn.wq", "blocks.1.attn.wk", "blocks.1.attn.wv", "blocks.1.attn.wo", "blocks.1.ff.w1", "blocks.1.ff.w2",
		"head.w",
	}
	got := opt.Decayed()
	if !slices.Equal(got, want) || !slices.Equal(byName, want) {
		t.Errorf("decayed %q, by the old name rule %q, want %q", got, byName, want)
	}
}
