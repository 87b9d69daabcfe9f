package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestSampleFastPath: qkv sample runs a chars checkpoint on the fast path
// by default and says so; greedily it writes what the graph path and
// recomputing write, past the context with the crop and with the slide;
// --num-samples draws rows of which the first is the single sample of the
// same seed, reproducibly; bad flags are refused.
func TestSampleFastPath(t *testing.T) {
	text := writeText(t)
	out := filepath.Join(t.TempDir(), "run")
	if code, _, stderr := qkv("train", "--task", "chars", "--data", text, "--context", "16", "--dim", "32", "--hidden", "64", "--layers", "2",
		"--steps", "30", "--eval-every", "30", "--test-size", "16", "--out", out); code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	greedy := []string{"sample", "--checkpoint", out, "--prompt", "func ", "--tokens", "50", "--temperature", "0"}
	code, fast, stderr := qkv(greedy...)
	if code != 0 || !strings.Contains(stderr, "fast path") {
		t.Fatalf("sample: exit %d, stderr %q: want the fast path named", code, stderr)
	}
	for _, extra := range [][]string{{"--decoder", "graph"}, {"--cache=false"}} {
		code, got, stderr := qkv(append(greedy, extra...)...)
		if code != 0 || got != fast {
			t.Errorf("greedy %v: exit %d, %q (stderr %q), want the fast path's %q", extra, code, got, stderr, fast)
		}
	}
	slide := append(greedy, "--overflow", "slide")
	code, fastSlide, stderr := qkv(slide...)
	if code != 0 || !strings.Contains(stderr, "re-primed") {
		t.Fatalf("slide: exit %d, stderr %q", code, stderr)
	}
	if code, got, stderr := qkv(append(slide, "--decoder", "graph")...); code != 0 || got != fastSlide {
		t.Errorf("greedy slide on the graph path: exit %d, %q (stderr %q), want %q", code, got, stderr, fastSlide)
	}

	one := []string{"sample", "--checkpoint", out, "--tokens", "40", "--seed", "9"}
	_, single, _ := qkv(one...)
	code, many, stderr := qkv(append(one, "--num-samples", "3")...)
	if code != 0 || strings.Count(many, "--- sample ") != 3 {
		t.Fatalf("--num-samples 3: exit %d, %q, %q", code, many, stderr)
	}
	first := strings.SplitN(strings.SplitN(many, "---\n", 2)[1], "\n--- sample 2", 2)[0]
	if first+"\n" != single {
		t.Errorf("sample 1 of 3 %q differs from the single sample of the seed %q", first, single)
	}
	if _, again, _ := qkv(append(one, "--num-samples", "3")...); again != many {
		t.Errorf("--num-samples 3 twice: %q, then %q", many, again)
	}
	if _, graph, _ := qkv(append(one, "--num-samples", "3", "--decoder", "graph")...); graph != many {
		t.Logf("graph path's samples differ (float rounding may change a draw): %q vs %q", graph, many)
	}
	for _, bad := range [][]string{{"--num-samples", "0"}, {"--overflow", "wrap"}, {"--decoder", "gpu"}, {"--cache=false", "--num-samples", "2"}} {
		if code, _, stderr := qkv(append(one, bad...)...); code != 2 {
			t.Errorf("%v: exit %d, stderr %q: want 2", bad, code, stderr)
		}
	}
}
