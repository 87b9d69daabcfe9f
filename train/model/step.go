package model

import (
	"errors"
	"fmt"
	"math"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/train/optim"
)

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

// Step runs one optimisation step on batch, of either architecture
// (BatchFor lays examples out): it binds the batch and its targets,
// resamples dropout, runs forward and backward, clips the gradients'
// global norm and lets opt update the parameters. It is the one training
// step of qkv: the loop, `qkv bench` and anyone's own loop call it alike.
// The model must be built with Options.Train. A non-finite loss or gradient
// norm returns an error wrapping ErrNonFinite and changes nothing.
func (m *Model) Step(batch Batch, opt *optim.Optimizer, o StepOptions) (StepResult, error) {
	if err := m.check(); err != nil {
		return StepResult{}, err
	}
	if m.Targets == nil || m.Cost == nil {
		return StepResult{}, errors.New("model: step: the model was built for inference: build it with Options{Train: true}")
	}
	if err := m.SetBatch(batch); err != nil {
		return StepResult{}, err
	}
	if err := m.Targets.Set(batch.Targets, batch.Weights); err != nil {
		return StepResult{}, fmt.Errorf("model: batch: targets: %w", err)
	}
	for _, d := range m.Dropouts() {
		if err := d.Resample(uint64(o.Step)); err != nil {
			return StepResult{}, fmt.Errorf("model: step: dropout: %w", err)
		}
	}
	clip := o.Clip
	if clip == 0 {
		clip = math.Inf(1)
	}
	var res StepResult
	err := m.Run(func() error {
		loss, err := graph.Float64s(m.Cost.Value())
		if err != nil {
			return fmt.Errorf("model: step: loss: %w", err)
		}
		res.Loss = loss[0]
		if res.GradNorm, err = optim.ClipGradNorm(m.Params, clip); err != nil {
			return err
		}
		if !isFinite(res.Loss) {
			return fmt.Errorf("%w loss %v", ErrNonFinite, res.Loss)
		}
		if !isFinite(res.GradNorm) {
			return fmt.Errorf("%w gradient norm %v (loss %v)", ErrNonFinite, res.GradNorm, res.Loss)
		}
		return opt.StepAfterNorm(o.LR, m.Params, res.GradNorm)
	})
	return res, err
}

func isFinite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
