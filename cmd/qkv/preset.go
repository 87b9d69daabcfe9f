package main

import (
	"fmt"
	"strings"

	"github.com/qkv-dev/qkv/train/config"
)

// startConfig returns the configuration train and bench start from, before
// their flags apply: the preset --preset names; for --task chars alone
// nanoGPT's CPU preset, since the toy tasks' defaults would train a
// language model as a toy (a tiny model, scored every 25 steps against a
// target exact match a text cannot have); else config.Default(). The flags
// given then override it one by one.
func startConfig(args []string) (config.Config, error) {
	preset, task := flagArg(args, "preset"), flagArg(args, "task")
	switch {
	case preset != "":
		cfg, err := config.Preset(preset)
		if err != nil {
			return config.Config{}, fmt.Errorf("%w: --preset: %s", errUsage, strings.TrimPrefix(strings.TrimSuffix(err.Error(), ": "+config.ErrInvalid.Error()), "config: "))
		}
		if task != "" && task != cfg.Task.Name {
			return config.Config{}, fmt.Errorf("%w: --preset %s trains task %s, not --task %s", errUsage, preset, cfg.Task.Name, task)
		}
		return cfg, nil
	case task == "chars":
		return config.Preset(config.PresetNanoGPTCPU)
	}
	return config.Default(), nil
}

// flagArg returns the value args give the flag name (-name v, --name v,
// -name=v or --name=v; the last one given), or "" if they give none. It
// reads the command line before the flag set that depends on it exists.
func flagArg(args []string, name string) string {
	val := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		bare := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		switch {
		case bare == name && i+1 < len(args):
			val = args[i+1]
			i++
		case strings.HasPrefix(bare, name+"="):
			val = strings.TrimPrefix(bare, name+"=")
		}
	}
	return val
}
