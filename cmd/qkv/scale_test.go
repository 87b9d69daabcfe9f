package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/train/checkpoint"
)

// TestAttnScaleFlag: --attn-scale takes dk, dmodel or none; another value
// exits 2 naming the flag. A run's config.json holds attn_scale only when it
// is not dk. On --resume a differing --attn-scale is refused like any
// model flag, and one equal to the checkpoint's (dk included, which the
// default checkpoint does not spell) is accepted.
func TestAttnScaleFlag(t *testing.T) {
	out := filepath.Join(t.TempDir(), "never")
	validationCase{append(args("train --attn-scale sqrt --out"), out), 2, []string{`--attn-scale: unknown Scale "sqrt"`, "dk", "dmodel", "none"}}.check(t)
	validationCase{append(args("train --attn-scale DK --out"), out), 2, []string{"--attn-scale:"}}.check(t)
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a refused run created %s", out)
	}

	small := "train --task copy --min-length 2 --max-length 3 --alphabet 3 --dim 16 --heads 4 --hidden 32 --layers 1 --batch 8 --steps 2 --warmup 0 --test-size 8 --eval-every 2 --out"
	dk := filepath.Join(t.TempDir(), "dk")
	if code, _, stderr := qkv(append(args(small+" "+dk), "--attn-scale", "dk")...); code != 0 {
		t.Fatalf("train --attn-scale dk: exit %d: %s", code, stderr)
	}
	none := filepath.Join(t.TempDir(), "none")
	if code, _, stderr := qkv(append(args(small+" "+none), "--attn-scale", "none")...); code != 0 {
		t.Fatalf("train --attn-scale none: exit %d: %s", code, stderr)
	}
	for dir, want := range map[string]bool{dk: false, none: true} {
		b, err := os.ReadFile(checkpoint.File(dir, checkpoint.ConfigFile))
		if err != nil {
			t.Fatal(err)
		}
		if has := strings.Contains(string(b), `"attn_scale": "none"`); has != want {
			t.Errorf("%s: config.json has attn_scale none: %v, want %v:\n%s", dir, has, want, b)
		}
		if strings.Contains(string(b), `"attn_scale": "dk"`) {
			t.Errorf("%s: config.json spells the default scale:\n%s", dir, b)
		}
	}
	validationCase{[]string{"train", "--resume", dk, "--attn-scale", "dmodel"}, 2, []string{"--attn-scale: the checkpoint in " + dk + " has dk, given dmodel"}}.check(t)
	validationCase{[]string{"train", "--resume", none, "--attn-scale", "dk"}, 2, []string{"--attn-scale: the checkpoint in " + none + " has none, given dk"}}.check(t)
	validationCase{[]string{"train", "--resume", none, "--attn-scale", "bogus"}, 2, []string{"--attn-scale"}}.check(t)
	for _, c := range [][]string{{dk, "dk"}, {none, "none"}} {
		if code, out, stderr := qkv("train", "--resume", c[0], "--attn-scale", c[1], "--steps", "3"); code != 0 || !strings.Contains(out, "1 steps in") && !strings.Contains(out, "1 step in") {
			t.Errorf("resume %s with --attn-scale %s: exit %d, stdout %q, stderr %q", c[0], c[1], code, out, stderr)
		}
	}
}
