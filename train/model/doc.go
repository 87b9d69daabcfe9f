// Package model is qkv's one model: a decoder-only Transformer
// (config.ArchDecoder) or an encoder–decoder (config.ArchEncDec), as a
// configuration's Arch says, built as a gorgonia graph for inference or for
// training behind one type and one set of functions.
//
// Build compiles a configuration's model for batches of B rows of S decoder
// positions (an encoder–decoder's encoder reads the configuration's longest
// prompt besides); Assemble builds the same graph uncompiled, for a caller
// that compiles or differentiates it itself (`qkv gradcheck`); Load rebuilds
// a checkpoint's model with its weights. Built with Options.Train, a model
// has the targets, the weighted cross-entropy cost and the gradients, and
// Model.Step trains it on a Batch (Model.BatchFor lays examples out for
// either architecture). Model.NextLogits runs it on sequences, and Cached
// decodes with a key/value cache, reading an encoder–decoder's source
// through cross-attention memory computed once per prompt.
//
// What runs models forward on top of it (greedy decoding, evaluation,
// sampling, attention maps) is package infer; the training loop is package
// train. Neither is imported here.
package model
