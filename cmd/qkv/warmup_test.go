package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/train/config"
)

// tinyRun is a small, fast training configuration without --steps,
// --warmup or --out.
var tinyRun = []string{"train", "--task", "sort", "--length", "3", "--dim", "16", "--heads", "2", "--hidden", "32",
	"--layers", "1", "--batch", "8", "--eval-every", "1000", "--test-size", "8", "--target-exact", "0"}

func TestDefaultWarmup(t *testing.T) {
	for _, c := range []struct{ steps, want int }{
		{2000, 50}, {500, 50}, {499, 49}, {100, 10}, {30, 3}, {9, 0}, {8, 0}, {1, 0}, {0, 0}, {-5, 0},
	} {
		if got := defaultWarmup(50, c.steps); got != c.want {
			t.Errorf("defaultWarmup(50, %d) = %d, want %d", c.steps, got, c.want)
		}
	}
}

// TestWarmupAdaptsToSteps: without --warmup a short run trains, with a
// warm-up of a tenth of its steps; an explicit --warmup longer than the run
// is refused naming both flags; a resumed run keeps its checkpoint's warm-up
// even when --steps extends it.
func TestWarmupAdaptsToSteps(t *testing.T) {
	root := t.TempDir()
	train8 := func(extra ...string) []string {
		return append(append(append([]string(nil), tinyRun...), "--steps", "8"), extra...)
	}

	code, _, stderr := qkv(train8("--warmup", "50", "--out", filepath.Join(root, "refused"))...)
	if code != 2 || !strings.Contains(stderr, "--warmup") || !strings.Contains(stderr, "--steps") {
		t.Errorf("--steps 8 --warmup 50: exit %d, stderr %q; want exit 2 naming --warmup and --steps", code, stderr)
	}
	code, _, stderr = qkv("train", "--steps", "8", "--warmup", "9", "--out", filepath.Join(root, "refused"))
	if code != 2 || !strings.Contains(stderr, "--warmup (with --steps)") {
		t.Errorf("--steps 8 --warmup 9 with the default model: exit %d, stderr %q", code, stderr)
	}

	for _, c := range []struct {
		name  string
		args  []string
		steps int
		want  int
	}{
		{"steps 8", train8(), 8, 0},
		{"steps 30", append(append([]string(nil), tinyRun...), "--steps", "30"), 30, 3},
		{"steps 8, explicit warmup 8", train8("--warmup", "8"), 8, 8},
	} {
		dir := filepath.Join(root, strings.ReplaceAll(c.name, " ", "-"))
		code, out, stderr := qkv(append(c.args, "--out", dir)...)
		if code != 0 || !strings.Contains(out, "task sort") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", c.name, code, out, stderr)
			continue
		}
		cfg, err := config.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Steps != c.steps || cfg.Warmup != c.want {
			t.Errorf("%s: config.json has steps %d, warmup %d; want %d, %d", c.name, cfg.Steps, cfg.Warmup, c.steps, c.want)
		}
	}

	// Resuming with a longer --steps keeps the checkpoint's warm-up (3), not
	// a tenth of the new total, so the run continues as it was configured.
	dir := filepath.Join(root, "steps-30")
	code, _, stderr = qkv("train", "--resume", dir, "--steps", "50")
	if code != 0 {
		t.Fatalf("resume with --steps 50: exit %d: %s", code, stderr)
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Steps != 50 || cfg.Warmup != 3 {
		t.Errorf("resumed config.json has steps %d, warmup %d; want 50, 3", cfg.Steps, cfg.Warmup)
	}

	if code, stdout, _ := qkv("train", "--help"); code != 0 || !strings.Contains(stdout, "--warmup INT  (default min(50, steps/10))") {
		t.Errorf("train --help: exit %d; want the adaptive warm-up default in:\n%s", code, stdout)
	}
}
