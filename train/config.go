package train

import (
	"encoding/json"
	"fmt"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/layers"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Config is everything a training run depends on. It is saved as config.json
// in the run directory, so that eval, predict, attend and --resume rebuild the
// same model and task from the checkpoint alone.
type Config struct {
	Task TaskSpec `json:"task"`
	// Model is the decoder's configuration; Vocab and MaxLen are filled in
	// from the task.
	Model layers.StackConfig `json:"model"`
	// DType is "float32" (the default) or "float64".
	DType string `json:"dtype"`
	// Seed fixes initial weights, data and dropout: the same seed gives the
	// same losses, bit for bit.
	Seed uint64 `json:"seed"`

	Batch int `json:"batch"`
	Steps int `json:"steps"`
	// LR is the peak learning rate, reached after Warmup steps and decayed
	// along a cosine to MinLR at Steps.
	LR        float64 `json:"lr"`
	MinLR     float64 `json:"min_lr"`
	Warmup    int     `json:"warmup"`
	Optimizer string  `json:"optimizer"`
	// WeightDecay applies to AdamW only.
	WeightDecay float64 `json:"weight_decay"`
	// ClipNorm is the global gradient norm above which gradients are scaled
	// down; 0 disables clipping.
	ClipNorm float64 `json:"clip_norm"`

	// EvalEvery is how often (in steps) the held-out set is decoded.
	EvalEvery int `json:"eval_every"`
	// TestSize is the number of held-out examples, never seen in training.
	TestSize int `json:"test_size"`
	// TargetExact stops training early once exact match on the held-out set
	// reaches it; 0 never stops early.
	TargetExact float64 `json:"target_exact"`
	// CheckpointEvery is how often a checkpoint is written; the last step
	// always writes one.
	CheckpointEvery int `json:"checkpoint_every"`
}

// TaskSpec names a data task and its parameters.
type TaskSpec struct {
	Name   string          `json:"name"`
	Params data.TaskConfig `json:"params"`
}

// DefaultConfig is what `qkv train` runs without flags: a small pre-LN
// decoder on minGPT's sort demo (6 symbols over an alphabet of 3).
func DefaultConfig() Config {
	return Config{
		Task: TaskSpec{Name: "sort", Params: data.DefaultConfig("sort")},
		Model: layers.StackConfig{
			Dim: 48, Heads: 4, Layers: 2, Hidden: 192,
			Activation: layers.ActivationGELU, Positions: layers.PositionsLearned, Bias: true,
		},
		DType:           "float32",
		Seed:            1,
		Batch:           64,
		Steps:           2000,
		LR:              3e-3,
		MinLR:           3e-4,
		Warmup:          50,
		Optimizer:       "adamw",
		WeightDecay:     0.01,
		ClipNorm:        1,
		EvalEvery:       25,
		TestSize:        200,
		TargetExact:     1,
		CheckpointEvery: 500,
	}
}

// Dtype returns the tensor dtype named by DType.
func (c Config) Dtype() (tensor.Dtype, error) {
	switch c.DType {
	case "float32", "":
		return tensor.Float32, nil
	case "float64":
		return tensor.Float64, nil
	}
	return tensor.Dtype{}, fmt.Errorf("train: dtype %q: want float32 or float64", c.DType)
}

// Resolve validates c, builds its task and fills the model's Vocab and MaxLen
// from it.
func (c *Config) Resolve() (data.Task, error) {
	task, err := data.New(c.Task.Name, c.Task.Params)
	if err != nil {
		return nil, err
	}
	c.Task.Params = task.Params()
	c.Model.Vocab = task.Vocab().Size()
	c.Model.MaxLen = task.MaxLen() - 1
	dt, err := c.Dtype()
	if err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"batch", c.Batch}, {"steps", c.Steps}, {"eval_every", c.EvalEvery}, {"test_size", c.TestSize}, {"checkpoint_every", c.CheckpointEvery}} {
		if f.v <= 0 {
			return nil, fmt.Errorf("train: %s must be positive, got %d", f.name, f.v)
		}
	}
	if c.Warmup < 0 || c.Warmup > c.Steps {
		return nil, fmt.Errorf("train: warmup must be in [0, steps=%d], got %d", c.Steps, c.Warmup)
	}
	if c.LR <= 0 || c.MinLR < 0 || c.MinLR > c.LR {
		return nil, fmt.Errorf("train: want 0 <= min_lr <= lr and lr > 0, got lr=%v min_lr=%v", c.LR, c.MinLR)
	}
	if c.ClipNorm < 0 {
		return nil, fmt.Errorf("train: clip_norm must be >= 0, got %v", c.ClipNorm)
	}
	if c.TargetExact < 0 || c.TargetExact > 1 {
		return nil, fmt.Errorf("train: target_exact must be in [0, 1], got %v", c.TargetExact)
	}
	// The layers' validating constructors are the one statement of what a
	// model configuration may be; building a throwaway model asks them.
	scope, err := layers.NewScope(G.NewGraph(), dt, c.Seed)
	if err != nil {
		return nil, err
	}
	if _, err := layers.NewDecoder(scope, c.Model); err != nil {
		return nil, err
	}
	return task, nil
}

// MarshalConfig returns c as indented JSON, the content of config.json.
func MarshalConfig(c Config) ([]byte, error) { return json.MarshalIndent(c, "", "  ") }

// UnmarshalConfig parses config.json.
func UnmarshalConfig(b []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return Config{}, fmt.Errorf("train: config.json: %w", err)
	}
	return c, nil
}
