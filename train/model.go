package train

import (
	"errors"
	"fmt"
	"math"
	"runtime"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/infer"
	"github.com/qkv-dev/qkv/train/optim"
)

// Model is a decoder compiled for training: the inference model's graph
// (infer.Assemble) with the targets, the weighted cross-entropy cost and the
// gradient of every parameter, which p.Node.Grad() returns after a run.
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
	if err := cfg.RequireArch(config.ArchDecoder, "BuildModel", "BuildEncDec"); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	if err := config.CheckMemory(cfg, b, s, true); err != nil {
		return nil, err
	}
	m, err := Assemble(cfg, b, s)
	if err != nil {
		return nil, err
	}
	if m.VM, err = compile(m.Graph, m.Cost, m.Params); err != nil {
		return nil, err
	}
	return m, nil
}

// compile differentiates cost with respect to params and compiles g: each
// parameter's gradient is then the value of its gradient node, where
// p.Node.Grad() and the optimizer read it. BuildModel and BuildEncDec alike.
func compile(g *G.ExprGraph, cost *G.Node, params []graph.Param) (G.VM, error) {
	if _, err := G.Grad(cost, graph.Nodes(params)...); err != nil {
		return nil, fmt.Errorf("train: gradient: %w", err)
	}
	m, err := graph.NewMachine(g)
	if err != nil {
		return nil, err
	}
	// Backward has independent ops throughout (every projection's input
	// and weight gradients): both cores run them.
	m.RunConcurrently(runtime.GOMAXPROCS(0))
	return m, nil
}

// loss returns the targets of n positions over vocab tokens and the
// weighted cross-entropy of logits against them, in g.
func loss(g *G.ExprGraph, dt tensor.Dtype, n, vocab int, logits *G.Node) (*graph.Targets, *G.Node, error) {
	targets, err := graph.NewTargets(g, dt, n, vocab, "targets")
	if err != nil {
		return nil, nil, err
	}
	cost, err := graph.CrossEntropy(logits, targets)
	if err != nil {
		return nil, nil, err
	}
	return targets, cost, nil
}

// Assemble builds the training graph of cfg (resolved) for b sequences of s
// tokens without compiling it: the decoder of infer.Assemble, the targets
// and the weighted cross-entropy cost (the mean over all weighted tokens of
// the batch). BuildModel adds the gradients and compiles it; a gradient
// check runs it as it is.
func Assemble(cfg config.Config, b, s int) (*Model, error) {
	if err := cfg.RequireArch(config.ArchDecoder, "Assemble", "BuildEncDec"); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	dec, err := infer.Assemble(cfg, b, s)
	if err != nil {
		return nil, err
	}
	m := &Model{Model: dec}
	if m.Targets, m.Cost, err = loss(dec.Graph, dec.DType, b*s, cfg.Model.Vocab, dec.Logits); err != nil {
		return nil, err
	}
	return m, nil
}

// ErrNonFinite is returned (wrapped) by Step when the loss or the gradient
// norm is NaN or infinite; the parameters are left unchanged.
var ErrNonFinite = errors.New("non-finite")

// StepOptions are the settings of one training step.
type StepOptions struct {
	// LR is the learning rate of this update.
	LR float64
	// Clip is the global gradient norm above which gradients are scaled
	// down; 0 turns clipping off.
	Clip float64
	// Step numbers the update from 0; it seeds the dropout masks, so that a
	// resumed run draws the masks it would have drawn.
	Step int
}

// StepResult is what one training step measured.
type StepResult struct {
	// Loss is the batch's cross-entropy before the update.
	Loss float64
	// GradNorm is the global gradient norm before clipping.
	GradNorm float64
}

// Step runs one optimisation step on batch: it binds the batch, resamples
// dropout, runs forward and backward, clips the gradients' global norm and
// lets opt update the parameters. It is the one training step of qkv: the
// loop, `qkv bench` and anyone's own loop call it alike. A non-finite loss or
// gradient norm returns an error wrapping ErrNonFinite and changes nothing.
func (m *Model) Step(batch data.Batch, opt *optim.Optimizer, o StepOptions) (StepResult, error) {
	if m == nil || m.Model == nil {
		return StepResult{}, errNilModel
	}
	if err := m.SetBatch(batch.Inputs, batch.Lengths); err != nil {
		return StepResult{}, err
	}
	if err := m.Targets.Set(batch.Targets, batch.Weights); err != nil {
		return StepResult{}, err
	}
	return update(m.Run, m.Cost, m.Params, m.Decoder.Dropouts(), opt, o)
}

// update is the second half of every training step, the inputs bound:
// resample dropout, run forward and backward, clip the gradients' global
// norm and let opt update the parameters, or report a non-finite loss or
// norm (ErrNonFinite) and change nothing.
func update(run func(func() error) error, cost *G.Node, params []graph.Param, dropouts []*graph.Dropout, opt *optim.Optimizer, o StepOptions) (StepResult, error) {
	for _, d := range dropouts {
		if err := d.Resample(uint64(o.Step)); err != nil {
			return StepResult{}, err
		}
	}
	clip := o.Clip
	if clip == 0 {
		clip = math.Inf(1)
	}
	var res StepResult
	err := run(func() error {
		loss, err := graph.Float64s(cost.Value())
		if err != nil {
			return err
		}
		res.Loss = loss[0]
		if res.GradNorm, err = optim.ClipGradNorm(params, clip); err != nil {
			return err
		}
		if !isFinite(res.Loss) {
			return fmt.Errorf("%w loss %v", ErrNonFinite, res.Loss)
		}
		if !isFinite(res.GradNorm) {
			return fmt.Errorf("%w gradient norm %v (loss %v)", ErrNonFinite, res.GradNorm, res.Loss)
		}
		return opt.Step(o.LR)
	})
	return res, err
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
