package infer_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/train"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/infer"
	"github.com/qkv-dev/qkv/train/model"
)

// TestDependencies: a program that only runs models pulls in neither the
// training loop nor plotting nor the progress bar.
func TestDependencies(t *testing.T) {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(gobin, "list", "-deps", "github.com/qkv-dev/qkv/train/infer").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps gave %d packages: %q", len(deps), deps)
	}
	for _, d := range deps {
		for _, banned := range []string{"gonum.org/v1/plot", "github.com/schollz/progressbar", "github.com/qkv-dev/qkv/internal/plot"} {
			if strings.HasPrefix(d, banned) {
				t.Errorf("infer depends on %s", d)
			}
		}
		if d == "github.com/qkv-dev/qkv/train" {
			t.Errorf("infer depends on the training loop")
		}
	}
}

// tiny returns a resolved configuration small enough to train in a moment.
func tiny(t *testing.T) (config.Config, data.Task) {
	t.Helper()
	cfg := config.Default()
	cfg.Task = config.TaskSpec{Name: "sort", Params: data.TaskConfig{Length: 3, Alphabet: 3}}
	cfg.Model.Dim, cfg.Model.Heads, cfg.Model.Hidden, cfg.Model.Layers = 16, 2, 32, 1
	cfg.Batch, cfg.Steps, cfg.Warmup, cfg.EvalEvery, cfg.TestSize, cfg.TargetExact = 16, 30, 3, 10, 8, 0
	task, err := cfg.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	return cfg, task
}

// TestForwardOnly: an inference model's machine gives the same logits run
// after run and leaves no gradient on any parameter.
func TestForwardOnly(t *testing.T) {
	cfg, task := tiny(t)
	m, err := model.Build(cfg, 2, task.MaxLen()-1, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ids := make([]int, m.B*m.S)
	for i := range ids {
		ids[i] = 2 + i%3
	}
	var first []float64
	for run := 0; run < 3; run++ {
		if err := m.SetBatch(model.Batch{Batch: data.Batch{B: m.B, S: m.S, Inputs: ids, Lengths: []int{m.S, 2}}}); err != nil {
			t.Fatal(err)
		}
		err := m.Run(func() error {
			logits := m.Logits.Value().Data()
			var vals []float64
			switch v := logits.(type) {
			case []float32:
				for _, x := range v {
					vals = append(vals, float64(x))
				}
			case []float64:
				vals = v
			}
			if first == nil {
				first = append([]float64(nil), vals...)
				return nil
			}
			for i := range vals {
				if vals[i] != first[i] {
					t.Fatalf("run %d: logit %d is %v, was %v", run, i, vals[i], first[i])
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range m.Params {
		if g, err := p.Node.Grad(); err == nil && g != nil {
			t.Errorf("%s has a gradient in an inference model", p.Name)
		}
	}
}

// TestLoadRunsTrainedModel: a checkpoint written by training loads into an
// inference model whose held-out score matches the one training reported.
func TestLoadRunsTrainedModel(t *testing.T) {
	cfg, _ := tiny(t)
	dir := t.TempDir()
	sum, err := train.Run(context.Background(), cfg, train.Options{Out: dir})
	if err != nil {
		t.Fatal(err)
	}
	m, loaded, task, err := model.Load(dir, config.MaxEvalBatch, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	stream, err := data.NewStream(task, loaded.Seed, loaded.TestSize)
	if err != nil {
		t.Fatal(err)
	}
	res, err := infer.Evaluate(m, task, stream.Test())
	if err != nil {
		t.Fatal(err)
	}
	if res.ExactMatch != sum.ExactMatch || res.TokenAccuracy != sum.TokenAccuracy {
		t.Errorf("loaded model scores %+v, training reported exact %v token %v", res, sum.ExactMatch, sum.TokenAccuracy)
	}
}

// TestLoadEitherArchitecture: Load loads a checkpoint of either
// architecture into the one model type, which decodes what the trained
// model decodes (the held-out score training reported), with a source of
// an encoder-decoder's own.
func TestLoadEitherArchitecture(t *testing.T) {
	dec, _ := tiny(t)
	encdec := dec
	encdec.Arch = config.ArchEncDec
	for _, cfg := range []config.Config{dec, encdec} {
		cfg.Steps, cfg.Warmup, cfg.EvalEvery = 4, 1, 4
		dir := t.TempDir()
		sum, err := train.Run(context.Background(), cfg, train.Options{Out: dir})
		if err != nil {
			t.Fatalf("%s: %v", cfg.Arch, err)
		}
		m, loaded, task, err := model.Load(dir, 3, model.LoadOptions{})
		if err != nil {
			t.Fatalf("Load of a %s: %v", cfg.Arch, err)
		}
		defer m.Close()
		wantSource := 0
		if cfg.Arch == config.ArchEncDec {
			wantSource = loaded.Model.MaxLen
		}
		if m.Arch != cfg.Arch || loaded.Arch != cfg.Arch || m.SourceLen != wantSource || m.S != task.MaxLen()-1 {
			t.Errorf("Load of a %s: arch %s (config %s), source %d, positions %d", cfg.Arch, m.Arch, loaded.Arch, m.SourceLen, m.S)
		}
		stream, err := data.NewStream(task, loaded.Seed, loaded.TestSize)
		if err != nil {
			t.Fatal(err)
		}
		res, err := infer.Evaluate(m, task, stream.Test())
		if err != nil {
			t.Fatal(err)
		}
		if res.ExactMatch != sum.ExactMatch || res.TokenAccuracy != sum.TokenAccuracy {
			t.Errorf("%s: loaded model scores %+v, training reported exact %v token %v", cfg.Arch, res, sum.ExactMatch, sum.TokenAccuracy)
		}
	}
}
