// Package data generates the toy sequence tasks qkv trains on, their
// vocabularies, and padded batches with per-sequence lengths.
package data
