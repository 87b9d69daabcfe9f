// Package optim updates a model's parameters from their gradients: Adam and
// AdamW written over the graph's values and gradients (gorgonia's AdamW
// does not update), global-norm gradient clipping (ClipGradNorm, GradNorm,
// ZeroGrads) and the warm-up then cosine learning-rate schedule (Schedule).
//
// A library user imports it without the training loop: it depends on
// package graph, checkpoint (for the NamedTensor of State and Restore) and
// qkv's internal kernels only, not on plotting, the progress bar or file
// locks (a test in internal/layering keeps it so).
//
// Settings come whole: Config's fields are unexported, NewAdam and NewAdamW
// take every one of them and reject zero where zero used to mean
// "default", and config.OptimizerFor maps a training configuration's
// optimizer fields (its zeros to the defaults here) to a Config. New
// refuses the zero Config, so a hand-built value cannot drop a setting.
package optim
