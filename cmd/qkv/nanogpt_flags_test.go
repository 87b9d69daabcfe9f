package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/train/checkpoint"
)

// TestNanoGPTOptionFlags: --tie-embeddings, --bias-free-norm and --init
// reach config.json; a wrong --init and --tie-embeddings with --arch encdec
// exit 2 naming the flag; the checkpoint of a tied, bias-free model holds no
// head and no LayerNorm bias, evaluates (the KV-cached decoder included),
// and --resume refuses to change any of the three.
func TestNanoGPTOptionFlags(t *testing.T) {
	out := filepath.Join(t.TempDir(), "never")
	for _, c := range []validationCase{
		{append(args("train --init xavier --out"), out), 2, []string{`--init: unknown Init "xavier"`, `"gpt2"`}},
		{append(args("train --arch encdec --tie-embeddings --out"), out), 2, []string{"--tie-embeddings (with --arch): is for a decoder-only model"}},
	} {
		c.check(t)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a refused run created %s", out)
	}
	dir := filepath.Join(t.TempDir(), "nano")
	small := "train --tie-embeddings --bias-free-norm --init gpt2 --bias=false --task copy --min-length 2 --max-length 3 --alphabet 3 --dim 16 --heads 4 --hidden 32 --layers 2 --batch 8 --steps 2 --warmup 0 --test-size 8 --eval-every 2 --out"
	if code, _, stderr := qkv(append(args(small), dir)...); code != 0 {
		t.Fatalf("train with nanoGPT's options: exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(checkpoint.File(dir, checkpoint.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{`"tie_embeddings": true`, `"bias_free_norm": true`, `"init": "gpt2"`, `"bias": false`} {
		if !strings.Contains(string(b), f) {
			t.Errorf("config.json lacks %s:\n%s", f, b)
		}
	}
	ck, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, w := range ck.Weights {
		names[w.Name] = true
		if strings.HasPrefix(w.Name, "head.") || strings.HasSuffix(w.Name, "ln1.bias") || strings.HasSuffix(w.Name, "ln2.bias") || w.Name == "ln_f.bias" {
			t.Errorf("the checkpoint holds %s", w.Name)
		}
	}
	if !names["tok_emb.table"] || !names["ln_f.gain"] {
		t.Errorf("the checkpoint lacks tok_emb.table or ln_f.gain: %v", names)
	}
	if code, out, stderr := qkv("eval", "--checkpoint", dir); code != 0 || !strings.Contains(out, "exact match") {
		t.Errorf("eval of the tied checkpoint: exit %d: %s%s", code, out, stderr)
	}
	for _, c := range []validationCase{
		{[]string{"train", "--resume", dir, "--tie-embeddings=false"}, 2, []string{"--tie-embeddings: the checkpoint in " + dir + " has true, given false"}},
		{[]string{"train", "--resume", dir, "--bias-free-norm=false"}, 2, []string{"--bias-free-norm: the checkpoint in " + dir + " has true, given false"}},
		{[]string{"train", "--resume", dir, "--init", ""}, 2, []string{"--init: the checkpoint in " + dir}},
	} {
		c.check(t)
	}
}
