package train

import (
	"errors"
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/infer"
	"github.com/qkv-dev/qkv/train/optim"
)

// EncDecModel is an encoder–decoder (config.ArchEncDec) compiled for
// training: the inference graph of infer.AssembleEncDec with the targets,
// the weighted cross-entropy over the answer tokens and the gradients.
type EncDecModel struct {
	*infer.EncDecModel
	Targets *graph.Targets
	Cost    *G.Node
}

// BuildEncDec builds and compiles the encoder–decoder of cfg (resolved) for
// training on batches of b examples, after checking its memory estimate.
func BuildEncDec(cfg config.Config, b int) (*EncDecModel, error) {
	if err := cfg.RequireArch(config.ArchEncDec, "BuildEncDec", "BuildModel"); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	if err := config.CheckMemory(cfg, b, cfg.Model.MaxLen, true); err != nil {
		return nil, err
	}
	net, err := infer.AssembleEncDec(cfg, b)
	if err != nil {
		return nil, err
	}
	m := &EncDecModel{EncDecModel: net}
	if m.Targets, m.Cost, err = loss(net.Graph, net.DType, b*net.St, cfg.Model.Vocab, net.Logits); err != nil {
		return nil, err
	}
	if net.VM, err = compile(net.Graph, m.Cost, net.Params); err != nil {
		return nil, err
	}
	return m, nil
}

// Step runs one optimisation step on examples (at most B): each prompt goes
// to the encoder; the decoder reads SEP and the answer but its last token
// (teacher forcing) and is trained on the next token at every target answer
// position (given ones carry no loss), the same tokens the decoder-only
// model is trained on.
func (m *EncDecModel) Step(task data.Task, examples []data.Example, opt *optim.Optimizer, o StepOptions) (StepResult, error) {
	if m == nil || m.EncDecModel == nil {
		return StepResult{}, errors.New("train: nil or unbuilt encoder-decoder: build it with BuildEncDec")
	}
	if task == nil {
		return StepResult{}, errors.New("train: nil task")
	}
	if len(examples) > m.B {
		return StepResult{}, fmt.Errorf("train: %d examples for a batch of %d", len(examples), m.B)
	}
	b, ss, st := m.B, m.Ss, m.St
	src, tgt, targets := make([]int, b*ss), make([]int, b*st), make([]int, b*st)
	srcLen, tgtLen, weights := make([]int, b), make([]int, b), make([]float64, b*st)
	for i := range srcLen {
		srcLen[i], tgtLen[i] = 1, 1 // rows no example fills: one PAD each, weight 0
	}
	for i, e := range examples {
		if len(e.Prompt) > ss || len(e.Answer) > st || len(e.Prompt) == 0 || len(e.Answer) == 0 {
			return StepResult{}, fmt.Errorf("train: example %d: prompt of %d and answer of %d tokens, want 1 to %d and 1 to %d", i, len(e.Prompt), len(e.Answer), ss, st)
		}
		copy(src[i*ss:], e.Prompt)
		tgt[i*st] = task.Vocab().SEP()
		copy(tgt[i*st+1:], e.Answer[:len(e.Answer)-1])
		copy(targets[i*st:], e.Answer)
		for t := range e.Answer {
			if !e.IsGiven(t) {
				weights[i*st+t] = 1
			}
		}
		srcLen[i], tgtLen[i] = len(e.Prompt), len(e.Answer)
	}
	if err := m.SetBatch(src, srcLen, tgt, tgtLen); err != nil {
		return StepResult{}, err
	}
	if err := m.Targets.Set(targets, weights); err != nil {
		return StepResult{}, err
	}
	return update(m.Run, m.Cost, m.Params, m.Model.Dropouts(), opt, o)
}
