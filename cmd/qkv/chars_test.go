package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/internal/graphtest"
	"github.com/qkv-dev/qkv/train"
)

// writeText writes a small text for chars runs and returns its path.
func writeText(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "text.txt")
	text := strings.Repeat("package main\n\nfunc main() {\n\tprintln(\"hello, world\")\n}\n", 40)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Every bad text or chars setting is a usage error (exit 2) naming the
// flag and what is wrong, before anything is written.
func TestCharsBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	emptyDir := filepath.Join(dir, "empty")
	if err := os.Mkdir(emptyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"missing path", []string{"--data", filepath.Join(dir, "nope.txt")}, []string{"--data", "no such file"}},
		{"empty file", []string{"--data", write("empty.txt", "")}, []string{"--data", "empty"}},
		{"directory without files", []string{"--data", emptyDir}, []string{"--data", "no regular file"}},
		{"binary", []string{"--data", write("bin", "\x7fELF\x00")}, []string{"--data", "NUL", "binary"}},
		{"not UTF-8", []string{"--data", write("latin1.txt", "na\xefve")}, []string{"--data", "byte 2 is not valid UTF-8"}},
		{"shorter than a context", []string{"--data", write("short.txt", "too short")}, []string{"--data", "too short", "context+1 = 65"}},
		{"val fraction", []string{"--val-fraction", "1.5"}, []string{"--val-fraction", "(0, 1)"}},
		{"preset unknown", []string{"--preset", "gpt-5"}, []string{"--preset", "known presets: nanogpt-cpu"}},
		{"preset of another task", []string{"--preset", "nanogpt-cpu", "--task", "sort"}, []string{"--preset nanogpt-cpu trains task chars"}},
		{"encoder-decoder", []string{"--arch", "encdec"}, []string{"--arch", "task chars"}},
		{"target exact", []string{"--target-exact", "1"}, []string{"--target-exact", "validation loss"}},
	} {
		out := filepath.Join(dir, "run-"+strings.ReplaceAll(c.name, " ", "-"))
		args := append([]string{"train", "--task", "chars", "--steps", "1", "--out", out}, c.args...)
		code, _, stderr := qkv(args...)
		for _, w := range c.want {
			if code != 2 || !strings.Contains(stderr, w) {
				t.Errorf("%s: exit %d, stderr %q: want 2 and %q", c.name, code, stderr, w)
			}
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%s: the run directory was made", c.name)
		}
	}
}

// --task chars starts from nanoGPT's CPU preset, which config.json
// records; a short run on a text of one's own trains, and sample continues
// its text: greedy decoding with the cache prints what recomputing prints,
// the same seed the same text, and a prompt character outside the
// vocabulary is refused naming it.
func TestCharsTrainAndSample(t *testing.T) {
	text := writeText(t)
	out := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr := qkv("train", "--task", "chars", "--data", text, "--context", "16", "--dim", "32", "--hidden", "64", "--layers", "1",
		"--steps", "40", "--eval-every", "20", "--test-size", "16", "--out", out)
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "validation loss") || !strings.Contains(stdout, "bits") {
		t.Errorf("train's report %q does not give the validation loss", stdout)
	}
	b, err := os.ReadFile(filepath.Join(out, train.SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	var sum train.Summary
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	c := sum.Config
	if c.Batch != 12 || c.LR != 1e-3 || c.Beta2 != 0.99 || c.Decay != "matrices" || c.WeightDecay != 0.1 || c.Task.Params.Context != 16 || sum.ValLoss <= 0 || len(c.Task.Params.SHA256) != 64 {
		t.Errorf("config %+v, val_loss %v: want nanoGPT's preset with --context 16 and the corpus recorded", c, sum.ValLoss)
	}

	args := []string{"sample", "--checkpoint", out, "--prompt", "func ", "--tokens", "60", "--temperature", "0"}
	code, cached, stderr := qkv(args...)
	if code != 0 {
		t.Fatalf("sample: exit %d: %s", code, stderr)
	}
	if !strings.HasPrefix(cached, "func ") || len([]rune(cached)) != len("func ")+60+1 || !strings.Contains(stderr, "characters/s") {
		t.Errorf("sample printed %q (stderr %q): want the prompt, 60 characters and a newline, and the speed on stderr", cached, stderr)
	}
	code, recomputed, stderr := qkv(append(args, "--cache=false")...)
	if code != 0 || recomputed != cached {
		t.Errorf("greedy without the cache: exit %d, %q (stderr %q), want %q", code, recomputed, stderr, cached)
	}
	code, a, _ := qkv("sample", "--checkpoint", out, "--tokens", "40", "--seed", "5")
	_, b2, _ := qkv("sample", "--checkpoint", out, "--tokens", "40", "--seed", "5")
	if code != 0 || a != b2 || strings.Contains(a, "<") {
		t.Errorf("sampling twice with seed 5: %q and %q: want the same text, no special token", a, b2)
	}
	if code, _, stderr := qkv("sample", "--checkpoint", out, "--prompt", "naïve"); code != 2 || !strings.Contains(stderr, "'ï' at character 2") {
		t.Errorf("prompt with ï: exit %d, stderr %q: want 2 naming it", code, stderr)
	}
	if code, _, stderr := qkv("sample", "--checkpoint", out, "--top-p", "2"); code != 2 || !strings.Contains(stderr, "top-p") {
		t.Errorf("--top-p 2: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := qkv("train", "--resume", out, "--preset", "nanogpt-cpu", "--steps", "50"); code != 2 || !strings.Contains(stderr, "--preset starts a run") {
		t.Errorf("--resume with --preset: exit %d, stderr %q", code, stderr)
	}
	png := filepath.Join(t.TempDir(), "attend.png")
	if code, stdout, stderr := qkv("attend", "--checkpoint", out, "--input", "func ", "--out", png); code != 0 || !strings.Contains(stdout, `over "func " (BOS and 5 characters)`) || strings.Contains(stdout, "answer") || strings.Count(stdout, "\n") != 1 {
		t.Errorf("attend: exit %d, %q, %q: want one line, the prompt alone quoted, no continuation", code, stdout, stderr)
	}
	code, stdout, stderr = qkv("eval", "--checkpoint", out, "--test-size", "32")
	if code != 0 || !strings.Contains(stdout, "32 validation windows: loss") {
		t.Errorf("eval: exit %d, %q, %q", code, stdout, stderr)
	}
	// Without its text the checkpoint still samples (config.json records the
	// vocabulary); eval, which reads the text, says which is missing.
	if err := os.Remove(text); err != nil {
		t.Fatal(err)
	}
	if code, again, stderr := qkv(args...); code != 0 || again != cached {
		t.Errorf("sample without the text: exit %d, %q (stderr %q), want %q", code, again, stderr, cached)
	}
	if code, _, stderr := qkv("eval", "--checkpoint", out); code == 0 || !strings.Contains(stderr, text) {
		t.Errorf("eval without the text: exit %d, stderr %q: want a failure naming %s", code, stderr, text)
	}
}

// bench --torch runs PyTorch's step from any directory: the reference
// script travels in the binary.
func TestBenchTorchOutsideRepository(t *testing.T) {
	script, err := filepath.Abs(filepath.Join("..", "..", "tools", "torchref", "torchref.py"))
	if err != nil {
		t.Fatal(err)
	}
	py := graphtest.TorchPython(t, script)
	t.Chdir(t.TempDir())
	code, stdout, stderr := qkv("bench", "-n", "2", "--torch", py)
	if code != 0 || !strings.Contains(stdout, "PyTorch") || !strings.Contains(stdout, "qkv / PyTorch's best") {
		t.Errorf("bench --torch outside the repository: exit %d\n%s%s", code, stdout, stderr)
	}
}
