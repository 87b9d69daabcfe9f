package infer

import (
	"errors"
	"fmt"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/graph"
)

// EvalResult is the score of greedy decoding on a set of examples.
type EvalResult struct {
	// TokenAccuracy is the fraction of answer tokens decoded right.
	TokenAccuracy float64 `json:"token_accuracy"`
	// ExactMatch is the fraction of examples whose whole answer is right.
	ExactMatch float64 `json:"exact_match"`
	N          int     `json:"n"`
}

// Greedy decodes the answer of every prompt autoregressively: it feeds
// prompt + SEP, appends the most likely next token, and repeats until the
// task's answer length. m is an inference model; prompts are decoded m.B at a
// time. The causal mask makes the PAD after the last real token invisible to
// it, so one compiled length S serves every step.
func Greedy(m *Model, task data.Task, prompts [][]int) ([][]int, error) {
	if err := checkModelTask(m, task); err != nil {
		return nil, err
	}
	vocab := task.Vocab()
	out := make([][]int, len(prompts))
	ids := make([]int, m.B*m.S)
	lengths := make([]int, m.B)
	var logits []float64
	for start := 0; start < len(prompts); start += m.B {
		chunk := prompts[start:min(start+m.B, len(prompts))]
		seqs := make([][]int, len(chunk))
		want := make([]int, len(chunk))
		steps := 0
		for i, p := range chunk {
			if err := task.ValidatePrompt(p); err != nil {
				return nil, err
			}
			seqs[i] = append(append([]int(nil), p...), vocab.SEP())
			want[i] = task.AnswerLen(p)
			steps = max(steps, want[i])
		}
		for t := 0; t < steps; t++ {
			for i := range ids {
				ids[i] = vocab.PAD()
			}
			for i := range lengths {
				lengths[i] = 0
			}
			for i, seq := range seqs {
				if len(seq) > m.S {
					return nil, fmt.Errorf("infer: greedy: sequence of %d tokens exceeds the model's %d", len(seq), m.S)
				}
				copy(ids[i*m.S:], seq)
				lengths[i] = len(seq)
			}
			if err := m.SetBatch(ids, lengths); err != nil {
				return nil, err
			}
			err := m.Run(func() (err error) {
				logits, err = graph.Float64s(m.Logits.Value())
				return err
			})
			if err != nil {
				return nil, err
			}
			v := vocab.Size()
			for i, seq := range seqs {
				if len(seq)-len(chunk[i])-1 >= want[i] {
					continue
				}
				row := logits[(i*m.S+len(seq)-1)*v : (i*m.S+len(seq))*v]
				seqs[i] = append(seq, argmax(row))
			}
		}
		for i, seq := range seqs {
			out[start+i] = seq[len(chunk[i])+1:]
		}
	}
	return out, nil
}

// Evaluate decodes every example's prompt greedily and scores the answers.
func Evaluate(m *Model, task data.Task, examples []data.Example) (EvalResult, error) {
	if err := checkModelTask(m, task); err != nil {
		return EvalResult{}, err
	}
	prompts := make([][]int, len(examples))
	for i, e := range examples {
		prompts[i] = e.Prompt
	}
	got, err := Greedy(m, task, prompts)
	if err != nil {
		return EvalResult{}, err
	}
	var right, total, exact int
	for i, e := range examples {
		all := len(got[i]) == len(e.Answer)
		for j, tok := range e.Answer {
			if j < len(got[i]) && got[i][j] == tok {
				right++
			} else {
				all = false
			}
		}
		total += len(e.Answer)
		if all {
			exact++
		}
	}
	if len(examples) == 0 {
		return EvalResult{}, nil
	}
	return EvalResult{
		TokenAccuracy: float64(right) / float64(total),
		ExactMatch:    float64(exact) / float64(len(examples)),
		N:             len(examples),
	}, nil
}

func argmax(xs []float64) int {
	best := 0
	for i, x := range xs {
		if x > xs[best] {
			best = i
		}
	}
	return best
}

// checkModelTask checks the arguments of Greedy and Evaluate: a compiled
// model and a task.
func checkModelTask(m *Model, task data.Task) error {
	if err := m.check(); err != nil {
		return err
	}
	if task == nil {
		return errors.New("infer: nil task")
	}
	return nil
}
