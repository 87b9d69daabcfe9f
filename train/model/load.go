package model

import (
	"fmt"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/config"
)

// LoadOptions change how Load builds a checkpoint's model without changing
// what it computes.
type LoadOptions struct {
	// Attention, if set, replaces the implementation of attention the
	// checkpoint was trained with: all three compute the same function of
	// the same parameters (to rounding). `qkv attend` asks a flash
	// checkpoint for its weights this way, with fused attention.
	Attention layers.AttentionImpl
}

// Load rebuilds the model and task of the checkpoint in dir, of either
// architecture, from its config.json and loads its weights, compiled for
// inference on batches of b rows of the task's longest input. The memory
// the model needs is checked before the weights are read. A checkpoint
// whose weights do not fit its config (another shape, a missing or extra
// tensor) gives an error naming the file and tensor.
func Load(dir string, b int, opts LoadOptions) (*Model, config.Config, data.Task, error) {
	var task data.Task
	ck, cfg, err := config.LoadCheckpoint(dir, func(cfg *config.Config) error {
		if opts.Attention != "" {
			cfg.Model.Attention = opts.Attention
		}
		var err error
		if task, err = cfg.Resolve(); err != nil {
			return fmt.Errorf("model: checkpoint %s: config.json: %w", dir, err)
		}
		if err := checkArch(*cfg); err != nil {
			return fmt.Errorf("model: checkpoint %s: config.json: %w", dir, err)
		}
		return config.CheckMemory(*cfg, b, cfg.Model.MaxLen, false)
	})
	if err != nil {
		return nil, config.Config{}, nil, err
	}
	m, err := Build(cfg, b, task.MaxLen()-1, Options{})
	if err != nil {
		return nil, config.Config{}, nil, err
	}
	if err := checkpoint.LoadParams(m.Params, ck.Weights, checkpoint.File(dir, checkpoint.ModelFile)); err != nil {
		m.Close()
		return nil, config.Config{}, nil, err
	}
	return m, cfg, task, nil
}
