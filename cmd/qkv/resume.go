package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"

	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/config"
)

// runControlFlags are the train flags that may differ from the checkpoint
// on --resume: they say how long and how observed the rest of the run is,
// not what is trained: the run continues bit for bit, or, with another
// --attention or --matmul, computes the same function to rounding (to
// bf16's, for --matmul bf16). Every other training flag given must equal
// the checkpoint's value.
var runControlFlags = map[string]bool{"steps": true, "eval-every": true, "checkpoint-every": true, "target-exact": true, "attention": true, "matmul": true}

// resumeConfig returns the configuration that resumes the run in dir: the
// checkpoint's, with the run-control flags given on the command line (fs,
// parsed) applied. --steps may not be
// below the checkpoint's step. Any other training flag given must equal
// the checkpoint's value; one that differs is refused naming both values.
// A checkpoint that cannot be read, or whose config.json is not valid, is
// reported naming the file; one too large for the memory limit (mem) is a
// usage error naming the sizes. step is the checkpoint's.
func resumeConfig(dir string, fs *flag.FlagSet, mem *memoryFlag) (cfg config.Config, step int, err error) {
	// A directory that is not there, or holds no checkpoint, is the user's
	// mistake (exit 2), as --checkpoint's; a checkpoint that cannot be read
	// is not.
	switch fi, err := os.Stat(dir); {
	case errors.Is(err, os.ErrNotExist):
		return config.Config{}, 0, fmt.Errorf("%w: --resume %s: no such directory", errUsage, dir)
	case err == nil && !fi.IsDir():
		return config.Config{}, 0, fmt.Errorf("%w: --resume %s: a file, not a run directory", errUsage, dir)
	case err == nil && !checkpoint.Exists(dir):
		return config.Config{}, 0, fmt.Errorf("%w: --resume %s: holds no checkpoint (qkv train --out DIR writes one)", errUsage, dir)
	}
	file := checkpoint.File(dir, checkpoint.ConfigFile)
	// The memory check comes before the weights are read: a checkpoint too
	// large for the limit costs nothing of its size.
	ck, cfg, err := config.LoadCheckpoint(dir, func(c *config.Config) error {
		_, tooLarge, err := mem.fits(c, config.EstimateRun, tooLargeAdvice)
		if tooLarge != "" {
			return fmt.Errorf("%w: --resume: %s: %s", errUsage, file, tooLarge)
		}
		if err != nil { // the checkpoint's config.json is wrong, not a flag
			return fmt.Errorf("%s: %w", file, err)
		}
		return nil
	})
	if errors.Is(err, errUsage) {
		return config.Config{}, 0, err
	}
	if err != nil {
		return config.Config{}, 0, fmt.Errorf("--resume: %w", err) // the error names dir
	}

	// Each flag given is applied alone to a copy of the checkpoint's
	// configuration through a flag set whose defaults are the checkpoint's
	// values; the copy must still equal the checkpoint's.
	var refuse error
	visitSet(fs, func(f *flag.Flag) {
		if refuse != nil || fs.Lookup(f.Name) == nil {
			return
		}
		switch {
		case f.Name == "out" || f.Name == "resume" || f.Name == "max-memory":
			return
		case f.Name == "preset":
			refuse = fmt.Errorf("%w: --preset starts a run from a named configuration; --resume continues the run in %s with its own config.json: give one", errUsage, dir)
			return
		case f.Name == "task":
			if f.Value.String() != cfg.Task.Name {
				refuse = mismatch(dir, f.Name, cfg.Task.Name, f.Value.String())
			}
			return
		}
		if want, task := taskFlagText(f.Name, cfg.Task.Params); task {
			if want != f.Value.String() {
				refuse = mismatch(dir, f.Name, taskAsFlags(cfg.Task), "--"+f.Name+" "+f.Value.String())
			}
			return
		}
		trial := cfg
		ref := flag.NewFlagSet("resume", flag.ContinueOnError)
		configFlags(ref, &trial)
		r := ref.Lookup(f.Name)
		if r == nil {
			return // not a training flag
		}
		if err := ref.Set(f.Name, f.Value.String()); err != nil {
			refuse = fmt.Errorf("%w: --%s: %v", errUsage, f.Name, err)
			return
		}
		if runControlFlags[f.Name] {
			cfg = trial
			return
		}
		if !reflect.DeepEqual(trial, cfg) {
			refuse = mismatch(dir, f.Name, r.DefValue, f.Value.String())
		}
	})
	if refuse != nil {
		return config.Config{}, 0, refuse
	}
	if cfg.Steps < ck.Step {
		return config.Config{}, 0, fmt.Errorf("%w: --steps %d: the checkpoint in %s is already at step %d; give a total of at least %d", errUsage, cfg.Steps, dir, ck.Step, ck.Step)
	}
	return cfg, ck.Step, nil
}

func mismatch(dir, name, ckpt, given string) error {
	return fmt.Errorf("%w: --%s: the checkpoint in %s has %s, given %s: a resumed run keeps its model, task, data and optimizer (start a new run with --out to change them)",
		errUsage, name, dir, ckpt, given)
}
