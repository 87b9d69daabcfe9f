// Package train trains qkv's models, decoder-only (config.ArchDecoder) and
// encoder–decoder (config.ArchEncDec), on the toy tasks of package data:
// the training models (graph built once, batches bound every step) and the
// training loop (greedy evaluation on a held-out set, checkpoints that
// resume bit for bit, metrics as JSON lines, a lock on the run directory;
// the curves are drawn by the caller's Options.Curves, the command line's
// with internal/plot, so that train does not pull in plotting).
//
// Run is the whole job behind `qkv train`. BuildModel builds a decoder's
// training model (the one bench times) and BuildEncDec an
// encoder–decoder's; each Step runs forward, backward, clipping and the
// optimizer once. The packages beside it hold the rest: optim (Adam and
// AdamW, gradient clipping, the learning-rate schedule; importable alone),
// config (what a run depends on, and config.OptimizerFor, the optimizer it
// asks for), checkpoint (weights and checkpoints on disk) and infer (models
// that run forward only: loading, greedy decoding, evaluation).
package train
