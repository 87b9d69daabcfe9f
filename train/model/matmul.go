package model

import (
	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/train/config"
)

// UseMatmul sets how the process's Linear layers multiply to m
// (graph.UseBF16Linear: on for config.MatmulBF16, off otherwise) and
// returns the function that puts back the previous setting, for a run
// (train.Run, qkv bench) to undo when it ends. Where the CPU lacks AMX,
// bf16 is a *config.Error naming the field matmul, and nothing changes.
func UseMatmul(m config.Matmul) (restore func(), err error) {
	was, err := graph.UseBF16Linear(m == config.MatmulBF16)
	if err != nil {
		return nil, &config.Error{Field: "matmul", Problem: "bf16 needs AMX: " + err.Error()}
	}
	return func() { _, _ = graph.UseBF16Linear(was) }, nil
}
