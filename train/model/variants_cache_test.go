package model_test

import (
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
)

// TestCachedVariantsEqualRecompute: with each attention variant (RoPE,
// ALiBi and a window included, which the step reads its position for) and
// with all of them, decoding with the key/value cache gives the logits recomputing the
// prefix gives, within 1e-9 (float64), for fused and flash attention and
// both architectures; and a grouped-query model's caches take
// KVHeads/Heads of the bytes of a multi-head one's.
func TestCachedVariantsEqualRecompute(t *testing.T) {
	seqs := [][]int{{2, 3, 1}, {4, 4, 5, 6, 2, 1}, {5, 1}}
	steps := []int{5, 2, 6}
	for _, v := range []struct {
		name string
		pos  layers.PositionsKind
		v    layers.AttentionVariants
	}{
		{"gqa", "", layers.AttentionVariants{KVHeads: 2}},
		{"mqa", "", layers.AttentionVariants{KVHeads: 1}},
		{"softcap", "", layers.AttentionVariants{Softcap: 0.3}},
		{"sinks", "", layers.AttentionVariants{Sinks: true}},
		{"qk-norm", "", layers.AttentionVariants{QKNorm: true}},
		{"rope", layers.PositionsRoPE, layers.AttentionVariants{}},
		{"rope-interleaved", layers.PositionsRoPEInterleaved, layers.AttentionVariants{RoPEBase: 50}},
		{"alibi", layers.PositionsALiBi, layers.AttentionVariants{}},
		{"window", "", layers.AttentionVariants{Window: 2}},
		{"all", layers.PositionsRoPE, layers.AttentionVariants{KVHeads: 1, Softcap: 0.5, Sinks: true, QKNorm: true, Window: 3}},
		{"all, alibi", layers.PositionsALiBi, layers.AttentionVariants{KVHeads: 2, Softcap: 0.5, Sinks: true, QKNorm: true, Window: 3}},
	} {
		for _, impl := range []layers.AttentionImpl{"", layers.AttentionFlash} {
			for _, arch := range []config.Arch{config.ArchDecoder, config.ArchEncDec} {
				t.Run(v.name+"/"+string(impl)+"/"+string(arch), func(t *testing.T) {
					cfg := config.Default()
					cfg.Arch, cfg.DType = arch, config.Float64
					cfg.Task = config.TaskSpec{Name: "copy", Params: data.TaskConfig{MinLength: 1, MaxLength: 6, Alphabet: 5}}
					cfg.Model.Dim, cfg.Model.Heads, cfg.Model.Hidden, cfg.Model.Layers = 16, 4, 20, 2
					cfg.Model.Attention, cfg.Model.AttentionVariants = impl, v.v
					if v.pos != "" {
						cfg.Model.Positions = v.pos
					}
					task, err := cfg.Resolve()
					if err != nil {
						t.Fatal(err)
					}
					r := decodeWithCache(t, cfg, task.MaxLen()-1, seqs, steps)
					worst, bytes := r.worst, r.bytes
					if worst > 1e-9 {
						t.Errorf("cached logits differ from recomputed ones by %.3g (tolerance 1e-9)", worst)
					}
					mha := cfg
					mha.Model.KVHeads = 0
					g := v.v.KVHeads
					if g == 0 {
						g = cfg.Model.Heads
					}
					if want := mhaBytes(t, mha, arch) * g / cfg.Model.Heads; bytes != want {
						t.Errorf("the caches take %d bytes, want %d (%d of %d heads)", bytes, want, g, cfg.Model.Heads)
					}
					t.Logf("worst cached difference %.2g; caches %d bytes", worst, bytes)
				})
			}
		}
	}
}

// mhaBytes is CacheBytes of cfg's cached model with every head its own keys
// and values.
func mhaBytes(t *testing.T, cfg config.Config, arch config.Arch) int {
	t.Helper()
	cfg.Arch = arch
	return decodeWithCache(t, cfg, cfg.Model.MaxLen, [][]int{{2}}, []int{1}).bytes
}

// decodeWithCache builds cfg's model (resolved) with random parameters, its
// cached model for 2 rows, and decodes seqs (prompts of a decoder, sources
// of an encoder-decoder) by steps, checking every step against
// recomputation. maxLen is the decoder's longest sequence.
func decodeWithCache(t *testing.T, cfg config.Config, maxLen int, seqs [][]int, steps []int) cacheRun {
	t.Helper()
	if cfg.Arch == config.ArchEncDec {
		m, err := model.Build(cfg, 2, cfg.Model.MaxLen, model.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		randomize(m.Params)
		cached, err := m.Cached()
		if err != nil {
			t.Fatal(err)
		}
		defer cached.Close()
		return decodeEncDec(t, m, cached, seqs, steps)
	}
	m, err := model.Build(cfg, 3, maxLen, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	randomize(m.Params)
	cached, err := model.NewCached(cfg, 2, m.Params)
	if err != nil {
		t.Fatal(err)
	}
	defer cached.Close()
	return decodeDecoder(t, m, cached, seqs, steps)
}
