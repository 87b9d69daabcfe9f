package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/config"
)

// tinyTrain is a run of `qkv train` that takes a moment, into out.
func tinyTrain(out string, extra ...string) []string {
	return append([]string{"train", "--task", "sort", "--length", "3", "--dim", "16", "--heads", "2", "--hidden", "32",
		"--layers", "1", "--batch", "8", "--steps", "2", "--warmup", "0", "--eval-every", "2", "--test-size", "8", "--out", out}, extra...)
}

// TestRunDirOrphanCLI: `qkv train --out DIR` into a directory whose
// checkpoint.json is gone but whose checkpoint folder is intact exits 2,
// pointing to --resume and --force, and deletes nothing; --resume
// continues from the folder.
func TestRunDirOrphanCLI(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if code, _, stderr := qkv(tinyTrain(dir)...); code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	model := checkpoint.File(dir, checkpoint.ModelFile)
	want, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, checkpoint.ManifestFile)); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := qkv(tinyTrain(dir)...)
	if code != 2 || !strings.Contains(stderr, "--resume "+dir) || !strings.Contains(stderr, "--force") {
		t.Errorf("a fresh run over an orphaned checkpoint folder: exit %d, stderr %q", code, stderr)
	}
	if got, err := os.ReadFile(model); err != nil || string(got) != string(want) {
		t.Fatalf("the refused run changed or removed %s: %v", model, err)
	}
	if code, _, stderr := qkv("train", "--resume", dir, "--steps", "4"); code != 0 {
		t.Errorf("--resume from the orphaned folder: exit %d: %s", code, stderr)
	}
	if ck, err := checkpoint.Load(dir); err != nil || ck.Step != 4 {
		t.Errorf("after the resume: %v, want step 4", err)
	}
}

// TestRunDirResumeTooLarge: --resume of a checkpoint whose config.json
// asks for 1000 layers, more than --max-memory, exits 2 naming the sizes
// before the weights are read and the model built: the refusal allocates a
// few megabytes at most, where building the model allocates half a gigabyte
// (and takes minutes).
func TestRunDirResumeTooLarge(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if code, _, stderr := qkv(tinyTrain(dir)...); code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	ck, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Unmarshal(ck.Config)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Model.Layers = 1000
	if ck.Config, err = config.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	// And weights of the size such a model has: 4M values, 16 MB.
	ck.Weights = append(ck.Weights, checkpoint.NamedTensor{Name: "pad", Shape: []int{4 << 20}, DType: tensor.Float32, Data: make([]float64, 4<<20)})
	if err := checkpoint.Save(dir, ck); err != nil {
		t.Fatal(err)
	}
	ck = nil
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	code, _, stderr := qkv("train", "--resume", dir, "--max-memory", "32MiB")
	runtime.ReadMemStats(&after)
	if code != 2 || !strings.Contains(stderr, "--max-memory:") || !strings.Contains(stderr, "layers 1000") {
		t.Errorf("--resume of a 1000-layer checkpoint: exit %d, stderr %q", code, stderr)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 16<<20 {
		t.Errorf("the refusal allocated %d bytes", n)
	}
}
