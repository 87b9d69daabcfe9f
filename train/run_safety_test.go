package train

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/qkv-dev/qkv/internal/fsx"
	"github.com/qkv-dev/qkv/internal/graphtest"
	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/config"
)

func TestRunDirLocked(t *testing.T) {
	dir := t.TempDir()
	lock, err := lockRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), tinyConfig(), Options{Out: dir})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Run on a locked directory: %v, want ErrLocked naming it", err)
	}
	if got := graphtest.DirNames(t, dir); !slices.Equal(got, []string{LockFile}) {
		t.Errorf("the refused run wrote %q", got)
	}
	// The lock ends with its holder.
	lock.Unlock()
	cfg := tinyConfig()
	cfg.Steps, cfg.Warmup = 2, 0
	if _, err := Run(context.Background(), cfg, Options{Out: dir}); err != nil {
		t.Fatalf("after the lock was released: %v", err)
	}
}

func TestRunDirFreshRunKeepsOldRun(t *testing.T) {
	cfg := tinyConfig()
	cfg.Steps, cfg.Warmup = 4, 0
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := Run(context.Background(), cfg, Options{Out: dir}); err != nil {
		t.Fatal(err)
	}
	metrics := graphtest.ReadFile(t, filepath.Join(dir, MetricsFile))
	before, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Steps = 2
	_, err = Run(context.Background(), cfg, Options{Out: dir})
	if !errors.Is(err, ErrRunExists) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("a fresh run over a checkpoint: %v, want ErrRunExists naming the directory", err)
	}
	if got := graphtest.ReadFile(t, filepath.Join(dir, MetricsFile)); string(got) != string(metrics) {
		t.Error("the refused run changed metrics.jsonl")
	}
	loadsStep(t, dir, before)

	// Forced, the old run is moved aside whole, not deleted.
	if _, err := Run(context.Background(), cfg, Options{Out: dir, Force: true}); err != nil {
		t.Fatal(err)
	}
	old := dir + ".old-1"
	loadsStep(t, old, before)
	if got := graphtest.ReadFile(t, filepath.Join(old, MetricsFile)); string(got) != string(metrics) {
		t.Error("the moved run's metrics.jsonl changed")
	}
	if ck, err := checkpoint.Load(dir); err != nil || ck.Step != 2 {
		t.Errorf("the forced run's checkpoint: step %v, %v; want step 2", ck, err)
	}
	if _, err := Run(context.Background(), cfg, Options{Out: dir, Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir + ".old-2"); err != nil {
		t.Errorf("a second forced run did not move the first aside to .old-2: %v", err)
	}
}

func TestRunDirResumeErrors(t *testing.T) {
	cfg := tinyConfig()
	cfg.Steps = 10
	_, err := Run(context.Background(), cfg, Options{Out: t.TempDir(), Resume: true})
	if !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("resuming an empty directory: %v, want checkpoint.ErrNotFound", err)
	}

	// The state inside state.json must be at the checkpoint's step.
	dir := t.TempDir()
	if _, err := Run(context.Background(), cfg, Options{Out: dir, StopAfter: 4}); !errors.Is(err, ErrInterrupted) {
		t.Fatal(err)
	}
	ck, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ck.State = []byte(strings.Replace(string(ck.State), `"step":4`, `"step":3`, 1))
	if err := checkpoint.Save(dir, ck); err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), cfg, Options{Out: dir, Resume: true})
	graphtest.WantErr(t, err, checkpoint.StateFile, "the run state is at step 3, the checkpoint at step 4")
}

// TestRunSaveFailsOnFullDisk: when a save runs out of space, training stops
// with an error naming the step and the checkpoint still complete, which
// then resumes as if nothing had happened.
func TestRunSaveFailsOnFullDisk(t *testing.T) {
	cfg := tinyConfig()
	cfg.Steps, cfg.CheckpointEvery = 12, 4
	dir, straight := t.TempDir(), t.TempDir()
	if _, err := Run(context.Background(), cfg, Options{Out: straight}); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), cfg, Options{Out: dir, StopAfter: 4}); !errors.Is(err, ErrInterrupted) {
		t.Fatal(err)
	}
	// Room for rewriting metrics.jsonl on resume, none for the checkpoint.
	fault := fsx.NoFaults()
	fault.Space = int64(len(graphtest.ReadFile(t, filepath.Join(dir, MetricsFile))))
	fsx.Current = fault
	defer func() { fsx.Current = fsx.OS{} }()
	_, err := Run(context.Background(), cfg, Options{Out: dir, Resume: true})
	fsx.Current = fsx.OS{}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("got %v, want ENOSPC", err)
	}
	graphtest.WantErr(t, err, "saving step 8", "the last complete checkpoint, step 4, is in "+dir)
	if _, err := Run(context.Background(), cfg, Options{Out: dir, Resume: true}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{checkpoint.ModelFile, checkpoint.OptimizerFile} {
		if string(graphtest.ReadFile(t, checkpoint.File(dir, name))) != string(graphtest.ReadFile(t, checkpoint.File(straight, name))) {
			t.Errorf("%s differs from the run that never failed", name)
		}
	}
}

// TestRunDirTooLarge: a run whose two models together exceed the memory
// limit is refused before anything is built or written.
func TestRunDirTooLarge(t *testing.T) {
	cfg := tinyConfig()
	resolved := cfg
	if _, err := resolved.Resolve(); err != nil {
		t.Fatal(err)
	}
	est, err := config.EstimateRun(resolved)
	if err != nil {
		t.Fatal(err)
	}
	// Room for the training model alone, not for both.
	train, err := config.EstimateMemory(resolved, cfg.Batch, resolved.Model.MaxLen, true)
	if err != nil {
		t.Fatal(err)
	}
	prev := config.SetMemoryLimit(int64((train.Total() + est.Total()) / 2))
	defer config.SetMemoryLimit(prev)
	dir := filepath.Join(t.TempDir(), "run")
	_, err = Run(context.Background(), cfg, Options{Out: dir})
	var memErr *config.MemoryError
	if !errors.As(err, &memErr) {
		t.Fatalf("got %v, want a *config.MemoryError", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused run created %s (%v)", dir, err)
	}
}

// loadsStep fails unless dir holds a valid checkpoint equal to ck, bit for
// bit.
func loadsStep(t *testing.T, dir string, ck *checkpoint.Checkpoint) {
	t.Helper()
	got, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatalf("the checkpoint no longer loads: %v", err)
	}
	same := func(a, b []checkpoint.NamedTensor) bool {
		return slices.EqualFunc(a, b, func(x, y checkpoint.NamedTensor) bool {
			return x.Name == y.Name && slices.Equal(x.Shape, y.Shape) && x.DType == y.DType &&
				slices.EqualFunc(x.Data, y.Data, func(p, q float64) bool { return math.Float64bits(p) == math.Float64bits(q) })
		})
	}
	if got.Step != ck.Step || !same(got.Weights, ck.Weights) || !same(got.Optimizer, ck.Optimizer) {
		t.Errorf("%s holds step %d, not the checkpoint of step %d it held", dir, got.Step, ck.Step)
	}
}

// TestRunDirOutputsWithoutCheckpoint: a run killed before its first
// checkpoint leaves its metrics; a fresh run over them is refused and
// changes nothing, and Force moves them aside.
func TestRunDirOutputsWithoutCheckpoint(t *testing.T) {
	cfg := tinyConfig()
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	metrics := []byte(`{"step":1,"loss":2.5}` + "\n")
	if err := os.WriteFile(filepath.Join(dir, MetricsFile), metrics, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), cfg, Options{Out: dir})
	if !errors.Is(err, ErrRunExists) {
		t.Fatalf("a fresh run over metrics without a checkpoint: %v, want ErrRunExists", err)
	}
	graphtest.WantErr(t, err, MetricsFile, "saved no checkpoint")
	if got := graphtest.ReadFile(t, filepath.Join(dir, MetricsFile)); string(got) != string(metrics) {
		t.Errorf("the refused run changed %s: %q", MetricsFile, got)
	}
	if _, err := Run(context.Background(), cfg, Options{Out: dir, Force: true}); err != nil {
		t.Fatal(err)
	}
	if got := graphtest.ReadFile(t, filepath.Join(dir+".old-1", MetricsFile)); string(got) != string(metrics) {
		t.Errorf("--force did not move the earlier metrics aside whole: %q", got)
	}
}
