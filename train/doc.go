// Package train trains qkv's models, decoder-only (config.ArchDecoder) and
// encoder–decoder (config.ArchEncDec), on the toy tasks of package data: Adam and AdamW written over the graph's values and gradients
// (gorgonia's AdamW does not update), global-norm gradient clipping, warm-up
// then cosine learning-rate decay, and the training loop (graph built once,
// batches bound every step, greedy evaluation on a held-out set, checkpoints
// that resume bit for bit, metrics as JSON lines, curves as a PNG).
//
// Run is the whole job behind `qkv train`. BuildModel builds a decoder's
// training model (the one bench times) and BuildEncDec an
// encoder–decoder's; each Step runs forward, backward, clipping and the
// optimizer once. The packages beside it hold the rest: config (what a run
// depends on), checkpoint (weights and checkpoints on disk), infer (models
// that run forward only: loading, greedy decoding, evaluation) and plot.
package train
