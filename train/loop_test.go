package train

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/infer"
	"github.com/qkv-dev/qkv/train/optim"
)

// tinyConfig is a model and task small enough to train in a few seconds.
func tinyConfig() config.Config {
	cfg := config.Default()
	cfg.Task = config.TaskSpec{Name: "copy", Params: data.TaskConfig{MinLength: 2, MaxLength: 4, Alphabet: 4}}
	cfg.Model = layers.StackConfig{Dim: 16, Heads: 2, Layers: 1, Hidden: 32, BlockOptions: layers.BlockOptions{Activation: layers.ActivationGELU, Bias: true}}
	cfg.Batch = 16
	cfg.Steps = 150
	cfg.Warmup = 5
	cfg.EvalEvery = 50
	cfg.TestSize = 16
	cfg.TargetExact = 0
	cfg.CheckpointEvery = 20
	return cfg
}

func readMetrics(t *testing.T, dir string) []Metric {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ms []Metric
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m Metric
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s: %v", MetricsFile, err)
		}
		ms = append(ms, m)
	}
	return ms
}

func meanLoss(ms []Metric) float64 {
	var s float64
	for _, m := range ms {
		s += m.Loss
	}
	return s / float64(len(ms))
}

func TestRunDrivesLossDown(t *testing.T) {
	dir := t.TempDir()
	var curves []Metric
	var curvesPath string
	record := func(path string, sum Summary, history []Metric) error {
		curvesPath, curves = path, history
		return fakeCurves(path, sum, history)
	}
	sum, err := Run(context.Background(), tinyConfig(), Options{Out: dir, Curves: record})
	if err != nil {
		t.Fatal(err)
	}
	ms := readMetrics(t, dir)
	if len(ms) != 150 || sum.Steps != 150 {
		t.Fatalf("got %d metric lines and %d steps, want 150", len(ms), sum.Steps)
	}
	if curvesPath != filepath.Join(dir, CurvesFile) || len(curves) != 150 || curves[149].Loss != ms[149].Loss {
		t.Errorf("Options.Curves was given %s and %d metrics, want %s and 150", curvesPath, len(curves), filepath.Join(dir, CurvesFile))
	}
	first, last := meanLoss(ms[:5]), meanLoss(ms[len(ms)-5:])
	if !(last < first/2) {
		t.Errorf("loss did not halve: first steps %.3f, last steps %.3f", first, last)
	}
	for _, path := range []string{checkpoint.File(dir, checkpoint.ModelFile), checkpoint.File(dir, checkpoint.OptimizerFile), checkpoint.File(dir, checkpoint.ConfigFile),
		checkpoint.File(dir, checkpoint.StateFile), filepath.Join(dir, SummaryFile), filepath.Join(dir, CurvesFile)} {
		if _, err := os.Stat(path); err != nil {
			t.Errorf("run directory lacks %s: %v", path, err)
		}
	}
	var got Summary
	b, err := os.ReadFile(filepath.Join(dir, SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Task.Name != "copy" || got.Steps != 150 || got.Params <= 0 || got.WallSeconds <= 0 {
		t.Errorf("summary.json = %+v", got)
	}
}

// TestSameSeedSameLosses: two runs with the same seed have the same losses
// and gradient norms bit for bit, on one goroutine or on four: the kernels
// split their work over the cores without changing any sum's order.
func TestSameSeedSameLosses(t *testing.T) {
	cfg := tinyConfig()
	cfg.Model = config.Default().Model // large enough that every kernel splits its work
	cfg.Model.Dropout, cfg.Model.AttnDropout = 0.1, 0.1
	cfg.Batch, cfg.Steps = 64, 10
	a, b := t.TempDir(), t.TempDir()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for i, dir := range []string{a, b} {
		runtime.GOMAXPROCS(1 + 3*i)
		if _, err := Run(context.Background(), cfg, Options{Out: dir}); err != nil {
			t.Fatal(err)
		}
	}
	ma, mb := readMetrics(t, a), readMetrics(t, b)
	if len(ma) != cfg.Steps || len(mb) != cfg.Steps {
		t.Fatalf("%d and %d metric lines, want %d", len(ma), len(mb), cfg.Steps)
	}
	for i := range ma {
		if ma[i].Loss != mb[i].Loss || ma[i].GradNorm != mb[i].GradNorm {
			t.Fatalf("step %d: loss %v vs %v, gradient norm %v vs %v with the same seed on 1 and 4 goroutines",
				ma[i].Step, ma[i].Loss, mb[i].Loss, ma[i].GradNorm, mb[i].GradNorm)
		}
	}
}

// TestResumeBitForBit trains N steps straight, and N/2 steps, a checkpoint,
// and N/2 more after resuming: weights and losses must be identical.
func TestResumeBitForBit(t *testing.T) {
	for _, dtype := range []string{"float32", "float64"} {
		t.Run(dtype, func(t *testing.T) {
			cfg := tinyConfig()
			cfg.DType = config.DType(dtype)
			cfg.Steps = 30
			cfg.EvalEvery = 10
			cfg.Model.Dropout = 0.1 // dropout masks must resume too
			straight, split := t.TempDir(), t.TempDir()
			if _, err := Run(context.Background(), cfg, Options{Out: straight}); err != nil {
				t.Fatal(err)
			}
			if _, err := Run(context.Background(), cfg, Options{Out: split, StopAfter: 15}); !errors.Is(err, ErrInterrupted) {
				t.Fatalf("stopped run: got %v, want ErrInterrupted", err)
			}
			// A run killed after its checkpoint wrote metrics past it, the
			// last one cut short; resuming drops them.
			f, err := os.OpenFile(filepath.Join(split, MetricsFile), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString(`{"step":16,"loss":99}` + "\n" + `{"step":17,"lo`); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if _, err := Run(context.Background(), cfg, Options{Out: split, Resume: true}); err != nil {
				t.Fatal(err)
			}
			sameRun(t, straight, split)
		})
	}
}

func TestNonFiniteLossStopsWithStep(t *testing.T) {
	cfg := tinyConfig()
	cfg.LR, cfg.MinLR, cfg.Warmup = 1e30, 1e30, 0
	cfg.ClipNorm = 0
	cfg.CheckpointEvery = 1
	dir := t.TempDir()
	_, runErr := Run(context.Background(), cfg, Options{Out: dir})
	if runErr == nil || !strings.Contains(runErr.Error(), "non-finite") || !strings.Contains(runErr.Error(), "step ") {
		t.Fatalf("got %v, want a non-finite error naming the step", runErr)
	}
	ck, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatalf("the last good checkpoint does not load: %v", err)
	}
	if want := fmt.Sprintf("the last complete checkpoint, step %d, is in %s", ck.Step, dir); !strings.Contains(runErr.Error(), want) {
		t.Errorf("got %v, want it to say %q", runErr, want)
	}
	// Before the first checkpoint there is none to name.
	cfg.CheckpointEvery = 1000
	dir = t.TempDir()
	_, err = Run(context.Background(), cfg, Options{Out: dir})
	if err == nil || !strings.Contains(err.Error(), "no checkpoint was saved in "+dir) || strings.Contains(err.Error(), "last complete") {
		t.Errorf("got %v, want it to say no checkpoint was saved", err)
	}
}

func TestInterruptSavesCheckpoint(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	if _, err := Run(ctx, tinyConfig(), Options{Out: dir}); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("got %v, want ErrInterrupted", err)
	}
	ck, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Step != 0 {
		t.Errorf("checkpoint at step %d, want 0", ck.Step)
	}
}

func TestConfigErrors(t *testing.T) {
	cases := map[string]func(*config.Config){
		"batch must be positive": func(c *config.Config) { c.Batch = 0 },
		"dtype":                  func(c *config.Config) { c.DType = "int8" },
		"unknown task":           func(c *config.Config) { c.Task.Name = "juggle" },
		"min_lr":                 func(c *config.Config) { c.MinLR = 1 },
		"target_exact":           func(c *config.Config) { c.TargetExact = 2 },
		"not divisible":          func(c *config.Config) { c.Model.Heads = 5 },
	}
	for want, mutate := range cases {
		cfg := tinyConfig()
		mutate(&cfg)
		_, err := Run(context.Background(), cfg, Options{Out: t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}

// TestPlottedHistoryIsEveryEvaluation: the curves are drawn from the
// trainer's history, which must hold each evaluation as it was, the same as
// metrics.jsonl, not the last one repeated.
func TestPlottedHistoryIsEveryEvaluation(t *testing.T) {
	cfg := tinyConfig()
	cfg.Steps, cfg.EvalEvery = 60, 10
	dir := t.TempDir()
	tr, err := newTrainer(cfg, Options{Out: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.close()
	if _, err := tr.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var fromFile, inMemory []infer.EvalResult
	for _, m := range readMetrics(t, dir) {
		if m.Eval != nil {
			fromFile = append(fromFile, *m.Eval)
		}
	}
	for _, m := range tr.history {
		if m.Eval != nil {
			inMemory = append(inMemory, *m.Eval)
		}
	}
	if len(fromFile) != 6 || len(inMemory) != len(fromFile) {
		t.Fatalf("%d evaluations in metrics.jsonl, %d in history, want 6", len(fromFile), len(inMemory))
	}
	distinct := map[infer.EvalResult]bool{}
	for i := range fromFile {
		if fromFile[i] != inMemory[i] {
			t.Errorf("evaluation %d: %+v in metrics.jsonl, %+v in the plotted history", i, fromFile[i], inMemory[i])
		}
		distinct[fromFile[i]] = true
	}
	if len(distinct) < 2 {
		t.Errorf("every evaluation is %+v: the model did not change, the test proves nothing", fromFile[0])
	}
}

// TestProgressShowsStoppingRule: progress says the run stops at its target
// or at cfg.Steps, and a bar of a run that reached its target early ends at
// the step it stopped at, not at cfg.Steps.
func TestProgressShowsStoppingRule(t *testing.T) {
	cfg := tinyConfig()
	cfg.Task = config.TaskSpec{Name: "sort", Params: data.TaskConfig{Length: 3, Alphabet: 3}}
	cfg.Steps, cfg.Warmup, cfg.EvalEvery, cfg.TestSize, cfg.LR, cfg.TargetExact = 400, 2, 10, 8, 0.01, 0.5
	var log bytes.Buffer
	sum, err := Run(context.Background(), cfg, Options{Out: t.TempDir(), Progress: &log, Bar: true})
	if err != nil {
		t.Fatal(err)
	}
	if !sum.StoppedEarly || sum.Steps >= cfg.Steps {
		t.Fatalf("the run stopped at step %d (early: %v); the test needs one that reaches its target", sum.Steps, sum.StoppedEarly)
	}
	out := log.String()
	if w := "until held-out exact match reaches 0.500 or step 400"; !strings.Contains(out, w) {
		t.Errorf("progress lacks %q:\n%s", w, out)
	}
	if bad := fmt.Sprintf("(%d/%d", cfg.Steps, cfg.Steps); strings.Contains(out, bad) {
		t.Errorf("the bar claims %s) though the run stopped at step %d:\n%q", bad, sum.Steps, out)
	}
	if w := fmt.Sprintf("(%d/%d", sum.Steps, sum.Steps); !strings.Contains(out, w) {
		t.Errorf("the bar does not end at the step the run stopped at, %s):\n%q", w, out)
	}
}

// TestResumeRefusesAnotherRun: Run with Resume refuses a configuration that
// trains something other than the checkpoint's (here another learning
// rate, which fits the same tensors), naming the field, and leaves the
// checkpoint as it was; a longer --steps continues.
func TestResumeRefusesAnotherRun(t *testing.T) {
	cfg := tinyConfig()
	cfg.Steps, cfg.EvalEvery, cfg.Warmup = 4, 2, 0
	dir := t.TempDir()
	if _, err := Run(context.Background(), cfg, Options{Out: dir}); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(checkpoint.File(dir, checkpoint.ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	other := cfg
	other.LR *= 2
	other.Steps = 6
	_, err = Run(context.Background(), other, Options{Out: dir, Resume: true})
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Field != "lr" || !strings.Contains(err.Error(), dir) {
		t.Fatalf("resume with another lr: %v, want a *config.Error on lr naming %s", err, dir)
	}
	after, err := os.ReadFile(checkpoint.File(dir, checkpoint.ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("the refused resume changed the checkpoint")
	}
	longer := cfg
	longer.Steps = 6
	if sum, err := Run(context.Background(), longer, Options{Out: dir, Resume: true}); err != nil || sum.Steps != 6 {
		t.Errorf("resume to 6 steps: %v, %+v", err, sum)
	}
}

// TestBetasReachTheOptimizer: Beta2 0.999 spelled out trains bit for bit as
// the default (0), and another Beta2 trains differently: the loop passes
// the configuration's betas to Adam. (The losses are compared, not the
// checkpoint files, whose metadata holds config.json.)
func TestBetasReachTheOptimizer(t *testing.T) {
	losses := func(beta2 float64) []float64 {
		cfg := tinyConfig()
		cfg.Steps, cfg.EvalEvery, cfg.Warmup, cfg.Beta2 = 6, 1, 0, beta2
		dir := t.TempDir()
		if _, err := Run(context.Background(), cfg, Options{Out: dir}); err != nil {
			t.Fatal(err)
		}
		var out []float64
		for _, m := range readMetrics(t, dir) {
			out = append(out, m.Loss)
		}
		return out
	}
	def, spelled, other := losses(0), losses(optim.DefaultBeta2), losses(0.9)
	if !slices.Equal(def, spelled) {
		t.Errorf("Beta2 0.999 trains differently from the default: losses %v and %v", spelled, def)
	}
	if slices.Equal(def, other) {
		t.Errorf("Beta2 0.9 trains exactly as the default (losses %v): the betas do not reach the optimizer", def)
	}
}

// sameRun checks that the run in split, stopped and resumed, ended with the
// weights and optimizer state, bytes for bytes, and the losses and held-out
// scores of the run in straight, which never stopped.
func sameRun(t *testing.T, straight, split string) {
	t.Helper()
	for _, name := range []string{checkpoint.ModelFile, checkpoint.OptimizerFile} {
		x, err := os.ReadFile(checkpoint.File(straight, name))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(checkpoint.File(split, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between the straight and the resumed run", name)
		}
	}
	ms, mr := readMetrics(t, straight), readMetrics(t, split)
	if len(ms) != len(mr) {
		t.Fatalf("%d metric lines straight, %d resumed", len(ms), len(mr))
	}
	for i := range ms {
		if ms[i].Loss != mr[i].Loss || (ms[i].Eval == nil) != (mr[i].Eval == nil) || ms[i].Eval != nil && *ms[i].Eval != *mr[i].Eval {
			t.Errorf("step %d: loss %v and eval %+v straight, %v and %+v resumed", ms[i].Step, ms[i].Loss, ms[i].Eval, mr[i].Loss, mr[i].Eval)
		}
	}
}
