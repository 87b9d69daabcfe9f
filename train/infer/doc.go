// Package infer runs qkv's decoder-only models forward only: it builds a
// configuration's model (Build) or rebuilds a checkpoint's with its weights
// (Load), and decodes answers greedily (Greedy) or scores a held-out set
// (Evaluate). Its machines never compute or accumulate gradients, and it
// does not import the training loop, the plots or the progress bar, so a
// program that only runs models stays small.
package infer
