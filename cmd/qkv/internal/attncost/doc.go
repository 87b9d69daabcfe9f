// Package attncost measures what one attention layer costs — multi-head
// softmax attention, or linear attention with Config.Linear: the time of a
// forward and backward pass and the memory it takes, with the parts of that
// memory by kind — the parameters, the (B, H, n, n) attention matrices the
// graph holds (weights, scores and their gradients), and everything else
// the graph holds — beside the Go heap's measured high-water mark.
//
// `qkv bench --seq` prints its measurements; `qkv explain quadratic-cost`,
// `qkv explain memory-peak` and `qkv explain linear-cost` turn them into
// verdicts. It is a package of its own so that both measure the same way.
package attncost
