package infer

import (
	"errors"
	"fmt"
	"slices"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
)

// Model is a decoder-only model compiled once for batches of B sequences of
// S tokens, forward only: its machine never computes or accumulates
// gradients. Every batch re-binds IDs and Pad and runs the same machine.
type Model struct {
	B, S    int
	DType   tensor.Dtype
	Decoder *layers.Decoder
	Params  []graph.Param
	IDs     *graph.IDs
	Pad     *graph.MaskNode
	Logits  *G.Node   // (B, S, Vocab)
	Weights []*G.Node // per layer (B, H, S, S)
	// Graph holds the nodes; a training model adds its cost to it before
	// compiling.
	Graph *G.ExprGraph
	VM    G.VM

	cfg    config.Config // what Assemble built, for the cached decoder
	cached *Cached       // built by the first Greedy, closed with the model
}

// Assemble builds the decoder of cfg (resolved) for batches of b sequences
// of s tokens as an uncompiled graph: token ids and the padding mask in,
// logits and every layer's attention weights out. It is the one decoder
// builder: Build compiles it for inference, train.BuildModel adds the cost
// and gradients first.
func Assemble(cfg config.Config, b, s int) (*Model, error) {
	if err := checkArch(cfg, config.ArchDecoder, "Assemble", "AssembleEncDec"); err != nil {
		return nil, err
	}
	g, scope, err := newGraph(cfg)
	if err != nil {
		return nil, err
	}
	dt := scope.Dtype()
	dec, err := layers.NewDecoder(scope, cfg.Model)
	if err != nil {
		return nil, err
	}
	m := &Model{B: b, S: s, DType: dt, Decoder: dec, Params: dec.Params(), Graph: g, cfg: cfg}
	if m.IDs, err = graph.NewIDs(g, b, s, cfg.Model.Vocab, "ids"); err != nil {
		return nil, err
	}
	if m.Pad, err = graph.NewMaskInput(g, dt, b, s, s, "pad"); err != nil {
		return nil, err
	}
	if m.Logits, m.Weights, err = dec.Forward(m.IDs, m.Pad); err != nil {
		return nil, err
	}
	return m, nil
}

// Build builds and compiles the decoder of cfg (resolved) for inference on
// batches of b sequences of s tokens.
//
// Before allocating anything it estimates the memory the model needs
// (config.EstimateMemory) and returns a *config.MemoryError if that exceeds
// config.MemoryLimit, instead of letting the runtime die of an
// out-of-memory fatal error. An encoder–decoder configuration is refused:
// BuildEncDec builds it.
func Build(cfg config.Config, b, s int) (*Model, error) {
	if err := checkArch(cfg, config.ArchDecoder, "Build", "BuildEncDec"); err != nil {
		return nil, err
	}
	if err := config.CheckMemory(cfg, b, s, false); err != nil {
		return nil, err
	}
	m, err := Assemble(cfg, b, s)
	if err != nil {
		return nil, err
	}
	if m.VM, err = graph.NewMachine(m.Graph); err != nil {
		return nil, err
	}
	return m, nil
}

// SetBatch binds token ids (B*S, row-major) and the key-padding mask made
// from per-row lengths for the next run.
func (m *Model) SetBatch(ids []int, lengths []int) error {
	if err := m.check(); err != nil {
		return err
	}
	if err := m.IDs.Set(ids); err != nil {
		return err
	}
	pad, err := graph.KeyPadding(lengths, m.S, m.S)
	if err != nil {
		return err
	}
	return m.Pad.Set(pad)
}

// NextLogits runs the model on seqs, any number of them, each of 1 to S
// valid token ids, m.B at a time, and returns for each the logits of the
// token that follows its last (a row of the vocabulary's size). Rows of a
// batch that seqs do not fill are left empty (length 0: every key hidden),
// and positions past a sequence's end are hidden by the causal and padding
// masks, so one compiled shape serves any batch.
func (m *Model) NextLogits(seqs [][]int) ([][]float64, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	v := m.Logits.Shape()[2]
	ids := make([]int, m.B*m.S)
	lengths := make([]int, m.B)
	out := make([][]float64, 0, len(seqs))
	for start := 0; start < len(seqs); start += m.B {
		chunk := seqs[start:min(start+m.B, len(seqs))]
		clear(ids)
		clear(lengths)
		for i, seq := range chunk {
			if len(seq) == 0 || len(seq) > m.S {
				return nil, fmt.Errorf("infer: sequence %d has %d tokens, want 1 to the model's %d", start+i, len(seq), m.S)
			}
			copy(ids[i*m.S:], seq)
			lengths[i] = len(seq)
		}
		if err := m.SetBatch(ids, lengths); err != nil {
			return nil, err
		}
		err := m.Run(func() error {
			logits, err := graph.Float64s(m.Logits.Value()) // (B, S, V)
			if err != nil {
				return err
			}
			for i, seq := range chunk {
				at := (i*m.S + len(seq) - 1) * v
				out = append(out, slices.Clone(logits[at:at+v]))
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Run executes the machine once and calls read before the machine is reset,
// since values may alias buffers the next run reuses.
func (m *Model) Run(read func() error) error {
	if err := m.check(); err != nil {
		return err
	}
	return run(m.VM, "", read)
}

// CopyParamsFrom copies every parameter value of src into m: the evaluation
// model reads the training model's current weights this way. Both must be
// of the same configuration, dtype included: a float64 model's weights are
// not converted into a float32 one (that would round them without a word),
// the error names both dtypes.
func (m *Model) CopyParamsFrom(src *Model) error {
	if err := m.check(); err != nil {
		return err
	}
	if err := src.check(); err != nil {
		return fmt.Errorf("infer: copy params from: %w", err)
	}
	return copyParams(m.Params, src.Params)
}

// Close releases the machine.
func (m *Model) Close() error {
	if err := m.check(); err != nil {
		return err
	}
	if m.cached != nil {
		m.cached.Close()
	}
	return m.VM.Close()
}

// SetParams copies the values of params, those of a model of the same
// configuration (a training model's), into m's.
func (m *Model) SetParams(params []graph.Param) error {
	if err := m.check(); err != nil {
		return err
	}
	return copyParams(m.Params, params)
}

// Cached returns the model's cached decoder (see Cached), built on first
// use and given the model's current parameter values on every call, so
// that a model whose weights change (an evaluation model during training)
// decodes with the weights it has now.
func (m *Model) Cached() (*Cached, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	if m.cached == nil {
		c, err := NewCached(m.cfg, m.B, m.Params)
		if err != nil {
			return nil, err
		}
		m.cached = c
		return c, nil
	}
	return m.cached, m.cached.SetParams(m.Params)
}

// check reports a nil Model, or one no builder made.
func (m *Model) check() error {
	switch {
	case m == nil:
		return errors.New("infer: nil model")
	case m.VM == nil || m.IDs == nil || m.Pad == nil:
		return errors.New("infer: model has no machine: build it with Build or Load")
	}
	return nil
}

// NumParams returns the number of scalar parameters.
func (m *Model) NumParams() int {
	if m == nil {
		return 0
	}
	return numParams(m.Params)
}

// numParams returns the number of scalar values of params.
func numParams(params []graph.Param) int {
	n := 0
	for _, p := range params {
		n += p.Node.Shape().TotalSize()
	}
	return n
}

// newGraph returns a new graph and the root scope of cfg's model in it,
// of cfg's dtype and seed: where every builder of this package starts, so
// that a model built twice has the same parameters.
func newGraph(cfg config.Config) (*G.ExprGraph, *layers.Scope, error) {
	dt, err := cfg.DType.Tensor()
	if err != nil {
		return nil, nil, err
	}
	g := G.NewGraph()
	scope, err := layers.NewScope(g, dt, cfg.Seed)
	if err != nil {
		return nil, nil, err
	}
	return g, scope, nil
}
