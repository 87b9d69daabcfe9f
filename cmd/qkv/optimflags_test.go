package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/train/checkpoint"
)

// TestBetaAndBiasFlags: --beta1, --beta2 and --bias=false reach
// config.json; the default betas given explicitly leave config.json as
// without them, so --resume accepts them; out-of-range betas exit 2 naming
// the flag, and --resume refuses other betas.
func TestBetaAndBiasFlags(t *testing.T) {
	validationCase{append(args("train --beta2 1 --out"), filepath.Join(t.TempDir(), "x")), 2, []string{"--beta2: must be a finite number in [0, 1)"}}.check(t)
	validationCase{append(args("train --beta1 -0.1 --out"), filepath.Join(t.TempDir(), "x")), 2, []string{"--beta1: must be a finite number in [0, 1)"}}.check(t)
	small := "train --task copy --min-length 2 --max-length 3 --alphabet 3 --dim 16 --heads 4 --hidden 32 --layers 1 --batch 8 --steps 2 --warmup 0 --test-size 8 --eval-every 2 --out"
	nano := filepath.Join(t.TempDir(), "nano")
	if code, _, stderr := qkv(append(args(small), nano, "--beta2", "0.99", "--bias=false")...); code != 0 {
		t.Fatalf("train --beta2 0.99 --bias=false: exit %d: %s", code, stderr)
	}
	plain := filepath.Join(t.TempDir(), "plain")
	if code, _, stderr := qkv(append(args(small), plain, "--beta1", "0.9", "--beta2", "0.999")...); code != 0 {
		t.Fatalf("train with the default betas: exit %d: %s", code, stderr)
	}
	for dir, want := range map[string][]string{nano: {`"beta2": 0.99`, `"bias": false`}, plain: {`"bias": true`}} {
		b, err := os.ReadFile(checkpoint.File(dir, checkpoint.ConfigFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s: config.json lacks %s:\n%s", dir, w, b)
			}
		}
		if dir == plain && strings.Contains(string(b), "beta") {
			t.Errorf("the default betas are spelled in config.json:\n%s", b)
		}
	}
	validationCase{[]string{"train", "--resume", nano, "--beta2", "0.999"}, 2, []string{"--beta2: the checkpoint in " + nano + " has 0.99, given 0.999"}}.check(t)
	if code, out, stderr := qkv("train", "--resume", plain, "--beta2", "0.999", "--steps", "3"); code != 0 || !strings.Contains(out, "step") {
		t.Errorf("resume with the default beta2 spelled out: exit %d: %s%s", code, out, stderr)
	}
}
