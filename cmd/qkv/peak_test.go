package main

import (
	"regexp"
	"strconv"
	"testing"

	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
)

// buildFor builds cfg's training model and returns it with its positions.
func buildFor(t *testing.T, cfg config.Config) (*model.Model, int) {
	t.Helper()
	task, err := cfg.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Build(cfg, cfg.Batch, task.MaxLen()-1, model.Options{Train: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, m.S
}

// TestStepFLOPs checks the count against hands: a step is 3 times
// (forward and backward) 2 operations per multiply-add of L blocks of four
// (D, D) attention projections and two feed-forward matrices and the (D, V)
// head, on B S tokens, plus each block's Q K^T and P V, B S^2 D
// multiply-adds each; tied, the head is the token embedding and counts the
// same; flash computes whole 64 x 64 tiles with a visible pair, 7 products
// of them, not 6.
func TestStepFLOPs(t *testing.T) {
	cfg := config.Default()
	cfg.Model.Dim, cfg.Model.Heads, cfg.Model.Hidden, cfg.Model.Layers, cfg.Batch = 16, 2, 40, 3, 5
	task, err := cfg.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	m, s := buildFor(t, cfg)
	d, ff, v, l, b := 16.0, 40.0, float64(task.Vocab().Size()), 3.0, 5.0
	perToken := l*(4*d*d+2*d*ff) + d*v
	want := 3 * 2 * (b*float64(s)*perToken + l*2*b*float64(s*s)*d)
	if got := stepFLOPs(m.Params, cfg, s); got != want {
		t.Errorf("stepFLOPs = %v, want %v", got, want)
	}

	// nanoGPT's preset, tied, at S = 65: 65 x 65 pairs fused; flash's two
	// query tiles, rows 0-63 and 64, see key tiles 0 and 0-1: 64*64 + 1*65.
	cfg, _ = config.Preset(config.PresetNanoGPTCPU)
	m, s = buildFor(t, cfg)
	if s != 65 {
		t.Fatalf("nanogpt-cpu: S = %d, want 65", s)
	}
	d, ff, v, l, b = 128, 512, 106, 4, 12
	proj := 6 * b * 65 * (l*(4*d*d+2*d*ff) + v*d)
	if got, want := stepFLOPs(m.Params, cfg, s), proj+l*2*b*graph.FusedCausalPairs(65, tensor.Float32)*d; got != want {
		t.Errorf("nanogpt-cpu: stepFLOPs = %v, want %v", got, want)
	}
	cfg.Model.Attention = layers.AttentionComposed
	if got, want := stepFLOPs(m.Params, cfg, s), proj+l*3*4*b*65*65*d; got != want {
		t.Errorf("nanogpt-cpu, composed: stepFLOPs = %v, want %v", got, want)
	}
	cfg.Model.Attention = layers.AttentionFlash
	if got, want := stepFLOPs(m.Params, cfg, s), proj+l*3.5*4*b*(64*64+65)*d; got != want {
		t.Errorf("nanogpt-cpu, flash: stepFLOPs = %v, want %v", got, want)
	}

	// At S = 257 the fused op under the causal mask alone computes what
	// graph.FusedCausalPairs counts (TestFusedCausalPairs); composed, and
	// fused with a window (a modifier besides Causal), all 257² pairs in
	// each of the six products.
	proj257 := proj / 65 * 257
	for _, c := range []struct {
		impl   layers.AttentionImpl
		window int
		pairs  float64
	}{
		{layers.AttentionFused, 0, graph.FusedCausalPairs(257, tensor.Float32) / 6},
		{layers.AttentionComposed, 0, 257 * 257},
		{layers.AttentionFused, 32, 257 * 257},
	} {
		cfg.Model.Attention, cfg.Model.Window = c.impl, c.window
		if got, want := stepFLOPs(m.Params, cfg, 257), proj257+l*3*4*b*c.pairs*d; got != want {
			t.Errorf("nanogpt-cpu at S = 257, %s, window %d: stepFLOPs = %v, want %v", c.impl, c.window, got, want)
		}
	}
}

// TestFlashPairs: causal tiles are the lower triangle of tiles, diagonal
// ones whole; a window drops the tiles wholly before it.
func TestFlashPairs(t *testing.T) {
	for _, c := range []struct {
		s, tile, w int
		want       float64
	}{
		{4, 1, 0, 10},                       // s(s+1)/2 with tiles of 1
		{4, 1, 2, 7},                        // 4 diagonal + 3 below it
		{128, 64, 0, 3 * 64 * 64},           // 3 of 4 tiles
		{256, 64, 64, 7 * 64 * 64},          // the diagonal and the 3 below it
		{100, 64, 0, 64*64 + 36*64 + 36*36}, // edge tiles
	} {
		if got := flashPairs(c.s, c.tile, c.w); got != c.want {
			t.Errorf("flashPairs(%d, %d, %d) = %v, want %v", c.s, c.tile, c.w, got, c.want)
		}
	}
}

// TestBenchReportsPeak: bench's line gives the step's operations, their
// rate and fractions of the measured peaks that agree with them.
func TestBenchReportsPeak(t *testing.T) {
	// Large enough that the line's rounded figures (ms/step to 0.1, GFLOP
	// to 0.001) still say something: about 0.1 GFLOP and a few ms a step.
	code, out, stderr := qkv("bench", "--task", "sort", "--length", "8", "--test-size", "8", "--dim", "64", "--heads", "2",
		"--hidden", "256", "--layers", "1", "--batch", "32", "-n", "3")
	if code != 0 {
		t.Fatalf("bench: exit %d: %s%s", code, out, stderr)
	}
	re := regexp.MustCompile(`(?m)^matrix products: +([0-9.]+) ms/step, ([0-9.]+) GFLOP/step, ([0-9.]+) GFLOP/s: ([0-9.]+)% of one core's float32 FMA peak \(([0-9.]+) GFLOP/s\), ([0-9.]+)% of (\d+) cores' \(([0-9.]+)\); (.+), (.+)$`)
	mm := re.FindStringSubmatch(out)
	if mm == nil {
		t.Fatalf("no peak line in:\n%s", out)
	}
	f := func(i int) float64 { x, _ := strconv.ParseFloat(mm[i], 64); return x }
	if f(1) <= 0 || f(2) <= 0 || f(5) <= 0 || f(8) < f(5) {
		t.Errorf("implausible: %q", mm[0])
	}
	// GFLOP/s = GFLOP/step / s/step, within what the rounding of the two
	// printed figures allows, and the percentages are of the peaks.
	lo, hi := (f(2)-0.0005)/((f(1)+0.05)/1000), (f(2)+0.0005)/(max(f(1)-0.05, 1e-9)/1000)
	if f(3) < 0.9*lo || f(3) > 1.1*hi {
		t.Errorf("%v GFLOP/s, want %v to %v: %q", f(3), lo, hi, mm[0])
	}
	// The line rounds GFLOP/s and the percentage to one decimal: allow that.
	if lo, hi := 100*(f(3)-0.05)/f(5)-0.05, 100*(f(3)+0.05)/f(5)+0.05; f(4) < 0.9*lo || f(4) > 1.1*hi {
		t.Errorf("%v%% of one core, want %v to %v: %q", f(4), lo, hi, mm[0])
	}
}
