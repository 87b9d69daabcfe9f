// Package train trains qkv's models, decoder-only (config.ArchDecoder) and
// encoder–decoder (config.ArchEncDec), on the toy tasks of package data:
// the training models (graph built once, batches bound every step) and the
// training loop (greedy evaluation on a held-out set, checkpoints that
// resume bit for bit, metrics as JSON lines, a lock on the run directory;
// the curves are drawn by the caller's Options.Curves, the command line's
// with internal/plot, so that train does not pull in plotting).
//
// Run is the whole job behind `qkv train`. The model it trains, of either
// architecture, is package model's (model.Build with model.Options{Train:
// true}, and model.Model.Step, the one training step: forward, backward,
// clipping and the optimizer once). The packages beside it hold the rest:
// model (the model, its batches, its key/value cache, loading), optim (Adam
// and AdamW, gradient clipping, the learning-rate schedule; importable
// alone), config (what a run depends on, and config.OptimizerFor, the
// optimizer it asks for), checkpoint (weights and checkpoints on disk) and
// infer (running models forward: greedy decoding, evaluation, sampling).
package train
