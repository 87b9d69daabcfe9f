package train

import (
	"context"
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
)

// TestRecallLearns: multi-query recall, its loss at every value and none at
// the given queries, is learned to every query of every held-out sequence
// by a small model in a few hundred steps: decoder-only, and
// encoder-decoder with a causal encoder (the bidirectional one stalls on a
// shortcut, README's encoder-decoder section).
func TestRecallLearns(t *testing.T) {
	for _, arch := range []config.Arch{config.ArchDecoder, config.ArchEncDec} {
		t.Run(string(arch), func(t *testing.T) {
			cfg := tinyConfig()
			cfg.Arch = arch
			cfg.Task.Name, cfg.Task.Params = "recall", data.TaskConfig{Pairs: 2, Keys: 4, Values: 3, Queries: data.QueriesAll}
			cfg.Model = layers.StackConfig{
				Dim:           32,
				Heads:         2,
				Layers:        2,
				Hidden:        64,
				CausalEncoder: arch == config.ArchEncDec,
				BlockOptions:  layers.BlockOptions{Activation: layers.ActivationGELU, Bias: true},
			}
			cfg.Steps, cfg.EvalEvery, cfg.TargetExact, cfg.CheckpointEvery = 600, 25, 1, 600
			sum, err := Run(context.Background(), cfg, Options{Out: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if sum.ExactMatch != 1 {
				t.Errorf("after %d steps held-out exact match %.3f (token %.3f), want 1", sum.Steps, sum.ExactMatch, sum.TokenAccuracy)
			}
			t.Logf("held-out exact match 1 after %d steps", sum.Steps)
		})
	}
}
