package config

import (
	"fmt"
	"math"

	"github.com/qkv-dev/qkv/train/checkpoint"
)

// Load returns the configuration of the checkpoint in the run directory dir,
// verified like the rest of the checkpoint (checksums, the weights' binding
// to it, the bounds of LoadCheckpoint), without building its model.
func Load(dir string) (Config, error) {
	_, cfg, err := LoadCheckpoint(dir, nil)
	return cfg, err
}

// LoadCheckpoint reads the checkpoint of the run directory dir as
// checkpoint.Load does, and bounds what it reads by the checkpoint's own
// configuration before reading any weights. Its config.json must be a
// configuration that resolves; check, if not nil, is given it as saved and
// may change it (resolve it, apply options) or refuse it, e.g. as too large
// for the caller's memory limit, and its error is returned as it is. Then
// model.safetensors and optimizer.safetensors may be no larger than that
// configuration's weights and Adam moments take (CheckpointLimits), and
// reading them must fit MemoryLimit. So a damaged or forged checkpoint
// that claims gigabytes, or a consistent one too large for the machine, is
// refused before anything of its size is allocated. It returns the
// configuration as check left it.
func LoadCheckpoint(dir string, check func(*Config) error) (*checkpoint.Checkpoint, Config, error) {
	var cfg Config
	limits := func(b []byte) (checkpoint.Limits, error) {
		file := checkpoint.File(dir, checkpoint.ConfigFile)
		c, err := Unmarshal(b)
		if err != nil {
			return checkpoint.Limits{}, fmt.Errorf("config: %s: %w", file, err)
		}
		if check != nil {
			if err := check(&c); err != nil {
				return checkpoint.Limits{}, err
			}
		}
		resolved := c
		if _, err := resolved.Resolve(); err != nil {
			return checkpoint.Limits{}, fmt.Errorf("config: %s: %w", file, err)
		}
		n, err := resolved.NumParams()
		if err != nil {
			return checkpoint.Limits{}, fmt.Errorf("config: %s: %w", file, err)
		}
		l := CheckpointLimits(resolved, len(b))
		if need, limit := float64(l.Model)+float64(l.Optimizer)+decodedBytes*float64(n)*3, MemoryLimit(); need > float64(limit) {
			return checkpoint.Limits{}, fmt.Errorf("config: %s: reading its checkpoint takes up to %s (the weights and Adam's moments, as read and decoded), more than the memory limit of %s",
				file, FormatBytes(need), FormatBytes(float64(limit)))
		}
		cfg = c
		return l, nil
	}
	ck, err := checkpoint.LoadWith(dir, checkpoint.LoadOptions{Limits: limits})
	if err != nil {
		return nil, Config{}, err
	}
	return ck, cfg, nil
}

// Bounds of a checkpoint's safetensors headers: the JSON of each tensor's
// name, dtype, shape and offsets, and of the metadata.
const (
	// headerPerTensor bounds one tensor's entry: a name of up to ~100
	// characters ("dec.blocks.999.cross_attn.wq.weight" and an optimizer
	// prefix), two dimensions and two offsets of up to 20 digits.
	headerPerTensor = 256
	// headerFixed bounds the 8-byte length, the braces, the padding and the
	// metadata besides the configuration (format, step, its SHA-256).
	headerFixed = 1024
	// configEscape is how many bytes JSON may write a byte of config.json
	// as inside the model file's metadata (\u00XX).
	configEscape = 6
	// tensorsPerLayer bounds the tensors of a block: an encoder-decoder's
	// decoder block has 26 (three LayerNorms, two attentions, the
	// feed-forward, all with biases), the rest of the model a few more.
	tensorsPerLayer = 32
	// decodedBytes is what a loaded value takes: NamedTensor holds float64.
	decodedBytes = 8
)

// CheckpointLimits returns the largest model.safetensors and
// optimizer.safetensors a checkpoint of cfg (resolved) can have, with a
// config.json of configSize bytes: its parameters in its dtype, and two
// float64 Adam moments per parameter, with headers of at most
// headerPerTensor bytes a tensor. They bound the files from above (the
// tests check every kind of model's files fit within them).
func CheckpointLimits(cfg Config, configSize int) checkpoint.Limits {
	elem := 4.0
	if cfg.DType == Float64 {
		elem = 8
	}
	n, err := cfg.NumParams()
	if err != nil {
		return checkpoint.Limits{} // a model the layers refuse: no file fits
	}
	p := float64(n)
	layers := float64(cfg.Model.Layers)
	if cfg.Arch == ArchEncDec {
		layers *= 2
	}
	tensors := tensorsPerLayer * (layers + 1)
	model := headerFixed + configEscape*float64(configSize) + headerPerTensor*tensors + elem*p
	optim := headerFixed + headerPerTensor*2*tensors + 2*8*p
	return checkpoint.Limits{Model: clampBytes(model), Optimizer: clampBytes(optim)}
}

// clampBytes returns n as an int64, at most math.MaxInt64.
func clampBytes(n float64) int64 {
	if n >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}
