package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/train/checkpoint"
)

// TestCausalEncoderFlag: --causal-encoder without --arch encdec exits 2
// naming both flags and writes nothing; with it, config.json holds
// causal_encoder, and --resume refuses a run that would drop it.
func TestCausalEncoderFlag(t *testing.T) {
	out := filepath.Join(t.TempDir(), "never")
	validationCase{append(args("train --causal-encoder --out"), out), 2, []string{"--causal-encoder (with --arch)", `"encdec"`}}.check(t)
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a refused run created %s", out)
	}
	dir := filepath.Join(t.TempDir(), "causal")
	small := "train --arch encdec --causal-encoder --task copy --min-length 2 --max-length 3 --alphabet 3 --dim 16 --heads 4 --hidden 32 --layers 1 --batch 8 --steps 2 --warmup 0 --test-size 8 --eval-every 2 --out"
	if code, _, stderr := qkv(append(args(small), dir)...); code != 0 {
		t.Fatalf("train --causal-encoder: exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(checkpoint.File(dir, checkpoint.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"causal_encoder": true`) {
		t.Errorf("config.json lacks causal_encoder:\n%s", b)
	}
	validationCase{[]string{"train", "--resume", dir, "--causal-encoder=false"}, 2, []string{"--causal-encoder: the checkpoint in " + dir + " has true, given false"}}.check(t)
}
