package config

import (
	"fmt"

	"github.com/qkv-dev/qkv/train/checkpoint"
)

// Load returns the configuration of the checkpoint in the run directory dir,
// verified like the rest of the checkpoint (checksums, the weights' binding
// to it), without building its model.
func Load(dir string) (Config, error) {
	ck, err := checkpoint.Load(dir)
	if err != nil {
		return Config{}, err
	}
	cfg, err := Unmarshal(ck.Config)
	if err != nil {
		return Config{}, fmt.Errorf("config: %s: %w", checkpoint.File(dir, checkpoint.ConfigFile), err)
	}
	return cfg, nil
}
