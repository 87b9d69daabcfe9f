package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBenchAttentionLayer(t *testing.T) {
	code, out, stderr := qkv("bench", "--seq", "16", "--batch", "1", "--heads", "2", "--head-dim", "4", "-n", "2")
	if code != 0 {
		t.Fatalf("bench --seq: exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var res attnResult
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("the last line is not the JSON result: %q: %v", lines[len(lines)-1], err)
	}
	if res.Impl != "fused" || res.Seq != 16 || res.Heads != 2 || res.HeadDim != 4 || !(res.MsPerStep > 0) || res.PeakBytes <= 0 || res.PeakRSS <= 0 {
		t.Errorf("result %+v", res)
	}

	// A sweep runs every implementation and length in a process of its own
	// and draws the log-log plot.
	png := filepath.Join(t.TempDir(), "scaling.png")
	code, out, stderr = qkv("bench", "--attention", "composed,fused,flash", "--seq", "16,32", "--batch", "1", "--heads", "2", "--head-dim", "4", "-n", "1", "--plot", png)
	if code != 0 {
		t.Fatalf("bench sweep: exit %d: %s", code, stderr)
	}
	seen := map[string]int{}
	for _, l := range strings.Split(out, "\n") {
		var r attnResult
		if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &r) == nil {
			seen[string(r.Impl)]++
		}
	}
	if seen["composed"] != 2 || seen["fused"] != 2 || seen["flash"] != 2 {
		t.Errorf("sweep results per implementation: %v, want 2 each", seen)
	}
	if b, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("no plot: %v", err)
	}

	// --window times each implementation with and without the window.
	code, out, stderr = qkv("bench", "--attention", "flash", "--window", "8", "--seq", "32,64", "--batch", "1", "--heads", "2", "--head-dim", "4", "-n", "1")
	if code != 0 {
		t.Fatalf("bench --window: exit %d: %s", code, stderr)
	}
	windows := map[int]int{}
	for _, l := range strings.Split(out, "\n") {
		var r attnResult
		if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &r) == nil {
			windows[r.Window]++
		}
	}
	if windows[0] != 2 || windows[8] != 2 || !strings.Contains(out, "flash, window 8") {
		t.Errorf("results per window: %v, want 2 without and 2 with window 8:\n%s", windows, out)
	}

	for _, args := range [][]string{
		{"bench", "--seq", "16", "--window", "-1"},
		{"bench", "--seq", "0"},
		{"bench", "--seq", "16,x"},
		{"bench", "--seq", "16", "--attention", "sparse"},
		{"bench", "--seq", "16", "--head-dim", "0"},
	} {
		if code, _, stderr := qkv(args...); code != 2 {
			t.Errorf("qkv %q: exit %d, want 2: %s", args, code, stderr)
		}
	}
}

// TestAttentionInterchangeable: a checkpoint trained with one attention
// implementation evaluates the same under the others, and `qkv attend` on
// a flash checkpoint draws the weights with fused attention, saying so.
func TestAttentionInterchangeable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	code, _, stderr := qkv("train", "--task", "sort", "--length", "3", "--test-size", "8", "--dim", "16", "--heads", "2",
		"--hidden", "32", "--layers", "1", "--batch", "16", "--steps", "30", "--eval-every", "10", "--attention", "flash", "--out", dir)
	if code != 0 {
		t.Fatalf("train --attention flash: exit %d: %s", code, stderr)
	}
	var scores []string
	for _, impl := range []string{"flash", "fused", "composed"} {
		code, out, stderr := qkv("eval", "--checkpoint", dir, "--attention", impl)
		if code != 0 {
			t.Fatalf("eval --attention %s: exit %d: %s", impl, code, stderr)
		}
		scores = append(scores, out)
	}
	if scores[0] != scores[1] || scores[1] != scores[2] {
		t.Errorf("the same checkpoint scores differently under flash, fused and composed:\n%s", strings.Join(scores, ""))
	}
	png := filepath.Join(t.TempDir(), "attn.png")
	code, _, stderr = qkv("attend", "--checkpoint", dir, "--input", "1 1 0", "--out", png)
	if code != 0 || !strings.Contains(stderr, "flash attention forms no weights: drawing them with fused attention") {
		t.Errorf("attend on a flash checkpoint: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(png); err != nil {
		t.Errorf("attend wrote no PNG: %v", err)
	}
	if code, _, stderr := qkv("eval", "--checkpoint", dir, "--attention", "sparse"); code != 2 || !strings.Contains(stderr, "--attention") {
		t.Errorf("eval --attention sparse: exit %d, stderr %q", code, stderr)
	}
}

// --attention linear times linear attention with the model's feature map,
// alone or in a sweep beside softmax attention, and names its map.
func TestBenchAttentionLinear(t *testing.T) {
	code, out, stderr := qkv("bench", "--attention", "linear", "--feature-map", "elu1", "--seq", "32", "--batch", "1", "--heads", "2", "--head-dim", "4", "-n", "1")
	if code != 0 {
		t.Fatalf("bench --attention linear: exit %d: %s", code, stderr)
	}
	res, err := lastJSON([]byte(out))
	if err != nil || res.Impl != "linear" || res.FeatureMap != "elu1" || res.Seq != 32 || !(res.MsPerStep > 0) || res.PeakBytes <= 0 {
		t.Errorf("result %+v (%v)", res, err)
	}
	code, out, stderr = qkv("bench", "--attention", "flash,linear", "--feature-dim", "4", "--window", "8", "--seq", "16,32", "--batch", "1", "--heads", "2", "--head-dim", "4", "-n", "1")
	if code != 0 {
		t.Fatalf("bench sweep with linear: exit %d: %s", code, stderr)
	}
	seen := map[string]int{}
	for _, l := range strings.Split(out, "\n") {
		var r attnResult
		if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &r) == nil {
			seen[r.name()]++
		}
	}
	// The window is flash's: linear attention is timed once a length.
	if seen["flash"] != 2 || seen["flash, window 8"] != 2 || seen["linear, taylor 4"] != 2 || len(seen) != 3 {
		t.Errorf("sweep results: %v", seen)
	}
	if code, _, stderr := qkv("bench", "--attention", "linearish", "--seq", "16"); code != 2 || !strings.Contains(stderr, "linear") {
		t.Errorf("--attention linearish: exit %d, stderr %q", code, stderr)
	}
}

func TestBenchGenerate(t *testing.T) {
	code, out, stderr := qkv("bench", "--generate", "4,8", "--dim", "8", "--heads", "2", "--hidden", "16", "--layers", "1", "-n", "1")
	if code != 0 {
		t.Fatalf("bench --generate: exit %d: %s", code, stderr)
	}
	var rows []genResult
	for _, l := range strings.Split(out, "\n") {
		var r genResult
		if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &r) == nil {
			rows = append(rows, r)
		}
	}
	// Per position: the graph's cached step, no cache, the fast path.
	if len(rows) != 6 || rows[0].Position != 4 || !rows[0].Cached || rows[0].Path != "graph" || rows[1].Cached || rows[2].Path != "fast" || rows[5].Position != 8 || !(rows[0].MsPerToken > 0) || !(rows[2].MsPerToken > 0) {
		t.Errorf("bench --generate results %+v", rows)
	}
	if code, _, _ := qkv("bench", "--generate", "0"); code != 2 {
		t.Errorf("bench --generate 0: exit %d, want 2", code)
	}
	// nanoGPT's character model (tied, bias-free) generates too, at its width.
	code, out, stderr = qkv("bench", "--preset", "nanogpt-cpu", "--generate", "4", "--layers", "1", "-n", "1")
	if code != 0 || !strings.Contains(out, `"dim":128`) || !strings.Contains(out, "tokens_per_s") {
		t.Errorf("bench --preset nanogpt-cpu --generate 4: exit %d: %s%s", code, out, stderr)
	}
}

// TestEncDecCommandLine: --arch encdec trains an encoder-decoder that eval
// and predict run and attend draws (encoder, decoder and cross-attention);
// a bad --arch is refused naming the flag.
func TestEncDecCommandLine(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	code, out, stderr := qkv("train", "--arch", "encdec", "--task", "sort", "--length", "3", "--test-size", "8", "--dim", "16",
		"--heads", "2", "--hidden", "32", "--layers", "1", "--batch", "16", "--steps", "30", "--eval-every", "10", "--out", dir)
	if code != 0 || !strings.Contains(out, "held-out exact match") {
		t.Fatalf("train --arch encdec: exit %d: %s%s", code, out, stderr)
	}
	if code, out, stderr := qkv("eval", "--checkpoint", dir); code != 0 || !strings.Contains(out, "8 held-out examples") {
		t.Errorf("eval of an encoder-decoder: exit %d, %q %q", code, out, stderr)
	}
	if code, out, stderr := qkv("predict", "--checkpoint", dir, "2 0 1"); code != 0 || len(strings.Fields(out)) != 3 {
		t.Errorf("predict with an encoder-decoder: exit %d, %q %q", code, out, stderr)
	}
	png := filepath.Join(t.TempDir(), "a.png")
	if code, out, stderr := qkv("attend", "--checkpoint", dir, "--input", "2 0 1", "--out", png); code != 0 || !strings.Contains(out, "cross-attention written") {
		t.Errorf("attend on an encoder-decoder: exit %d, %q %q", code, out, stderr)
	}
	for _, kind := range []string{"encoder", "decoder", "cross"} {
		if _, err := os.Stat(strings.TrimSuffix(png, ".png") + "-" + kind + ".png"); err != nil {
			t.Errorf("attend wrote no %s attention: %v", kind, err)
		}
	}
	if code, _, stderr := qkv("train", "--arch", "transformer"); code != 2 || !strings.Contains(stderr, "--arch") {
		t.Errorf("train --arch transformer: exit %d, %q", code, stderr)
	}
}

func TestBenchProfileAndCounts(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "cpu.prof")
	code, out, stderr := qkv("bench", "--task", "sort", "--length", "3", "--test-size", "8", "--dim", "16", "--heads", "2",
		"--hidden", "32", "--layers", "1", "--batch", "8", "-n", "5", "--profile", prof)
	if code != 0 || !strings.Contains(out, "allocations/step") || !strings.Contains(out, "GC ") {
		t.Fatalf("bench --profile: exit %d, %q %q", code, out, stderr)
	}
	if fi, err := os.Stat(prof); err != nil || fi.Size() == 0 {
		t.Errorf("no CPU profile written: %v", err)
	}
	if code, _, _ := qkv("bench", "-n", "1", "--profile", filepath.Join(t.TempDir(), "no", "such", "dir", "p")); code != 2 {
		t.Errorf("bench --profile into a missing directory: exit %d, want 2", code)
	}
}

// TestBenchSparsePatterns: --global-tokens (with --window) and --block-local time
// flash under graph.GlobalWindow and graph.BlockLocal, reporting the tiles
// flash computed per pass, fewer than causal attention's and as many as the
// patterns touch; a sweep times each beside no pattern; bad combinations are
// usage errors.
func TestBenchSparsePatterns(t *testing.T) {
	// run runs one flash layer of 512 positions (8 x 8 tiles of 64) and
	// returns its result.
	run := func(args ...string) attnResult {
		t.Helper()
		all := append([]string{"bench", "--attention", "flash", "--seq", "512", "--batch", "1", "--heads", "2", "--head-dim", "4", "-n", "2"}, args...)
		code, out, stderr := qkv(all...)
		if code != 0 {
			t.Fatalf("qkv %q: exit %d: %s", all, code, stderr)
		}
		res, err := lastJSON([]byte(out))
		if err != nil {
			t.Fatalf("qkv %q: %v:\n%s", all, err, out)
		}
		if res.Impl == "flash" && !strings.Contains(out, "flash tiles/pass") {
			t.Errorf("qkv %q prints no tiles:\n%s", all, out)
		}
		return res
	}
	causal := run()
	global := run("--global-tokens", "4", "--window", "32")
	local := run("--block-local", "64")
	bidi := run("--global-tokens", "4", "--window", "32", "--causal=false")
	if global.Global != 4 || global.Window != 32 || local.BlockLocal != 64 || bidi.Causal {
		t.Errorf("results %+v, %+v, %+v", global, local, bidi)
	}
	// Forward, per head: causal 36 tiles of 64; global 4 + window 32, the
	// diagonal (8), the one below it (7) and the global column (6 more);
	// block-local 64, the diagonal (8); without causality, global 4 +
	// window 32 is the band (22) with the first row and column (6 + 6).
	// The backward pass computes each tile again, once or twice.
	for _, c := range []struct {
		name    string
		r       attnResult
		forward int64
	}{{"causal", causal, 36}, {"global + window", global, 21}, {"block-local", local, 8}, {"bidirectional global + window", bidi, 34}} {
		if per := 2 * c.forward; c.r.FlashTiles < 2*per || c.r.FlashTiles > 3*per {
			t.Errorf("%s: %d tiles per pass, want %d to %d (forward %d per head)", c.name, c.r.FlashTiles, 2*per, 3*per, c.forward)
		}
	}
	if !(local.FlashTiles < global.FlashTiles && global.FlashTiles < causal.FlashTiles) {
		t.Errorf("tiles per pass: block-local %d, global + window %d, causal %d", local.FlashTiles, global.FlashTiles, causal.FlashTiles)
	}
	if fused := run("--attention", "fused", "--block-local", "64"); fused.FlashTiles != 0 || fused.BlockLocal != 64 {
		t.Errorf("fused block-local: %+v", fused)
	}

	// A sweep times each pattern beside no pattern, in processes of their own.
	for _, pattern := range [][]string{{"--global-tokens", "2", "--window", "8"}, {"--block-local", "16"}} {
		args := append([]string{"bench", "--attention", "flash", "--seq", "128,512", "--batch", "1", "--heads", "1", "--head-dim", "4", "-n", "1"}, pattern...)
		code, out, stderr := qkv(args...)
		if code != 0 {
			t.Fatalf("qkv %q: exit %d: %s", args, code, stderr)
		}
		tiles := map[string][]int64{}
		for _, l := range strings.Split(out, "\n") {
			var r attnResult
			if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &r) == nil {
				tiles[r.name()] = append(tiles[r.name()], r.FlashTiles)
			}
		}
		name := "flash, global 2 + window 8"
		if pattern[0] == "--block-local" {
			name = "flash, block-local 16"
		}
		if len(tiles) != 2 || len(tiles["flash"]) != 2 || len(tiles[name]) != 2 || !strings.Contains(out, name) {
			t.Errorf("qkv %q: results per pattern %v, want 2 of flash and 2 of %q:\n%s", args, tiles, name, out)
		} else if tiles[name][1] >= tiles["flash"][1] {
			t.Errorf("qkv %q: n=512 %s computed %d tiles, plain flash %d", args, name, tiles[name][1], tiles["flash"][1])
		}
	}

	for _, args := range [][]string{
		{"bench", "--seq", "16", "--global-tokens", "2"},
		{"bench", "--seq", "16", "--global-tokens", "-1", "--window", "4"},
		{"bench", "--seq", "16", "--block-local", "-2"},
		{"bench", "--seq", "16", "--global-tokens", "2", "--window", "4", "--block-local", "4"},
		{"bench", "--seq", "16", "--block-local", "4", "--window", "4"},
		{"bench", "--generate", "4", "--block-local", "4"},
		{"bench", "--global-tokens", "4"},
	} {
		if code, _, stderr := qkv(args...); code != 2 || !strings.Contains(stderr, "--") {
			t.Errorf("qkv %q: exit %d, want 2: %s", args, code, stderr)
		}
	}
}
