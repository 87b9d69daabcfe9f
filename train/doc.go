// Package train trains qkv models: optimizers, the training loop, evaluation,
// checkpoints and metrics.
package train
