package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestBenchRefusesUnusedFlags: every flag the chosen mode of bench does not
// use, or that is invalid for it, exits 2 naming the flag; --dtype is a
// usage error in every mode.
func TestBenchRefusesUnusedFlags(t *testing.T) {
	cases := []validationCase{
		{args("bench --seq 16 --attention flash --attn-dropout 0.1"), 2, []string{"--seq", "does not use --attn-dropout"}},
		{args("bench --seq 16 --dim 7 --heads 2"), 2, []string{"--seq", "does not use --dim (used by the training step and --generate)"}},
		{args("bench --seq 16 --seed 3 --lr 0.1"), 2, []string{"--lr (used by the training step)", "--seed (used by the training step and --generate)"}},
		{args("bench --seq 16 --generate 4"), 2, []string{"--seq and --generate"}},
		{args("bench --generate 4 --batch 3 --task copy --dropout 0.1"), 2, []string{"--generate", "--batch (used by the training step and --seq)", "--task", "--dropout"}},
		{args("bench --generate 4 --plot x.png"), 2, []string{"--plot (used by --seq)"}},
		{args("bench --head-dim 8"), 2, []string{"the training step", "--head-dim (used by --seq)"}},
		{args("bench --causal=false"), 2, []string{"--causal (used by --seq)"}},
		{args("bench --seq 16 --torch python3"), 2, []string{"--torch (used by the training step)"}},
		{args("bench --seq 16 --profile p.prof"), 2, []string{"--profile (used by the training step)"}},
		{args("bench --steps 5"), 2, []string{"-steps"}},
		{args("bench --warmup 5"), 2, []string{"-warmup"}},
		{args("bench --generate 4 --dim 7 --heads 2"), 2, []string{"--heads (with --dim): Dim 7 is not divisible by Heads 2"}},
		{args("bench --generate 4 --attention composed,flash"), 2, []string{"--attention"}},
		{args("bench --attention flash --attn-dropout 0.1"), 2, []string{"--attn-dropout (with --attention)"}},
		{args("bench --dtype float16"), 2, []string{"--dtype:", "float16"}},
		{args("bench --seq 16 --dtype float16"), 2, []string{"--dtype:", "float16"}},
		{args("bench --seq 16,32 --dtype float16"), 2, []string{"--dtype:", "float16"}},
		{args("bench --generate 4 --dtype float16"), 2, []string{"--dtype:", "float16"}},
	}
	for _, c := range cases {
		c.check(t)
	}
}

// TestBenchMemoryLimit: every size of a --seq sweep is estimated against
// --max-memory before it runs; one that does not fit is not run, the
// others are, and the command exits 2 naming the size and the limit. A
// --generate position too large is refused before anything runs.
func TestBenchMemoryLimit(t *testing.T) {
	validationCase{args("bench --seq 256,512 --attention fused --max-memory 1MiB -n 1"), 2,
		[]string{"--max-memory:", "fused n=256 (about", "fused n=512 (about", "more than 1.0 MiB, --max-memory"}}.check(t)
	validationCase{args("bench --seq 512 --attention composed --max-memory 1MiB -n 1"), 2,
		[]string{"--max-memory:", "composed n=512", "1.0 MiB"}}.check(t)
	// Without --max-memory the limit is the available memory, and the
	// message names the limit that set it.
	validationCase{args("bench --seq 1000000 --attention composed --batch 1 -n 1"), 2,
		[]string{"--max-memory:", "composed n=1000000 (about", "TiB", "the available memory ("}}.check(t)
	// With one head of width 4, composed attention at n=256 is estimated at
	// about 15 MiB (60 (B, H, n, n) tensors), the others at under 1 MiB.
	// The sizes that fit are still drawn.
	png := filepath.Join(t.TempDir(), "scaling.png")
	code, out, stderr := qkvNoPanic(t, append(args("bench --seq 16,256 --attention flash,composed --batch 1 --heads 1 --head-dim 4 --max-memory 8MiB -n 1 --plot"), png)...)
	if code != 2 || !strings.Contains(stderr, "composed n=256") || strings.Contains(stderr, "flash n=") || strings.Contains(stderr, "composed n=16 ") {
		t.Errorf("sweep over the limit: exit %d, stderr %q", code, stderr)
	}
	results := 0
	for _, l := range strings.Split(out, "\n") {
		var r attnResult
		if !strings.HasPrefix(l, "{") || json.Unmarshal([]byte(l), &r) != nil {
			continue
		}
		results++
		if skipped := r.Impl == "composed" && r.Seq == 256; (r.Skipped != "") != skipped || !skipped && !(r.MsPerStep > 0) {
			t.Errorf("result %+v: only composed n=256 should be skipped, the others timed", r)
		}
	}
	if results != 4 {
		t.Errorf("the sweep printed %d results, want 4: %q", results, out)
	}
	if b, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("a sweep with a size refused drew no plot: %v", err)
	}
	validationCase{args("bench --generate 4,8 --max-memory 1KiB -n 1"), 2, []string{"--max-memory:", "B=1 S=5", "more than 1.0 KiB, --max-memory"}}.check(t)
}

// helpDefaults parses a command's --help (on stdout) into flag name ->
// default: its lines "  --name TYPE  (default X)".
func helpDefaults(t *testing.T, cmd string) map[string]string {
	t.Helper()
	code, stdout, _ := qkv(cmd, "--help")
	if code != 0 {
		t.Fatalf("%s --help: exit %d", cmd, code)
	}
	line := regexp.MustCompile(`^  --([a-z0-9-]+)(?: [^ ]+)?(?:  \(default (.*)\))?$`)
	flags := map[string]string{}
	for _, l := range strings.Split(stdout, "\n") {
		if m := line.FindStringSubmatch(l); m != nil {
			flags[m[1]] = m[2]
		}
	}
	if len(flags) < 10 {
		t.Fatalf("%s --help lists only %v", cmd, flags)
	}
	return flags
}

// TestBenchHelp: bench --help lists only the flags bench uses, with
// train's defaults where they share one.
func TestBenchHelp(t *testing.T) {
	train, bench := helpDefaults(t, "train"), helpDefaults(t, "bench")
	for _, name := range []string{"steps", "warmup", "min-lr", "eval-every", "target-exact", "checkpoint-every", "out", "resume", "force"} {
		if _, ok := bench[name]; ok {
			t.Errorf("bench --help lists -%s, which only train uses", name)
		}
	}
	// --max-memory's default is the memory available at the time, which
	// moves between the two calls.
	for name, def := range bench {
		if tdef, ok := train[name]; ok && tdef != def && name != "max-memory" {
			t.Errorf("-%s: bench's default %q, train's %q", name, def, tdef)
		}
	}
	for _, name := range []string{"seq", "generate", "head-dim", "torch", "n", "lr", "dim", "task"} {
		if _, ok := bench[name]; !ok {
			t.Errorf("bench --help lacks -%s", name)
		}
	}
}

// TestBenchGenerateJSONKeys: every key of --generate's JSON lines is
// snake_case, as in the other commands' JSON.
func TestBenchGenerateJSONKeys(t *testing.T) {
	code, out, stderr := qkv(args("bench --generate 2 --dim 8 --heads 2 --hidden 8 --layers 1 -n 1")...)
	if code != 0 {
		t.Fatalf("bench --generate: exit %d: %s", code, stderr)
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	lines := 0
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		lines++
		var row map[string]any
		if err := json.Unmarshal([]byte(l), &row); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		for k := range row {
			if !snake.MatchString(k) {
				t.Errorf("key %q of %s is not snake_case", k, l)
			}
		}
		if row["dim"] != 8.0 || row["layers"] != 1.0 {
			t.Errorf("%s: want dim 8 and layers 1", l)
		}
	}
	if lines != 3 { // the graph's cached step, no cache, the fast path
		t.Errorf("%d JSON lines, want 3: %q", lines, out)
	}
}
