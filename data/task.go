package data

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// Example is one instance of a task as token ids, laid out as the sequence
// Prompt SEP Answer that a decoder reads. Every position after SEP is either
// given (fed to the model, carrying no loss) or a target (carrying the loss,
// decoded greedily and scored): Given marks the given ones, and a nil Given
// makes every answer token a target. So a multi-query recall example is
// Prompt = k1 v1 … kP vP, Answer = q1 v1 q2 v2 … with the queries given, and
// a language-model example would be an empty Prompt and an Answer of targets
// only. Neither part holds PAD or SEP; MakeBatch adds them.
type Example struct {
	Prompt []int  `json:"prompt"`
	Answer []int  `json:"answer"`
	Given  []bool `json:"given,omitempty"`
}

// IsGiven reports whether answer position j is given rather than a target.
func (e Example) IsGiven(j int) bool { return j < len(e.Given) && e.Given[j] }

// Shown returns what the task's prompt is: Prompt followed by the given
// answer tokens, the input ValidatePrompt checks and Solve answers.
func (e Example) Shown() []int {
	out := append([]int(nil), e.Prompt...)
	for j, id := range e.Answer {
		if e.IsGiven(j) {
			out = append(out, id)
		}
	}
	return out
}

// Targets returns the answer tokens at target positions, the tokens Solve
// returns and evaluation scores.
func (e Example) Targets() []int {
	var out []int
	for j, id := range e.Answer {
		if !e.IsGiven(j) {
			out = append(out, id)
		}
	}
	return out
}

// clone returns a deep copy of e.
func (e Example) clone() Example {
	return Example{Prompt: slices.Clone(e.Prompt), Answer: slices.Clone(e.Answer), Given: slices.Clone(e.Given)}
}

// Task is a toy sequence task: a generator of examples, the vocabulary they
// are written in, and an exact solver that evaluation checks predictions
// against.
type Task interface {
	// Name returns the name New knows the task by, e.g. "sort".
	Name() string
	// Params returns the task's parameters in canonical form; New(Name(),
	// Params()) makes an equal task. It marshals to JSON for config files.
	Params() TaskConfig
	// Vocab returns the vocabulary of prompts and answers.
	Vocab() *Vocab
	// MaxLen returns the length of the longest prompt + SEP + answer, so a
	// model needs MaxLen()-1 positions (the last token is never an input).
	MaxLen() int
	// Frame returns the example greedy decoding fills for prompt: its
	// Prompt, and an Answer holding the given tokens where Given is true and
	// 0 at the targets. It assumes a valid prompt (see ValidatePrompt).
	Frame(prompt []int) Example
	// Generate draws one example from rng. A nil rng is replaced by a fixed
	// seed-0 generator rather than panicking.
	Generate(rng *rand.Rand) Example
	// Solve returns the correct target tokens for prompt (an example's
	// Shown), or an error if the prompt is not one the task could have
	// generated.
	Solve(prompt []int) ([]int, error)
	// ValidatePrompt reports, with an error naming the task and the offending
	// position, whether prompt is one the task could have generated.
	ValidatePrompt(prompt []int) error
	// NumPrompts returns the number of distinct valid prompts, which bounds
	// the size of a held-out test set. It is exact up to 2^53.
	NumPrompts() float64
}

// Names returns the names New accepts, sorted.
func Names() []string {
	return []string{"add", "chars", "copy", "recall", "reverse", "sort"}
}

// New returns the task called name with parameters cfg, or an error naming
// the task and the parameter at fault. Start from DefaultConfig(name).
func New(name string, cfg TaskConfig) (Task, error) {
	var (
		t   Task
		err error
	)
	// Each constructor's result goes through err first: returned directly,
	// a failed constructor's nil *sequence would become a non-nil Task
	// whose every method panics.
	switch name {
	case "copy", "reverse", "sort":
		t, err = newSequence(name, cfg)
	case "recall":
		t, err = newRecall(cfg)
	case "add":
		t, err = newAdd(cfg)
	case "chars":
		t, err = newChars(cfg)
	default:
		err = fmt.Errorf("data: unknown task %q (known tasks: %s)", name, strings.Join(Names(), ", "))
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// ParsePrompt encodes text in t's vocabulary and validates it as a prompt, the
// check a CLI makes before asking a model for the answer. A text that is not
// a prompt of t is a *PromptError.
func ParsePrompt(t Task, text string) ([]int, error) {
	if t == nil {
		return nil, fmt.Errorf("data: parse prompt: nil task")
	}
	v := t.Vocab()
	if err := v.usable(); err != nil {
		return nil, fmt.Errorf("data: task %q: parse prompt: %w", t.Name(), err)
	}
	ids, bad := v.encode(text)
	if bad >= 0 {
		return nil, promptErrorf(t.Name(), "holds %s, which is not a symbol of the task (%s)", v.describeBad(text, bad), v.knownSymbols())
	}
	if err := t.ValidatePrompt(ids); err != nil {
		return nil, err
	}
	return ids, nil
}

// taskName names t in an error message, also when t is nil.
func taskName(t Task) string {
	if t == nil {
		return "<nil>"
	}
	return t.Name()
}

// orDefault returns rng, or a seed-0 generator if rng is nil, so that
// Generate has no panic path.
func orDefault(rng *rand.Rand) *rand.Rand {
	if rng == nil {
		return rand.New(rand.NewPCG(0, 0))
	}
	return rng
}

// promptKey returns a map key identifying prompt: its ids as uvarints, which
// no two different id slices share.
func promptKey(prompt []int) string {
	return string(appendKey(make([]byte, 0, len(prompt)+1), prompt))
}

// appendKey appends prompt's key to b.
func appendKey(b []byte, prompt []int) []byte {
	for _, id := range prompt {
		b = binary.AppendUvarint(b, uint64(id))
	}
	return b
}

// appendShownKey appends to b the key of what e shows, promptKey(e.Shown()),
// without making Shown's slice.
func appendShownKey(b []byte, e Example) []byte {
	b = appendKey(b, e.Prompt)
	for j, id := range e.Answer {
		if e.IsGiven(j) {
			b = binary.AppendUvarint(b, uint64(id))
		}
	}
	return b
}

// PromptError is a prompt that a task refuses: ValidatePrompt's and
// ParsePrompt's errors about the prompt itself. Its Problem is a clause
// whose subject is the prompt, so that a command line can write the
// sentence with the prompt as typed: prompt "2 5 1" + Problem.
type PromptError struct {
	// Task is the name of the task that refused the prompt.
	Task string
	// Problem says what is wrong, e.g. "has 3 symbols, want 6".
	Problem string
}

// Error reads `data: task "sort": prompt has 3 symbols, want 6`.
func (e *PromptError) Error() string {
	return fmt.Sprintf("data: task %q: prompt %s", e.Task, e.Problem)
}

func promptErrorf(task, format string, args ...any) error {
	return &PromptError{Task: task, Problem: fmt.Sprintf(format, args...)}
}

// count writes n nouns in English: "1 symbol", "3 symbols".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// checkSymbols reports the first id of prompt outside [lo, hi), naming it in
// the vocabulary's words.
func checkSymbols(t Task, prompt []int, lo, hi int, what string) error {
	for i, id := range prompt {
		if id < lo || id >= hi {
			return promptErrorf(t.Name(), "holds %s at position %d, want %s", describe(t.Vocab(), id), i, what)
		}
	}
	return nil
}

// describe names a token id for an error message.
func describe(v *Vocab, id int) string {
	if s, err := v.Symbol(id); err == nil {
		return fmt.Sprintf("%q (id %d)", s, id)
	}
	return fmt.Sprintf("id %d (outside the vocabulary)", id)
}
