// Package infer runs qkv's models forward only, whichever their
// architecture: the one model type of package model, built by model.Build
// or loaded from a checkpoint by model.Load. Greedy decodes answers and
// Evaluate scores a held-out set, both through the model's key/value cache
// (model.Model.Cached); EvaluateLoss scores a language model by its loss;
// Generate extends sequences with any LM; Stream and Sampler continue a
// text token by token; Attention returns every attention layer's weights.
//
// Its models never compute or accumulate gradients, and it does not import
// the training loop, the plots or the progress bar, so a program that only
// runs models stays small.
package infer
