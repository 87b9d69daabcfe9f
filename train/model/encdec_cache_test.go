package model_test

import (
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
)

// TestCachedEncDecEqualsRecompute: decoding an encoder-decoder with the
// cache (the encoder once per prompt, one target token per step) gives the
// tokens running the whole model for every token gives, from logits equal
// within 1e-9 in float64, for sources of different lengths, more prompts
// than rows, pre- and post-LN and flash attention.
func TestCachedEncDecEqualsRecompute(t *testing.T) {
	srcs := [][]int{{2, 3, 4}, {5, 6, 7, 8, 2, 3}, {4}, {6, 6, 2, 5}, {3, 3}}
	steps := []int{4, 2, 6, 3, 0}
	for _, c := range []struct {
		name      string
		dt        config.DType
		postLN    bool
		attention layers.AttentionImpl
	}{
		{"float64 pre-LN", config.Float64, false, ""},
		{"float64 post-LN sinusoidal", config.Float64, true, ""},
		{"float64 flash", config.Float64, false, layers.AttentionFlash},
		{"float32", config.Float32, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Arch = config.ArchEncDec
			cfg.Task = config.TaskSpec{Name: "copy", Params: data.TaskConfig{MinLength: 1, MaxLength: 6, Alphabet: 7}}
			cfg.Model.Dim, cfg.Model.Heads, cfg.Model.Hidden, cfg.Model.Layers = 12, 3, 20, 2
			cfg.Model.PostLN, cfg.DType, cfg.Model.Attention = c.postLN, c.dt, c.attention
			if c.postLN {
				cfg.Model.Positions = layers.PositionsSinusoidal
			}
			if _, err := cfg.Resolve(); err != nil {
				t.Fatal(err)
			}
			m, err := model.Build(cfg, 2, cfg.Model.MaxLen, model.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			randomize(m.Params) // non-trivial, so no zero bias hides a difference
			cached, err := m.Cached()
			if err != nil {
				t.Fatal(err)
			}
			tol := 1e-9
			if c.dt == config.Float32 {
				tol = 1e-4
			}
			r := decodeEncDec(t, m, cached, srcs, steps)
			worst, n := r.worst, r.tokens
			if worst > tol {
				t.Errorf("cached logits differ from recomputed ones by %.3g (tolerance %g)", worst, tol)
			}
			t.Logf("%d tokens, worst logit difference %.2g", n, worst)
			if _, _, err := cached.Decode([][]int{{}}, [][]int{{1}}, []int{1}); err == nil {
				t.Error("an empty source: no error")
			}
		})
	}
}
