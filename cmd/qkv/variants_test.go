package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/train/checkpoint"
)

// TestAttentionVariantFlags: the variant flags of train reach config.json
// and combine; wrong values exit 2 naming the flag (and what it depends
// on); --resume refuses to drop one.
func TestAttentionVariantFlags(t *testing.T) {
	out := filepath.Join(t.TempDir(), "never")
	for _, c := range []validationCase{
		{append(args("train --kv-heads 3 --out"), out), 2, []string{"--kv-heads (with --heads): KVHeads 3 does not divide Heads 4"}},
		{append(args("train --softcap -2 --out"), out), 2, []string{"--softcap: Softcap -2 must be a finite number > 0, or 0 for no cap"}},
		{append(args("train --window -1 --out"), out), 2, []string{"--window: Window -1 must be at least 1"}},
		{append(args("train --positions rope --dim 12 --out"), out), 2, []string{"--positions (with --dim, --heads): RoPE needs an even head dimension, got dk = Dim/Heads = 12/4 = 3"}},
		{append(args("train --rope-base 500 --out"), out), 2, []string{"--rope-base (with --positions): RoPEBase 500 needs RoPE positions"}},
		{append(args("train --positions rotary --out"), out), 2, []string{`--positions: unknown kind "rotary"`}},
	} {
		c.check(t)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a refused run created %s", out)
	}
	dir := filepath.Join(t.TempDir(), "all")
	small := "train --positions rope-interleaved --rope-base 500 --kv-heads 2 --window 4 --sinks --softcap 3 --qk-norm --task copy --min-length 2 --max-length 3 --alphabet 3 --dim 16 --heads 4 --hidden 32 --layers 1 --batch 8 --steps 2 --warmup 0 --test-size 8 --eval-every 2 --out"
	if code, _, stderr := qkv(append(args(small), dir)...); code != 0 {
		t.Fatalf("train with every variant: exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(checkpoint.File(dir, checkpoint.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{`"positions": "rope-interleaved"`, `"rope_base": 500`, `"kv_heads": 2`, `"window": 4`, `"sinks": true`, `"softcap": 3`, `"qk_norm": true`} {
		if !strings.Contains(string(b), f) {
			t.Errorf("config.json lacks %s:\n%s", f, b)
		}
	}
	validationCase{[]string{"train", "--resume", dir, "--window", "0"}, 2, []string{"--window: the checkpoint in " + dir + " has 4, given 0"}}.check(t)
	if code, out, stderr := qkv("eval", "--checkpoint", dir, "--attention", "flash"); code != 0 || !strings.Contains(out, "exact match") {
		t.Errorf("eval of the variant checkpoint under flash: exit %d: %s%s", code, out, stderr)
	}
}
