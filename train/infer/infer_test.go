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
	m, err := infer.Build(cfg, 2, task.MaxLen()-1)
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
		if err := m.SetBatch(ids, []int{m.S, 2}); err != nil {
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
	m, loaded, task, err := infer.Load(dir, config.MaxEvalBatch)
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

// TestLoadNamesArchitecture: each loader refuses the other architecture's
// checkpoint with an error that names the loader to use.
func TestLoadNamesArchitecture(t *testing.T) {
	dec, _ := tiny(t)
	encdec := dec
	encdec.Arch = config.ArchEncDec
	dirs := map[config.Arch]string{}
	for _, cfg := range []config.Config{dec, encdec} {
		cfg.Steps, cfg.Warmup, cfg.EvalEvery = 2, 1, 2
		dir := t.TempDir()
		if _, err := train.Run(context.Background(), cfg, train.Options{Out: dir}); err != nil {
			t.Fatalf("%s: %v", cfg.Arch, err)
		}
		dirs[cfg.Arch] = dir
	}
	if m, _, _, err := infer.Load(dirs[config.ArchEncDec], 1); err == nil || !strings.Contains(err.Error(), "an encoder-decoder: load it with LoadEncDec") {
		t.Errorf("Load of an encoder-decoder: got %v", err)
		if err == nil {
			m.Close()
		}
	}
	if m, _, _, err := infer.LoadEncDec(dirs[dec.Arch], 1, infer.LoadOptions{}); err == nil || !strings.Contains(err.Error(), `a "decoder" model, not an encoder-decoder`) {
		t.Errorf("LoadEncDec of a decoder: got %v", err)
		if err == nil {
			m.Close()
		}
	}
	// and each loads with its own loader.
	if m, _, _, err := infer.Load(dirs[dec.Arch], 1); err != nil {
		t.Errorf("Load of a decoder: %v", err)
	} else {
		m.Close()
	}
	if m, _, _, err := infer.LoadEncDec(dirs[config.ArchEncDec], 1, infer.LoadOptions{}); err != nil {
		t.Errorf("LoadEncDec of an encoder-decoder: %v", err)
	} else {
		m.Close()
	}
}
