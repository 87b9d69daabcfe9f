package infer

import (
	"fmt"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/config"
)

// Load rebuilds the model and task of the checkpoint in dir from its
// config.json and loads its weights, compiled for inference on batches of b
// sequences. A checkpoint whose weights do not fit its config (another shape,
// a missing or extra tensor) gives an error naming the file and tensor.
func Load(dir string, b int) (*Model, config.Config, data.Task, error) {
	return LoadWith(dir, b, LoadOptions{})
}

// LoadOptions change how Load builds a checkpoint's model without changing
// what it computes.
type LoadOptions struct {
	// Attention, if set, replaces the implementation of attention the
	// checkpoint was trained with: all three compute the same function of
	// the same parameters (to rounding). `qkv attend` asks a flash
	// checkpoint for its weights this way, with fused attention.
	Attention layers.AttentionImpl
}

// LoadWith is Load with options.
func LoadWith(dir string, b int, opts LoadOptions) (*Model, config.Config, data.Task, error) {
	ck, cfg, task, err := readCheckpoint(dir, config.ArchDecoder, b, opts)
	if err != nil {
		return nil, config.Config{}, nil, err
	}
	m, err := Build(cfg, b, task.MaxLen()-1)
	if err != nil {
		return nil, config.Config{}, nil, err
	}
	if err := checkpoint.LoadParams(m.Params, ck.Weights, checkpoint.File(dir, checkpoint.ModelFile)); err != nil {
		m.Close()
		return nil, config.Config{}, nil, err
	}
	return m, cfg, task, nil
}

// readCheckpoint reads the checkpoint in dir and its config, which must be of
// architecture arch, with opts applied, and resolves the config's task. The
// architecture and the memory the model needs for batches of b are checked
// before the weights are read.
func readCheckpoint(dir string, arch config.Arch, b int, opts LoadOptions) (*checkpoint.Checkpoint, config.Config, data.Task, error) {
	var task data.Task
	ck, cfg, err := config.LoadCheckpoint(dir, func(cfg *config.Config) error {
		switch got := cfg.ArchOrDefault(); {
		case got == arch:
		case got == config.ArchEncDec:
			return fmt.Errorf("infer: checkpoint %s: an encoder-decoder: load it with LoadEncDec", dir)
		default:
			return fmt.Errorf("infer: checkpoint %s: a %q model, not an encoder-decoder", dir, got)
		}
		if opts.Attention != "" {
			cfg.Model.Attention = opts.Attention
		}
		var err error
		if task, err = cfg.Resolve(); err != nil {
			return fmt.Errorf("infer: checkpoint %s: config.json: %w", dir, err)
		}
		return config.CheckMemory(*cfg, b, cfg.Model.MaxLen, false)
	})
	if err != nil {
		return nil, config.Config{}, nil, err
	}
	return ck, cfg, task, nil
}

// checkArch refuses a configuration of another architecture than want, the
// one fn builds: fn would build its own model from it without a word.
// other is the function that builds it.
func checkArch(cfg config.Config, want config.Arch, fn, other string) error {
	if err := cfg.RequireArch(want, fn, other); err != nil {
		return fmt.Errorf("infer: %w", err)
	}
	return nil
}
