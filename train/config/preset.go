package config

import (
	"fmt"
	"strings"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/layers"
)

// PresetNanoGPTCPU is nanoGPT's own configuration for a character-level
// model on a laptop CPU (its README's shakespeare_char command with
// --device=cpu): block size 64, batch 12, 4 layers of 4 heads at width
// 128, no biases, no dropout, AdamW at 1e-3 with betas (0.9, 0.99) and
// decay 0.1 on every matrix, 100 warm-up steps and a cosine to 1e-4 at
// 2,000, gradient clip 1, 20 validation batches every 250 steps.
const PresetNanoGPTCPU = "nanogpt-cpu"

// Presets returns the names Preset knows, sorted.
func Presets() []string { return []string{PresetNanoGPTCPU} }

// Preset returns the named configuration, or an error listing the known
// ones.
func Preset(name string) (Config, error) {
	switch name {
	case PresetNanoGPTCPU:
		return nanoGPTCPU(), nil
	}
	return Config{}, fmt.Errorf("config: unknown preset %q (known presets: %s): %w", name, strings.Join(Presets(), ", "), ErrInvalid)
}

// nanoGPTCPU is PresetNanoGPTCPU: nanoGPT's model (bias=False: no
// projection biases, gain-only LayerNorms, the head tied to the token
// embedding, GPT-2's initialisation) and training. Where qkv differs it
// says so: its GELU is the tanh form (nanoGPT's nn.GELU is erf's, within
// 1e-3), and every window starts with BOS, one position (and 128
// parameters) more than nanoGPT's 64, which carries no loss (data's chars
// task); PAD and BOS add two rows to the embedding.
func nanoGPTCPU() Config {
	return Config{
		Task: TaskSpec{Name: "chars", Params: data.DefaultConfig("chars")},
		Model: layers.StackConfig{
			Dim:           128,
			Heads:         4,
			Layers:        4,
			Hidden:        512,
			TieEmbeddings: true,
			Init:          layers.InitGPT2,
			BlockOptions:  layers.BlockOptions{Activation: layers.ActivationGELU, Positions: layers.PositionsLearned, BiasFreeNorm: true},
		},
		DType:       Float32,
		Seed:        1337,
		Batch:       12,
		Steps:       2000,
		LR:          1e-3,
		MinLR:       1e-4,
		Warmup:      100,
		Optimizer:   OptimizerAdamW,
		WeightDecay: 0.1,
		Decay:       DecayMatrices,
		Beta2:       0.99,
		ClipNorm:    1,
		EvalEvery:   250,
		// nanoGPT's CPU command estimates the loss on 20 batches of 12.
		TestSize:        240,
		CheckpointEvery: 500,
	}
}
