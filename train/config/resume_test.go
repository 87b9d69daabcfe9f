package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/layers"
)

// TestContinues: a configuration continues a saved run when only the
// run-control fields differ; any other difference is an *Error naming the
// field by its config.json path and both values.
func TestContinues(t *testing.T) {
	saved := Default()
	for _, c := range []struct {
		name  string
		edit  func(*Config)
		field string // "" when it continues
	}{
		{"same", func(*Config) {}, ""},
		{"steps, eval_every, checkpoint_every, target_exact", func(c *Config) {
			c.Steps, c.EvalEvery, c.CheckpointEvery, c.TargetExact = 5000, 7, 11, 0.5
		}, ""},
		{"attention implementation", func(c *Config) { c.Model.Attention = layers.AttentionFlash }, ""},
		{"matmul", func(c *Config) { c.Matmul = MatmulBF16 }, ""},
		{"lr", func(c *Config) { c.LR *= 2 }, "lr"},
		{"attention scale", func(c *Config) { c.Model.AttnScale = layers.ScaleNone }, "model.attn_scale"},
		{"task", func(c *Config) { c.Task.Name = "copy" }, "task.name"},
		{"seed", func(c *Config) { c.Seed++ }, "seed"},
		{"dim", func(c *Config) { c.Model.Dim = 64 }, "model.dim"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Default()
			c.edit(&cfg)
			err := cfg.Continues(saved)
			if c.field == "" {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Field != c.field || !strings.Contains(err.Error(), "saved run") {
				t.Errorf("error %v, want a *Error on %s", err, c.field)
			}
		})
	}
}
