package infer

import (
	"fmt"
	"math"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
)

// EvaluateLoss scores a language model (data.IsLanguageModel) on held-out
// examples as nanoGPT's estimate_loss does: the mean cross-entropy of every
// target given the tokens before it, teacher-forced, in float64 from the
// model's logits. It also counts the targets that are the model's most
// likely token. The examples run m.B at a time; the last batch is padded
// with rows that carry no loss. A language model reads one text: m is a
// decoder-only model.
func EvaluateLoss(m *model.Model, task data.Task, examples []data.Example) (EvalResult, error) {
	if err := checkModelTask(m, task); err != nil {
		return EvalResult{}, err
	}
	if m.Arch != config.ArchDecoder {
		return EvalResult{}, fmt.Errorf("infer: evaluate loss: a %q model; a language model is decoder-only", m.Arch)
	}
	if len(examples) == 0 {
		return EvalResult{}, fmt.Errorf("infer: evaluate loss: no examples")
	}
	v := m.Logits.Shape()[2]
	var (
		sum float64 // of -log p(target)
		t   tally
	)
	for start := 0; start < len(examples); start += m.B {
		chunk := examples[start:min(start+m.B, len(examples))]
		batch, err := data.BatchFor(task, chunk)
		if err != nil {
			return EvalResult{}, err
		}
		if batch.S != m.S {
			return EvalResult{}, fmt.Errorf("infer: evaluate loss: task %s lays examples out in %d positions, the model reads %d", task.Name(), batch.S, m.S)
		}
		if batch, err = batch.PadRows(m.B, task.Vocab().PAD()); err != nil {
			return EvalResult{}, err
		}
		if err := m.SetBatch(model.Batch{Batch: batch}); err != nil {
			return EvalResult{}, err
		}
		err = m.Run(func() error {
			logits, err := graph.Float64s(m.Logits.Value()) // (B, S, V)
			if err != nil {
				return fmt.Errorf("infer: evaluate loss: logits: %w", err)
			}
			for i := range chunk {
				t.example(true)
				for j := i * m.S; j < (i+1)*m.S; j++ {
					if batch.Weights[j] == 0 {
						continue
					}
					row := logits[j*v : (j+1)*v]
					target := batch.Targets[j]
					sum += logSumExp(row) - row[target]
					t.token(argmax(row) == target)
				}
			}
			return nil
		})
		if err != nil {
			return EvalResult{}, err
		}
	}
	loss := sum / float64(t.total)
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return EvalResult{}, fmt.Errorf("infer: evaluate loss: the held-out loss is %v", loss)
	}
	r := t.result()
	r.Loss, r.BPC = loss, loss/math.Ln2
	return r, nil
}

// logSumExp returns log Σ exp(x) without overflow: the largest term is
// factored out.
func logSumExp(x []float64) float64 {
	hi := math.Inf(-1)
	for _, xi := range x {
		hi = max(hi, xi)
	}
	var s float64
	for _, xi := range x {
		s += math.Exp(xi - hi)
	}
	return hi + math.Log(s)
}
