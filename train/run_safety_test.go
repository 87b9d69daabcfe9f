package train

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
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
	if got := dirNames(t, dir); !slices.Equal(got, []string{LockFile}) {
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
	metrics := readFile(t, filepath.Join(dir, MetricsFile))
	before, err := LoadCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Steps = 2
	_, err = Run(context.Background(), cfg, Options{Out: dir})
	if !errors.Is(err, ErrRunExists) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("a fresh run over a checkpoint: %v, want ErrRunExists naming the directory", err)
	}
	if got := readFile(t, filepath.Join(dir, MetricsFile)); string(got) != string(metrics) {
		t.Error("the refused run changed metrics.jsonl")
	}
	loadsStep(t, dir, before)

	// Forced, the old run is moved aside whole, not deleted.
	if _, err := Run(context.Background(), cfg, Options{Out: dir, Force: true}); err != nil {
		t.Fatal(err)
	}
	old := dir + ".old-1"
	loadsStep(t, old, before)
	if got := readFile(t, filepath.Join(old, MetricsFile)); string(got) != string(metrics) {
		t.Error("the moved run's metrics.jsonl changed")
	}
	if ck, err := LoadCheckpoint(dir); err != nil || ck.Step != 2 {
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
	if !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("resuming an empty directory: %v, want ErrNoCheckpoint", err)
	}

	// The state inside state.json must be at the checkpoint's step.
	dir := t.TempDir()
	if _, err := Run(context.Background(), cfg, Options{Out: dir, StopAfter: 4}); !errors.Is(err, ErrInterrupted) {
		t.Fatal(err)
	}
	forge(t, dir, StateFile, func(b []byte) []byte {
		return []byte(strings.Replace(string(b), `"state": {"step":4`, `"state": {"step":3`, 1))
	})
	_, err = Run(context.Background(), cfg, Options{Out: dir, Resume: true})
	wantErr(t, err, StateFile, "the run state is at step 3, the checkpoint at step 4")
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
	fault := noFaults()
	fault.space = int64(len(readFile(t, filepath.Join(dir, MetricsFile))))
	withFS(t, fault)
	_, err := Run(context.Background(), cfg, Options{Out: dir, Resume: true})
	fsys = osFS{}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("got %v, want ENOSPC", err)
	}
	wantErr(t, err, "saving step 8", "the last complete checkpoint, step 4, is in "+dir)
	if _, err := Run(context.Background(), cfg, Options{Out: dir, Resume: true}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{ModelFile, OptimizerFile} {
		if string(readFile(t, ckPath(t, dir, name))) != string(readFile(t, ckPath(t, straight, name))) {
			t.Errorf("%s differs from the run that never failed", name)
		}
	}
}

// TestLoadWhileSaving loads a run directory over and over while another
// goroutine saves checkpoint after checkpoint into it, as `qkv eval` may
// while `qkv train` runs: every load returns one complete checkpoint, never
// a mix of two or an error.
func TestLoadWhileSaving(t *testing.T) {
	dir, first := saveTest(t, 1)
	done := make(chan error, 1)
	go func() {
		for step := 2; step <= 30; step++ {
			if err := SaveCheckpoint(dir, nextCheckpoint(t, first, step)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	loads := 0
	for finished := false; !finished; loads++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished = true
		default:
		}
		got, err := LoadCheckpoint(dir)
		if err != nil {
			t.Fatalf("load %d while saving: %v", loads, err)
		}
		want := first
		if got.Step != first.Step {
			want = nextCheckpoint(t, first, got.Step)
		}
		if string(got.State) != string(want.State) || !equalTensors(got.Weights, want.Weights) || !equalTensors(got.Optimizer, want.Optimizer) {
			t.Fatalf("load %d while saving: step %d mixes checkpoints", loads, got.Step)
		}
	}
	t.Logf("%d consistent loads during 29 saves", loads)
}

// TestRunDirTooLarge: a run whose two models together exceed the memory
// limit is refused before anything is built or written.
func TestRunDirTooLarge(t *testing.T) {
	cfg := tinyConfig()
	resolved := cfg
	if _, err := resolved.Resolve(); err != nil {
		t.Fatal(err)
	}
	est, err := EstimateRun(resolved)
	if err != nil {
		t.Fatal(err)
	}
	// Room for the training model alone, not for both.
	train, err := EstimateMemory(resolved, cfg.Batch, resolved.Model.MaxLen, true)
	if err != nil {
		t.Fatal(err)
	}
	prev := SetMemoryLimit(int64((train.Total() + est.Total()) / 2))
	defer SetMemoryLimit(prev)
	dir := filepath.Join(t.TempDir(), "run")
	_, err = Run(context.Background(), cfg, Options{Out: dir})
	var memErr *MemoryError
	if !errors.As(err, &memErr) {
		t.Fatalf("got %v, want a *MemoryError", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused run created %s (%v)", dir, err)
	}
}
