package config

import (
	"fmt"

	"github.com/qkv-dev/qkv/train/optim"
)

// OptimizerFor returns the optimizer settings c asks for, every optimizer
// field carried over: Optimizer, Beta1 and Beta2 (0: optim.DefaultBeta1
// and optim.DefaultBeta2), WeightDecay and Decay (AdamW only; "":
// DecayWeights), with optim.DefaultEps. It is the way from a training
// configuration to an optim.Config: train.Run uses it, and a loop of one's
// own that calls it trains with the same updates, bit for bit.
func OptimizerFor(c Config) (optim.Config, error) {
	beta1, beta2 := c.Beta1, c.Beta2
	if beta1 == 0 {
		beta1 = optim.DefaultBeta1
	}
	if beta2 == 0 {
		beta2 = optim.DefaultBeta2
	}
	var (
		o   optim.Config
		err error
	)
	switch c.Optimizer {
	case OptimizerAdam:
		o, err = optim.NewAdam(beta1, beta2, optim.DefaultEps)
	case OptimizerAdamW:
		decay := c.Decay
		if decay == "" {
			decay = DecayWeights
		}
		o, err = optim.NewAdamW(beta1, beta2, optim.DefaultEps, c.WeightDecay, decay)
	default:
		return optim.Config{}, cfgErr("optimizer", "unknown optimizer %q: want %q or %q", c.Optimizer, OptimizerAdam, OptimizerAdamW)
	}
	if err != nil {
		return optim.Config{}, fmt.Errorf("config: %w: %w", ErrInvalid, err)
	}
	return o, nil
}

// ScheduleFor returns the learning-rate schedule of c: warm-up to LR over
// Warmup steps, then a cosine to MinLR at Steps.
func ScheduleFor(c Config) optim.Schedule {
	return optim.Schedule{Peak: c.LR, Min: c.MinLR, Warmup: c.Warmup, Total: c.Steps}
}
