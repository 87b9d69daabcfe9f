package train

import (
	"fmt"
	"path/filepath"

	"github.com/qkv-dev/qkv/data"
)

// LoadModel rebuilds the model and task of the checkpoint in dir from its
// config.json and loads its weights, compiled for inference on batches of b
// sequences. A checkpoint whose weights do not fit its config (another shape,
// a missing or extra tensor) gives an error naming the file and tensor.
func LoadModel(dir string, b int) (*Model, Config, data.Task, error) {
	ck, err := LoadCheckpoint(dir)
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
	if err := LoadParams(m.Params, ck.Weights, CheckpointFile(dir, ModelFile)); err != nil {
		m.Close()
		return nil, Config{}, nil, err
	}
	return m, cfg, task, nil
}

// LoadConfig returns the configuration of the checkpoint in dir, checked
// like the rest of the checkpoint, without building its model.
func LoadConfig(dir string) (Config, error) {
	ck, err := LoadCheckpoint(dir)
	if err != nil {
		return Config{}, err
	}
	cfg, err := UnmarshalConfig(ck.Config)
	if err != nil {
		return Config{}, fmt.Errorf("train: checkpoint %s: %w", dir, err)
	}
	return cfg, nil
}

// CheckpointFile returns the path of the file name (ModelFile, ConfigFile,
// ...) of the current checkpoint of the run directory dir: inside the folder
// its manifest names, or in dir itself for the layout before manifests. It
// reads only the manifest and is meant for messages and for other tools;
// LoadCheckpoint is what verifies the files.
func CheckpointFile(dir, name string) string {
	if current, _ := currentCheckpoint(dir); current != "" {
		return filepath.Join(dir, current, name)
	}
	return filepath.Join(dir, name)
}
