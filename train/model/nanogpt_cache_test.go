package model_test

import (
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
)

// TestCachedTiedEqualsRecompute: a decoder whose head is its token
// embedding, with bias-free LayerNorms, GPT-2's init and no biases,
// decodes with the key/value cache to the logits recomputing the prefix
// gives, within 1e-9 (float64), for fused and flash attention: the cached
// step's head is the same tied table (a cached model without it would fail
// to build, a wrong one would differ). The encoder–decoder takes the
// bias-free norm and the init (it refuses tying).
func TestCachedTiedEqualsRecompute(t *testing.T) {
	seqs := [][]int{{2, 3, 1}, {4, 4, 5, 6, 2, 1}, {5, 1}}
	steps := []int{5, 2, 6}
	for _, impl := range []layers.AttentionImpl{"", layers.AttentionFlash} {
		for _, arch := range []config.Arch{config.ArchDecoder, config.ArchEncDec} {
			t.Run(string(impl)+"/"+string(arch), func(t *testing.T) {
				cfg := config.Default()
				cfg.Arch, cfg.DType = arch, config.Float64
				cfg.Task = config.TaskSpec{Name: "copy", Params: data.TaskConfig{MinLength: 1, MaxLength: 6, Alphabet: 5}}
				cfg.Model.Dim, cfg.Model.Heads, cfg.Model.Hidden, cfg.Model.Layers = 16, 4, 20, 2
				cfg.Model.Attention, cfg.Model.Bias = impl, false
				cfg.Model.TieEmbeddings = arch == config.ArchDecoder
				cfg.Model.BiasFreeNorm, cfg.Model.Init = true, layers.InitGPT2
				task, err := cfg.Resolve()
				if err != nil {
					t.Fatal(err)
				}
				if arch == config.ArchDecoder {
					m, err := model.Build(cfg, 1, cfg.Model.MaxLen, model.Options{})
					if err != nil {
						t.Fatal(err)
					}
					for _, p := range m.Params {
						if p.Name == "head.w" || p.Name == "head.b" || p.Name == "ln_f.bias" {
							t.Errorf("the tied, bias-free model has %s", p.Name)
						}
					}
					m.Close()
				}
				r := decodeWithCache(t, cfg, task.MaxLen()-1, seqs, steps)
				if r.worst > 1e-9 {
					t.Errorf("cached logits differ from recomputed ones by %.3g (tolerance 1e-9)", r.worst)
				}
				t.Logf("worst cached difference %.2g", r.worst)
			})
		}
	}
}
