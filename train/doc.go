// Package train trains qkv's decoder-only models on the toy tasks of package
// data: Adam and AdamW written over the graph's values and gradients
// (gorgonia's AdamW does not update), global-norm gradient clipping, warm-up
// then cosine learning-rate decay, the training loop (graph built once,
// batches bound every step), greedy autoregressive evaluation on a held-out
// set, atomic safetensors checkpoints that resume bit for bit, metrics as
// JSON lines, and PNG plots of the curves and of attention.
//
// Run is the whole job behind `qkv train`; BuildModel, LoadModel, Greedy and
// Evaluate are the pieces the other subcommands use.
package train
