package model_test

import (
	"math"
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
)

// TestCachedScaleEqualsRecompute: under a scale other than dk, decoding
// with the key/value cache (Step for the decoder-only model; Step and
// AttendProjected for the encoder-decoder) gives the logits recomputing
// the whole prefix gives, within 1e-9 (float64), for fused and flash
// attention; and the scale changes the logits (the same weights under dk
// give others), so a cache that ignored it would be caught.
func TestCachedScaleEqualsRecompute(t *testing.T) {
	seqs := [][]int{{2, 3, 1}, {4, 4, 5, 6, 2, 1}, {5, 1}}
	steps := []int{5, 2, 6}
	for _, scale := range []layers.AttentionScale{layers.ScaleDModel, layers.ScaleNone} {
		for _, impl := range []layers.AttentionImpl{"", layers.AttentionFlash} {
			for _, arch := range []config.Arch{config.ArchDecoder, config.ArchEncDec} {
				name := string(scale) + "/" + string(impl) + "/" + string(arch)
				t.Run(name, func(t *testing.T) {
					cfg := config.Default()
					cfg.Arch, cfg.DType = arch, config.Float64
					cfg.Task = config.TaskSpec{Name: "copy", Params: data.TaskConfig{MinLength: 1, MaxLength: 6, Alphabet: 5}}
					cfg.Model.Dim, cfg.Model.Heads, cfg.Model.Hidden, cfg.Model.Layers = 12, 3, 20, 2
					cfg.Model.Attention, cfg.Model.AttnScale = impl, scale
					task, err := cfg.Resolve()
					if err != nil {
						t.Fatal(err)
					}
					worst := decodeWithCache(t, cfg, task.MaxLen()-1, seqs, steps).worst
					// The control: the same weights under dk give other logits.
					dkCfg := cfg
					dkCfg.Model.AttnScale = ""
					changed := maxDiff(nextLogits(t, cfg, task.MaxLen()-1, seqs), nextLogits(t, dkCfg, task.MaxLen()-1, seqs))
					if worst > 1e-9 {
						t.Errorf("cached logits differ from recomputed ones by %.3g (tolerance 1e-9)", worst)
					}
					if changed < 1e-5 { // 100 times the cache tolerance at least; randomize's small weights make scores small
						t.Errorf("the same weights under dk give logits within %.3g of scale %s: the scale changes nothing", changed, scale)
					}
					t.Logf("worst cached difference %.2g; dk differs by up to %.2g", worst, changed)
				})
			}
		}
	}
}

// nextLogits returns the next-token logits of every prompt of seqs (the
// sources, with SEP as the target, for an encoder-decoder) under cfg with
// randomize's parameters.
func nextLogits(t *testing.T, cfg config.Config, maxLen int, seqs [][]int) [][]float64 {
	t.Helper()
	var out [][]float64
	if cfg.Arch == config.ArchEncDec {
		m, err := model.Build(cfg, 2, cfg.Model.MaxLen, model.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		randomize(m.Params)
		for _, s := range seqs {
			l, err := m.NextLogits([][]int{s}, [][]int{{1}})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l[0])
		}
		return out
	}
	m, err := model.Build(cfg, 3, maxLen, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	randomize(m.Params)
	for _, s := range seqs {
		l, err := m.NextLogits(nil, [][]int{s})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l[0])
	}
	return out
}

// maxDiff is the largest |a - b| over rows of equal shape.
func maxDiff(a, b [][]float64) float64 {
	worst := 0.0
	for i := range a {
		for j := range a[i] {
			worst = max(worst, math.Abs(a[i][j]-b[i][j]))
		}
	}
	return worst
}
