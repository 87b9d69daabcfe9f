// Package checkpoint reads and writes qkv's weights and checkpoints as
// safetensors files, so that nothing saved is ever lost or silently changed.
//
// A checkpoint (Save, Load) is a folder of four files in a run directory,
// named by a manifest that records each file's SHA-256; writing the
// manifest is the single step that commits it, so a crash, a full disk or a
// failed write at any instant leaves the previous checkpoint complete.
// ParamTensors and LoadParams move weights between a model's graph.Params
// and the tensors a checkpoint holds.
package checkpoint
