package main

import (
	"fmt"
	"io"
	"time"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/train"
)

func runBench(args []string, stdout, stderr io.Writer) error {
	cfg := train.DefaultConfig()
	fs := newFlags("bench", "[flags]", stderr)
	resolveTask := configFlags(fs, &cfg)
	steps := fs.Int("n", 30, "timed training steps (after 3 untimed)")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	resolveTask()
	task, err := cfg.Resolve()
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	m, err := train.BuildModel(cfg, cfg.Batch, task.MaxLen()-1, true)
	if err != nil {
		return err
	}
	defer m.Close()
	opt, err := train.NewOptimizer(train.OptimizerConfig{Kind: cfg.Optimizer, WeightDecay: cfg.WeightDecay}, m.Params)
	if err != nil {
		return err
	}
	stream, err := data.NewStream(task, cfg.Seed, cfg.TestSize)
	if err != nil {
		return err
	}
	step := func() error {
		batch, err := data.BatchFor(task, stream.Take(cfg.Batch))
		if err != nil {
			return err
		}
		if err := m.SetBatch(batch.Inputs, batch.Lengths); err != nil {
			return err
		}
		if err := m.Targets.Set(batch.Targets, batch.Weights); err != nil {
			return err
		}
		return m.Run(func() error {
			if _, err := train.ClipGradNorm(m.Params, 1); err != nil {
				return err
			}
			return opt.Step(cfg.LR)
		})
	}
	for i := 0; i < 3; i++ {
		if err := step(); err != nil {
			return err
		}
	}
	start := time.Now()
	for i := 0; i < *steps; i++ {
		if err := step(); err != nil {
			return err
		}
	}
	per := time.Since(start) / time.Duration(*steps)
	fmt.Fprintf(stdout, "%s %s, %s, B=%d S=%d D=%d H=%d L=%d FF=%d, %d params: %.1f ms/step, %.0f tokens/s\n",
		cfg.Task.Name, cfg.Task.Params, cfg.DType, cfg.Batch, m.S, cfg.Model.Dim, cfg.Model.Heads, cfg.Model.Layers, cfg.Model.Hidden,
		m.NumParams(), float64(per.Microseconds())/1000, float64(cfg.Batch*m.S)/per.Seconds())
	return nil
}
