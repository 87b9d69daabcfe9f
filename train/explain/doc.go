// Package explain measures the attention tutorial's claims on qkv's own
// graph code: each claim builds a gorgonia graph from qkv's ops, runs it,
// and turns what it measured into a verdict. Nothing here recomputes the
// mathematics separately, so a claim that holds is a property of the code
// that trains qkv's models, not of a formula.
package explain
