package decode_test

import (
	"testing"

	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
	"github.com/qkv-dev/qkv/train/model/decode"
)

// BenchmarkFeed times a step of nanoGPT's preset model (float32, the
// positions 0 … context-1 in turn) for 1 and 8 rows: ns/op is per step,
// tokens/s counts every row's token.
func BenchmarkFeed(b *testing.B) {
	for _, rows := range []int{1, 8} {
		b.Run(map[int]string{1: "rows=1", 8: "rows=8"}[rows], func(b *testing.B) {
			cfg, _ := config.Preset(config.PresetNanoGPTCPU)
			cfg.Model.Vocab, cfg.Model.MaxLen = 106, 65
			m, err := model.Build(cfg, 1, 65, model.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			fast, err := decode.New(cfg, rows, m.Params)
			if err != nil {
				b.Fatal(err)
			}
			ids := make([]int, rows)
			for b.Loop() {
				if fast.Len(0) >= fast.Context() {
					fast.Reset()
				}
				if err := fast.Feed(ids); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
