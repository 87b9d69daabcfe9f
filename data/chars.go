package data

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
)

// MaxContext bounds chars' context: the attention matrix of one sequence
// grows with its square.
const MaxContext = 8192

// chars is a character-level language model of a text (nanoGPT's
// shakespeare_char): the first int((1-val_fraction)·n) characters are
// trained on, the rest held out. An example is a window of context+1
// characters c0 … cT as an empty prompt and the answer c0 … cT with c0
// given, so the model reads BOS c0 … c(T-1) and predicts c1 … cT: T
// predictions, each from the characters before it in the window, as
// nanoGPT's x = data[i:i+T], y = data[i+1:i+T+1]. BOS (the separator's id)
// starts every window; c0 carries no loss, because predicting it from BOS
// alone would be a prediction nanoGPT does not make.
//
// The vocabulary is the training text's characters, sorted. A validation
// character the training text lacks is read as UNK (a token added only
// then) and carries no loss: no model could have learnt to predict it.
// Unknown counts them.
type chars struct {
	params TaskConfig // canonical, recorded fields included
	vocab  *Vocab
	nTrain int

	mu     sync.Mutex
	corpus *Corpus
	remap  []uint16 // corpus symbol → vocabulary id
}

// Default parameters of chars: nanoGPT's CPU context, and its split.
const (
	defaultContext     = 64
	defaultValFraction = 0.1
)

func newChars(c TaskConfig) (*chars, error) {
	const name = "chars"
	if err := onlyFields(name, c, "data", "context", "val_fraction", "chars", "sha256", "vocab", "unknown"); err != nil {
		return nil, err
	}
	if err := inRange(name, "context", c.Context, MaxContext); err != nil {
		return nil, err
	}
	if !(c.ValFraction > 0 && c.ValFraction < 1) {
		return nil, fmt.Errorf("data: task %q: val_fraction must be in (0, 1), got %v", name, c.ValFraction)
	}
	if c.Data == "" {
		c.Data = DefaultCorpus
	}
	if c.Vocab == "" {
		if c.Chars != 0 || c.SHA256 != "" || c.Unknown != 0 {
			return nil, fmt.Errorf("data: task %q: chars, sha256 and unknown are recorded with vocab, which is missing", name)
		}
		corpus, err := LoadCorpus(c.Data)
		if err != nil {
			return nil, corpusErr(err)
		}
		t := &chars{params: c}
		if err := t.attach(corpus); err != nil {
			return nil, err
		}
		return t, nil
	}
	// A recorded vocabulary: the model can be rebuilt without the text,
	// which is read (and checked) only when examples are drawn.
	if c.Chars <= 0 || len(c.SHA256) != 64 || c.Unknown < 0 {
		return nil, fmt.Errorf("data: task %q: vocab is recorded without its corpus's chars (%d, want > 0), sha256 (%q, want 64 hex digits) or with unknown %d < 0", name, c.Chars, c.SHA256, c.Unknown)
	}
	v, err := NewCharVocab([]rune(c.Vocab), c.Unknown > 0)
	if err != nil {
		return nil, err
	}
	t := &chars{params: c, vocab: v, nTrain: trainChars(c.Chars, c.ValFraction)}
	if err := t.checkSplit(c.Chars); err != nil {
		return nil, err
	}
	return t, nil
}

// corpusErr writes an error of LoadCorpus ("data: corpus PATH: ...") as
// one of the task's parameter data ("data: task "chars": data PATH: ...").
func corpusErr(err error) error {
	return fmt.Errorf("data: task %q: data %s", "chars", strings.TrimPrefix(err.Error(), "data: corpus "))
}

// trainChars is nanoGPT's split: the first int((1-f)·n) characters train.
func trainChars(n int, f float64) int { return int((1 - f) * float64(n)) }

// checkSplit reports a text of n characters whose training or validation
// part cannot hold one window.
func (t *chars) checkSplit(n int) error {
	need := t.params.Context + 1
	if t.nTrain < need || n-t.nTrain < need {
		return fmt.Errorf("data: task %q: data %s is too short: of its %s, the training part (%d) and the validation part (%d, val_fraction %v) must each hold a window of context+1 = %d characters", "chars", t.params.Data, count(n, "character"), t.nTrain, n-t.nTrain, t.params.ValFraction, need)
	}
	return nil
}

// attach makes corpus the task's text: it derives the vocabulary from the
// training part, or checks it against the recorded one, and fills in the
// recorded fields.
func (t *chars) attach(corpus *Corpus) error {
	n := corpus.Len()
	nTrain := trainChars(n, t.params.ValFraction)
	var seen []rune
	unseenSymbol := make([]bool, len(corpus.symbols))
	for i, r := range corpus.symbols {
		if corpus.first[i] < nTrain {
			seen = append(seen, r)
		} else {
			unseenSymbol[i] = true
		}
	}
	slices.Sort(seen)
	unknown := 0
	if len(seen) < len(corpus.symbols) {
		for _, id := range corpus.ids[nTrain:] {
			if unseenSymbol[id] {
				unknown++
			}
		}
	}
	got := TaskConfig{Data: t.params.Data, Context: t.params.Context, ValFraction: t.params.ValFraction,
		Chars: n, SHA256: corpus.SHA256, Vocab: string(seen), Unknown: unknown}
	if t.params.Vocab != "" && got != t.params {
		return fmt.Errorf("data: task %q: corpus %s is not the text the configuration records: %s, sha256 %s…, against %s, sha256 %s… recorded (the files changed since the run began)",
			"chars", t.params.Data, count(n, "character"), corpus.SHA256[:12], count(t.params.Chars, "character"), t.params.SHA256[:min(12, len(t.params.SHA256))])
	}
	v, err := NewCharVocab(seen, unknown > 0)
	if err != nil {
		return err
	}
	remap := make([]uint16, len(corpus.symbols))
	for i, r := range corpus.symbols {
		if unseenSymbol[i] {
			remap[i] = uint16(v.ids[CharUNKSymbol])
		} else {
			remap[i] = uint16(v.runes[r])
		}
	}
	t.params, t.vocab, t.nTrain = got, v, nTrain
	if err := t.checkSplit(n); err != nil {
		return err
	}
	t.corpus, t.remap = corpus, remap
	return nil
}

// text returns the task's corpus, reading it on first use.
func (t *chars) text() (*Corpus, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.corpus != nil {
		return t.corpus, nil
	}
	corpus, err := LoadCorpus(t.params.Data)
	if err != nil {
		return nil, corpusErr(err)
	}
	if err := t.attach(corpus); err != nil {
		return nil, err
	}
	return t.corpus, nil
}

func (t *chars) Name() string       { return "chars" }
func (t *chars) Params() TaskConfig { return t.params }
func (t *chars) Vocab() *Vocab      { return t.vocab }

// MaxLen is BOS and a window of context+1 characters.
func (t *chars) MaxLen() int { return t.params.Context + 2 }

// NumPrompts is the number of training windows.
func (t *chars) NumPrompts() float64 { return float64(t.nTrain - t.params.Context) }

// window returns the example of the window starting at character s.
func (t *chars) window(s int) Example {
	T := t.params.Context
	ex := Example{Answer: make([]int, T+1), Given: make([]bool, T+1)}
	unk := -1
	if t.params.Unknown > 0 {
		unk = t.vocab.ids[CharUNKSymbol]
	}
	for j, id := range t.corpus.ids[s : s+T+1] {
		ex.Answer[j] = int(t.remap[id])
		ex.Given[j] = j == 0 || ex.Answer[j] == unk
	}
	return ex
}

// Generate draws a window of the training text, at a start drawn
// uniformly as nanoGPT's get_batch draws it. It returns the zero Example,
// which MakeBatch refuses, if the text cannot be read: NewStream reads it
// first and reports why.
func (t *chars) Generate(rng *rand.Rand) Example {
	if _, err := t.text(); err != nil {
		return Example{}
	}
	return t.window(orDefault(rng).IntN(t.nTrain - t.params.Context))
}

// heldOut returns n windows of the validation text at evenly spaced starts
// s_k = k·(nVal-T-1)/(n-1), the first at its beginning and the last at its
// end: a fixed set, the same at every evaluation and for any reference
// that computes the same loss (tools/nanogpt).
func (t *chars) heldOut(n int) ([]Example, error) {
	corpus, err := t.text()
	if err != nil {
		return nil, err
	}
	span := int64(corpus.Len() - t.nTrain - t.params.Context - 1)
	out := make([]Example, n)
	for k := range out {
		s := int64(0)
		if n > 1 {
			s = int64(k) * span / int64(n-1)
		}
		out[k] = t.window(t.nTrain + int(s))
	}
	return out, nil
}

// Frame returns prompt as the given start of a window whose other
// characters are targets.
func (t *chars) Frame(prompt []int) Example {
	n := max(t.params.Context+1, len(prompt))
	ex := Example{Answer: make([]int, n), Given: make([]bool, n)}
	copy(ex.Answer, prompt)
	for j := range prompt {
		ex.Given[j] = true
	}
	return ex
}

// Solve refuses: a text has no one right continuation.
func (t *chars) Solve(prompt []int) ([]int, error) {
	return nil, fmt.Errorf("data: task %q: a text has no one right continuation: a language model is scored by its loss (infer.EvaluateLoss)", "chars")
}

// ValidatePrompt accepts 1 to context characters of the vocabulary.
func (t *chars) ValidatePrompt(prompt []int) error {
	if len(prompt) == 0 || len(prompt) > t.params.Context {
		return promptErrorf(t.Name(), "has %s, want 1 to %d (the context)", count(len(prompt), "character"), t.params.Context)
	}
	first := SEPID + 1
	if t.params.Unknown > 0 {
		first++ // UNK is never a character of a prompt
	}
	return checkSymbols(t, prompt, first, t.vocab.Size(), "a character of the training text")
}

// IsLanguageModel reports whether t is a language model of a text (chars):
// trained on windows of the text and scored by its loss on held-out text,
// not by decoding prompts and checking answers.
func IsLanguageModel(t Task) bool {
	_, ok := t.(*chars)
	return ok
}
