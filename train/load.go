package train

import (
	"fmt"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/train/checkpoint"
)

// LoadModel rebuilds the model and task of the checkpoint in dir from its
// config.json and loads its weights, compiled for inference on batches of b
// sequences. A checkpoint whose weights do not fit its config (another shape,
// a missing or extra tensor) gives an error naming the file and tensor.
func LoadModel(dir string, b int) (*Model, Config, data.Task, error) {
	ck, err := checkpoint.Load(dir)
	if err != nil {
		return nil, Config{}, nil, err
	}
	cfg, err := UnmarshalConfig(ck.Config)
	if err != nil {
		return nil, Config{}, nil, fmt.Errorf("train: checkpoint %s: %w", dir, err)
	}
	task, err := cfg.Resolve()
	if err != nil {
		return nil, Config{}, nil, fmt.Errorf("train: checkpoint %s: config.json: %w", dir, err)
	}
	m, err := BuildModel(cfg, b, task.MaxLen()-1, false)
	if err != nil {
		return nil, Config{}, nil, err
	}
	if err := checkpoint.LoadParams(m.Params, ck.Weights, checkpoint.File(dir, checkpoint.ModelFile)); err != nil {
		m.Close()
		return nil, Config{}, nil, err
	}
	return m, cfg, task, nil
}

// LoadConfig returns the configuration of the checkpoint in dir, checked
// like the rest of the checkpoint, without building its model.
func LoadConfig(dir string) (Config, error) {
	ck, err := checkpoint.Load(dir)
	if err != nil {
		return Config{}, err
	}
	cfg, err := UnmarshalConfig(ck.Config)
	if err != nil {
		return Config{}, fmt.Errorf("train: checkpoint %s: %w", dir, err)
	}
	return cfg, nil
}
