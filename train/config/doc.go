// Package config is what a qkv training run depends on, as config.json
// holds it: the task, the model, the dtype, the seed, the optimizer and the
// schedule (Config), checked field by field (Validate, Resolve) with errors
// naming the field (*Error), and the memory a configuration needs before
// anything is built (EstimateMemory, MemoryLimit). Training, inference and
// the command line all read it from here.
package config
