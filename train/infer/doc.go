// Package infer runs qkv's models forward only. A decoder-only
// configuration's model is built by Build, a checkpoint's rebuilt with its
// weights by Load (or LoadWith, to choose the attention implementation);
// Greedy decodes answers and Evaluate scores a held-out set, both through
// the key/value cache (Model.Cached). An encoder–decoder
// (config.ArchEncDec) has the same set of its own: BuildEncDec, LoadEncDec,
// and EncDecModel's Greedy and Evaluate (EncDecModel.Cached).
//
// Its machines never compute or accumulate gradients, and it does not import the training loop, the plots or the progress bar, so a
// program that only runs models stays small.
package infer
