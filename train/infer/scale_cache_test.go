package infer_test

import (
	"math"
	"slices"
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/infer"
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
					dkCfg := cfg
					dkCfg.Model.AttnScale = ""
					worst, changed := 0.0, 0.0
					if arch == config.ArchDecoder {
						m, err := infer.Build(cfg, 3, task.MaxLen()-1)
						if err != nil {
							t.Fatal(err)
						}
						defer m.Close()
						randomize(m.Params)
						dk, err := infer.Build(dkCfg, 3, task.MaxLen()-1)
						if err != nil {
							t.Fatal(err)
						}
						defer dk.Close()
						randomize(dk.Params)
						cached, err := infer.NewCached(cfg, 2, m.Params)
						if err != nil {
							t.Fatal(err)
						}
						defer cached.Close()
						got, logits, err := cached.Decode(seqs, steps)
						if err != nil {
							t.Fatal(err)
						}
						for i, s := range seqs {
							prefix := slices.Clone(s)
							for k, tok := range got[i] {
								ref, err := m.NextLogits([][]int{prefix})
								if err != nil {
									t.Fatal(err)
								}
								other, err := dk.NextLogits([][]int{prefix})
								if err != nil {
									t.Fatal(err)
								}
								for j := range ref[0] {
									worst = max(worst, math.Abs(logits[i][k][j]-ref[0][j]))
									changed = max(changed, math.Abs(other[0][j]-ref[0][j]))
								}
								prefix = append(prefix, tok)
							}
						}
					} else {
						m, err := infer.BuildEncDec(cfg, 2)
						if err != nil {
							t.Fatal(err)
						}
						defer m.Close()
						randomize(m.Params)
						dk, err := infer.BuildEncDec(dkCfg, 2)
						if err != nil {
							t.Fatal(err)
						}
						defer dk.Close()
						randomize(dk.Params)
						cached, err := m.Cached()
						if err != nil {
							t.Fatal(err)
						}
						srcs := [][]int{{2, 3, 4}, {5, 6, 2, 3}, {4}}
						prefixes := [][]int{{1}, {1}, {1}}
						got, logits, err := cached.Decode(srcs, prefixes, steps)
						if err != nil {
							t.Fatal(err)
						}
						for i := range srcs {
							tgt := []int{1}
							for k, tok := range got[i] {
								ref, err := m.NextLogits([][]int{srcs[i]}, [][]int{tgt})
								if err != nil {
									t.Fatal(err)
								}
								other, err := dk.NextLogits([][]int{srcs[i]}, [][]int{tgt})
								if err != nil {
									t.Fatal(err)
								}
								for j := range ref[0] {
									worst = max(worst, math.Abs(logits[i][k][j]-ref[0][j]))
									changed = max(changed, math.Abs(other[0][j]-ref[0][j]))
								}
								tgt = append(tgt, tok)
							}
						}
					}
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
