package infer

import (
	"errors"
	"fmt"
	"slices"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
)

// EvalResult is the score of greedy decoding on a set of examples
// (Evaluate), or of a language model's predictions of held-out text
// (EvaluateLoss).
type EvalResult struct {
	// TokenAccuracy is the fraction of answer tokens decoded right; of a
	// language model, of targets that are its most likely next token.
	TokenAccuracy float64 `json:"token_accuracy"`
	// ExactMatch is the fraction of examples whose whole answer is right;
	// of a language model, whose every target is its most likely token.
	ExactMatch float64 `json:"exact_match"`
	// N is the number of examples scored.
	N int `json:"n"`
	// Loss is a language model's mean cross-entropy per target, in nats,
	// and BPC the same in bits (per character of a text); both are absent
	// for the other tasks.
	Loss float64 `json:"loss,omitempty"`
	// BPC is Loss in bits.
	BPC float64 `json:"bpc,omitempty"`
}

// LM is a token-level model: for each sequence of token ids it gives the
// logits of the token that follows it, reading sources[i] with sequence i
// if it is an encoder–decoder (sources is nil for a decoder-only model).
// *model.Model is one; Generate decodes with any.
type LM interface {
	NextLogits(sources, seqs [][]int) ([][]float64, error)
}

// Generate extends each sequence seqs[i] greedily by steps[i] tokens: it
// appends the most likely next token (the lowest id among ties) and asks lm
// again, until every sequence has its tokens. sources are the sources the
// sequences read, one each, for an encoder–decoder, nil otherwise. It
// returns only the new tokens, and leaves seqs as they were. Nothing stops
// a model from generating padding or separator ids: a caller that wants to
// stop at one truncates the result.
func Generate(lm LM, sources, seqs [][]int, steps []int) ([][]int, error) {
	if lm == nil {
		return nil, errors.New("infer: generate: nil model")
	}
	if len(steps) != len(seqs) {
		return nil, fmt.Errorf("infer: generate: %d step counts for %d sequences", len(steps), len(seqs))
	}
	if sources != nil && len(sources) != len(seqs) {
		return nil, fmt.Errorf("infer: generate: %d sources for %d sequences", len(sources), len(seqs))
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
		var srcs [][]int
		if sources != nil {
			srcs = make([][]int, len(open))
		}
		for k, i := range open {
			batch[k] = grown[i]
			if sources != nil {
				srcs[k] = sources[i]
			}
		}
		logits, err := lm.NextLogits(srcs, batch)
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

// Greedy decodes the answer of every prompt of task autoregressively with
// m, of either architecture. A decoder-only model reads the frame's prompt
// (task.Frame) and SEP; an encoder–decoder's encoder reads the frame's
// prompt and its decoder starts from SEP. Then each given answer token is
// fed as it is and each target is the model's most likely token, with the
// model's key/value cache (model.Model.Cached), which gives the tokens
// recomputing the prefix (Generate) gives. It returns whole answers, given
// tokens included. A target may be PAD or SEP if the model predicts them.
func Greedy(m *model.Model, task data.Task, prompts [][]int) ([][]int, error) {
	if err := checkModelTask(m, task); err != nil {
		return nil, err
	}
	frames, err := framesOf(task, prompts)
	if err != nil {
		return nil, err
	}
	sources, seqs, err := Begin(m.Arch, task, frames)
	if err != nil {
		return nil, err
	}
	c, err := m.Cached()
	if err != nil {
		return nil, err
	}
	return fill(frames, seqs, func(seqs [][]int, steps []int) ([][]int, error) {
		return c.Generate(sources, seqs, steps)
	})
}

// Begin returns what a model of architecture arch reads of frames (task's
// frames of prompts, task.Frame) before their answers: a decoder-only
// model no sources and the sequences prompt + SEP; an encoder–decoder the
// prompts as sources and the sequences SEP. It fails on a nil task and an
// architecture it does not know.
func Begin(arch config.Arch, task data.Task, frames []data.Example) (sources, seqs [][]int, err error) {
	if task == nil {
		return nil, nil, errors.New("infer: nil task")
	}
	sep := task.Vocab().SEP()
	seqs = make([][]int, len(frames))
	switch arch {
	case config.ArchEncDec:
		sources = make([][]int, len(frames))
		for i, f := range frames {
			sources[i], seqs[i] = f.Prompt, []int{sep}
		}
		return sources, seqs, nil
	case config.ArchDecoder, "":
		for i, f := range frames {
			seqs[i] = append(slices.Clone(f.Prompt), sep)
		}
		return nil, seqs, nil
	}
	return nil, nil, fmt.Errorf("infer: unknown architecture %q", arch)
}

// framesOf validates prompts and returns their frames.
func framesOf(task data.Task, prompts [][]int) ([]data.Example, error) {
	frames := make([]data.Example, len(prompts))
	for i, p := range prompts {
		if err := task.ValidatePrompt(p); err != nil {
			return nil, err
		}
		frames[i] = task.Frame(p)
	}
	return frames, nil
}

// fill decodes the targets of frames, whose sequences so far are seqs: it
// appends each run of given tokens to the sequences, then asks gen for the
// run of targets that follows, as many calls as the longest alternation
// of runs. It returns the answers, given tokens included.
func fill(frames []data.Example, seqs [][]int, gen func(seqs [][]int, steps []int) ([][]int, error)) ([][]int, error) {
	answers := make([][]int, len(frames))
	for {
		steps := make([]int, len(frames))
		more := false
		for i, f := range frames {
			for j := len(answers[i]); j < len(f.Answer) && f.IsGiven(j); j++ {
				answers[i] = append(answers[i], f.Answer[j])
				seqs[i] = append(seqs[i], f.Answer[j])
			}
			for j := len(answers[i]); j < len(f.Answer) && !f.IsGiven(j); j++ {
				steps[i]++
			}
			more = more || steps[i] > 0
		}
		if !more {
			return answers, nil
		}
		got, err := gen(seqs, steps)
		if err != nil {
			return nil, err
		}
		for i := range frames {
			answers[i] = append(answers[i], got[i]...)
			seqs[i] = append(seqs[i], got[i]...)
		}
	}
}

// Evaluate decodes every example's prompt greedily and scores the answers.
// Every example must be one of task's: a valid prompt and an answer of the
// task's length for it (the length Greedy decodes), or an error names the
// example; a shorter answer would otherwise score its few tokens alone. A
// language model (data.IsLanguageModel) has no answers to decode: it is
// scored by its loss on the examples (EvaluateLoss).
func Evaluate(m *model.Model, task data.Task, examples []data.Example) (EvalResult, error) {
	if err := checkModelTask(m, task); err != nil {
		return EvalResult{}, err
	}
	if data.IsLanguageModel(task) {
		return EvaluateLoss(m, task, examples)
	}
	if err := checkExamples(task, examples); err != nil {
		return EvalResult{}, err
	}
	got, err := Greedy(m, task, shown(examples))
	if err != nil {
		return EvalResult{}, err
	}
	return score(examples, got), nil
}

// shown returns the prompts of examples as the task reads them.
func shown(examples []data.Example) [][]int {
	prompts := make([][]int, len(examples))
	for i, e := range examples {
		prompts[i] = e.Shown()
	}
	return prompts
}

// score compares the answers got with the examples' answers at their
// target positions.
func score(examples []data.Example, got [][]int) EvalResult {
	var t tally
	for i, e := range examples {
		t.example(len(got[i]) == len(e.Answer))
		for j, tok := range e.Answer {
			if !e.IsGiven(j) {
				t.token(j < len(got[i]) && got[i][j] == tok)
			}
		}
	}
	if len(examples) == 0 {
		return EvalResult{}
	}
	return t.result()
}

// tally counts the target tokens predicted right and the examples whose
// every target token was.
type tally struct {
	right, total, exact, examples int
	all                           bool // the current example's so far
}

// example starts counting an example, which can still be exact if all.
func (t *tally) example(all bool) {
	t.end()
	t.examples++
	t.all = all
}

// token counts a target token of the current example, right if ok.
func (t *tally) token(ok bool) {
	if ok {
		t.right++
	} else {
		t.all = false
	}
	t.total++
}

// end counts the current example as exact if it is.
func (t *tally) end() {
	if t.all {
		t.exact++
	}
	t.all = false
}

// result is the fractions counted: TokenAccuracy, ExactMatch and N.
func (t *tally) result() EvalResult {
	t.end()
	return EvalResult{
		TokenAccuracy: float64(t.right) / float64(t.total),
		ExactMatch:    float64(t.exact) / float64(t.examples),
		N:             t.examples,
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
// the layout task decodes for it: its frame's prompt, answer length and
// given positions.
func checkExamples(task data.Task, examples []data.Example) error {
	if task == nil {
		return errors.New("infer: nil task")
	}
	for i, e := range examples {
		if err := task.ValidatePrompt(e.Shown()); err != nil {
			return fmt.Errorf("infer: example %d: %w", i, err)
		}
		f := task.Frame(e.Shown())
		if want := len(f.Answer); len(e.Answer) != want {
			return fmt.Errorf("infer: example %d: the answer has %d tokens, want %d (task %s's answer length for this prompt)", i, len(e.Answer), want, task.Name())
		}
		if !slices.Equal(e.Prompt, f.Prompt) || !givenEqual(e, f) {
			return fmt.Errorf("infer: example %d: its prompt and given answer positions are not task %s's layout for its prompt", i, task.Name())
		}
	}
	return nil
}

// givenEqual reports whether a and b mark the same answer positions given.
func givenEqual(a, b data.Example) bool {
	for j := range a.Answer {
		if a.IsGiven(j) != b.IsGiven(j) {
			return false
		}
	}
	return true
}

// checkModelTask checks the arguments of Greedy and Evaluate: a compiled
// model and a task.
func checkModelTask(m *model.Model, task data.Task) error {
	if err := checkModel(m); err != nil {
		return err
	}
	if task == nil {
		return errors.New("infer: nil task")
	}
	return nil
}

// checkModel reports a nil model, or one no builder compiled.
func checkModel(m *model.Model) error {
	switch {
	case m == nil:
		return errors.New("infer: nil model")
	case m.VM == nil:
		return errors.New("infer: model has no machine: build it with model.Build or model.Load")
	}
	return nil
}
