package infer

import (
	"errors"
	"fmt"
	"slices"

	"github.com/qkv-dev/qkv/data"
)

// EvalResult is the score of greedy decoding on a set of examples.
type EvalResult struct {
	// TokenAccuracy is the fraction of answer tokens decoded right.
	TokenAccuracy float64 `json:"token_accuracy"`
	// ExactMatch is the fraction of examples whose whole answer is right.
	ExactMatch float64 `json:"exact_match"`
	N          int     `json:"n"`
}

// LM is a token-level language model: for each sequence of token ids it
// gives the logits of the token that follows it. *Model is one; Generate
// decodes with any.
type LM interface {
	NextLogits(seqs [][]int) ([][]float64, error)
}

// Generate extends each sequence seqs[i] greedily by steps[i] tokens: it
// appends the most likely next token (the lowest id among ties) and asks lm
// again, until every sequence has its tokens. It returns only the new
// tokens, and leaves seqs as they were. Nothing stops a model from
// generating padding or separator ids: a caller that wants to stop at one
// truncates the result.
func Generate(lm LM, seqs [][]int, steps []int) ([][]int, error) {
	if lm == nil {
		return nil, errors.New("infer: generate: nil model")
	}
	if len(steps) != len(seqs) {
		return nil, fmt.Errorf("infer: generate: %d step counts for %d sequences", len(steps), len(seqs))
	}
	grown := make([][]int, len(seqs))
	longest := 0
	for i, seq := range seqs {
		if steps[i] < 0 {
			return nil, fmt.Errorf("infer: generate: sequence %d: negative step count %d", i, steps[i])
		}
		grown[i] = slices.Clone(seq)
		longest = max(longest, steps[i])
	}
	for t := 0; t < longest; t++ {
		var open []int // the sequences still growing
		for i := range grown {
			if t < steps[i] {
				open = append(open, i)
			}
		}
		batch := make([][]int, len(open))
		for k, i := range open {
			batch[k] = grown[i]
		}
		logits, err := lm.NextLogits(batch)
		if err != nil {
			return nil, err
		}
		if len(logits) != len(open) {
			return nil, fmt.Errorf("infer: generate: the model gave %d rows of logits for %d sequences", len(logits), len(open))
		}
		for k, i := range open {
			grown[i] = append(grown[i], argmax(logits[k]))
		}
	}
	out := make([][]int, len(seqs))
	for i, seq := range seqs {
		out[i] = grown[i][len(seq):]
	}
	return out, nil
}

// Greedy decodes the answer of every prompt of task autoregressively: it
// feeds prompt + SEP and generates the task's answer length of tokens, with
// the model's key/value cache (Model.Cached), which gives the tokens
// recomputing the prefix (Generate) gives. The answer may hold PAD or SEP if the model predicts them.
func Greedy(m *Model, task data.Task, prompts [][]int) ([][]int, error) {
	if err := checkModelTask(m, task); err != nil {
		return nil, err
	}
	seqs := make([][]int, len(prompts))
	steps := make([]int, len(prompts))
	for i, p := range prompts {
		if err := task.ValidatePrompt(p); err != nil {
			return nil, err
		}
		seqs[i] = append(slices.Clone(p), task.Vocab().SEP())
		steps[i] = task.AnswerLen(p)
	}
	c, err := m.Cached()
	if err != nil {
		return nil, err
	}
	return c.Generate(seqs, steps)
}

// Evaluate decodes every example's prompt greedily and scores the answers.
// Every example must be one of task's: a valid prompt and an answer of the
// task's length for it (the length Greedy decodes), or an error names the
// example; a shorter answer would otherwise score its few tokens alone.
func Evaluate(m *Model, task data.Task, examples []data.Example) (EvalResult, error) {
	if err := checkModelTask(m, task); err != nil {
		return EvalResult{}, err
	}
	if err := checkExamples(task, examples); err != nil {
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
	return score(examples, got), nil
}

// score compares the answers got with the examples' answers.
func score(examples []data.Example, got [][]int) EvalResult {
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
		return EvalResult{}
	}
	return EvalResult{
		TokenAccuracy: float64(right) / float64(total),
		ExactMatch:    float64(exact) / float64(len(examples)),
		N:             len(examples),
	}
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

// checkExamples checks that every example has a valid prompt of task and
// an answer of the length task decodes for it.
func checkExamples(task data.Task, examples []data.Example) error {
	if task == nil {
		return errors.New("infer: nil task")
	}
	for i, e := range examples {
		if err := task.ValidatePrompt(e.Prompt); err != nil {
			return fmt.Errorf("infer: example %d: %w", i, err)
		}
		if want := task.AnswerLen(e.Prompt); len(e.Answer) != want {
			return fmt.Errorf("infer: example %d: the answer has %d tokens, want %d (task %s's answer length for this prompt)", i, len(e.Answer), want, task.Name())
		}
	}
	return nil
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
