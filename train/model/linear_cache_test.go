package model_test

import (
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
)

// TestCachedLinearEqualsRecompute: a model whose blocks are all or partly
// linear attention decodes with its recurrent state (and the softmax
// blocks' key/value caches) to the logits recomputing the prefix gives,
// within 1e-9 (float64), chunked and composed, both architectures; and an
// all-linear model keeps the same bytes whatever its context, where a
// softmax one's grow with it.
func TestCachedLinearEqualsRecompute(t *testing.T) {
	seqs := [][]int{{2, 3, 1}, {4, 4, 5, 6, 2, 1}, {5, 1}}
	steps := []int{5, 2, 6}
	build := func(kinds string, impl layers.AttentionImpl, arch config.Arch, maxLength int) config.Config {
		cfg := config.Default()
		cfg.Arch, cfg.DType = arch, config.Float64
		cfg.Task = config.TaskSpec{Name: "copy", Params: data.TaskConfig{MinLength: 1, MaxLength: maxLength, Alphabet: 5}}
		cfg.Model.Dim, cfg.Model.Heads, cfg.Model.Hidden, cfg.Model.Layers = 16, 4, 20, 2
		cfg.Model.Attention, cfg.Model.LayerKinds = impl, kinds
		cfg.Model.FeatureDim, cfg.Model.LinearChunk = 3, 2
		if _, err := cfg.Resolve(); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	for _, kinds := range []string{"linear", "linear,window:2", "softmax,linear"} {
		for _, impl := range []layers.AttentionImpl{"", layers.AttentionComposed} {
			for _, arch := range []config.Arch{config.ArchDecoder, config.ArchEncDec} {
				t.Run(kinds+"/"+string(impl)+"/"+string(arch), func(t *testing.T) {
					cfg := build(kinds, impl, arch, 6)
					r := decodeWithCache(t, cfg, cfg.Model.MaxLen, seqs, steps)
					if r.worst > 1e-9 {
						t.Errorf("cached logits differ from recomputed ones by %.3g (tolerance 1e-9)", r.worst)
					}
					t.Logf("worst cached difference %.2g; state and caches %d bytes", r.worst, r.bytes)
				})
			}
		}
	}
	for _, kinds := range []string{"linear", "softmax"} {
		short := mhaBytes(t, build(kinds, "", config.ArchDecoder, 6), config.ArchDecoder)
		long := mhaBytes(t, build(kinds, "", config.ArchDecoder, 30), config.ArchDecoder)
		if grows := long > short; grows != (kinds == "softmax") {
			t.Errorf("%s: %d bytes at a context of 13, %d at 61", kinds, short, long)
		}
	}
}
