package train

import (
	"errors"
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/infer"
)

// Model is a decoder compiled for training: the inference model's graph
// (infer.Assemble) with the targets, the weighted cross-entropy cost and the
// gradients of every parameter, which its machine accumulates into the
// parameters' dual values.
type Model struct {
	*infer.Model
	Targets *graph.Targets
	Cost    *G.Node
}

// BuildModel builds and compiles the decoder of cfg (resolved) for training
// on batches of b sequences of s tokens.
//
// Before allocating anything it estimates the memory the model needs
// (config.EstimateMemory) and returns a *config.MemoryError if that exceeds
// config.MemoryLimit.
func BuildModel(cfg config.Config, b, s int) (*Model, error) {
	est, err := config.EstimateMemory(cfg, b, s, true)
	if err != nil {
		return nil, err
	}
	if err := est.Check(0); err != nil {
		return nil, err
	}
	dec, err := infer.Assemble(cfg, b, s)
	if err != nil {
		return nil, err
	}
	m := &Model{Model: dec}
	if m.Targets, err = graph.NewTargets(dec.Graph, dec.DType, b*s, cfg.Model.Vocab, "targets"); err != nil {
		return nil, err
	}
	if m.Cost, err = graph.CrossEntropy(dec.Logits, m.Targets); err != nil {
		return nil, err
	}
	nodes := graph.Nodes(dec.Params)
	if _, err = G.Grad(m.Cost, nodes...); err != nil {
		return nil, fmt.Errorf("train: gradient: %w", err)
	}
	if dec.VM, err = graph.NewMachine(dec.Graph, G.BindDualValues(nodes...)); err != nil {
		return nil, err
	}
	return m, nil
}

// errNilModel is the error of a method called on a nil or zero *Model,
// which the embedded inference model's methods cannot report themselves.
var errNilModel = errors.New("train: nil or unbuilt model: build it with BuildModel")

// SetBatch binds token ids and the key-padding mask; see infer.Model.
func (m *Model) SetBatch(ids []int, lengths []int) error {
	if m == nil || m.Model == nil {
		return errNilModel
	}
	return m.Model.SetBatch(ids, lengths)
}

// Run runs forward and backward once; see infer.Model.Run.
func (m *Model) Run(read func() error) error {
	if m == nil || m.Model == nil {
		return errNilModel
	}
	return m.Model.Run(read)
}

// Close releases the machine.
func (m *Model) Close() error {
	if m == nil || m.Model == nil {
		return errNilModel
	}
	return m.Model.Close()
}

// NumParams returns the number of scalar parameters.
func (m *Model) NumParams() int {
	if m == nil || m.Model == nil {
		return 0
	}
	return m.Model.NumParams()
}
