// Package config is what a qkv training run depends on, as config.json
// holds it: the task, the model, the dtype, the seed, the optimizer and the
// schedule (Config), checked field by field (Validate, Resolve) with errors
// naming the field (*Error), the optimizer and schedule a configuration
// asks for (OptimizerFor, ScheduleFor: the way to an optim.Config), and the
// memory a configuration needs before anything is built (EstimateMemory,
// checked against MemoryLimit; reading the memory available is
// internal/memprobe's). Training, inference and the command line all read
// it from here.
package config
