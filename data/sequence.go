package data

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// sequence is the copy, reverse and sort tasks: a prompt of n symbols over an
// alphabet of k, n fixed or drawn from [minLen, maxLen], and an answer of the
// same length computed from it. The three differ only in that computation.
type sequence struct {
	name           string
	minLen, maxLen int
	k              int
	vocab          *Vocab
}

// firstSymbol is the id of the first task symbol in every vocabulary: the
// task symbols follow PAD and SEP.
const firstSymbol = 2

func newSequence(name string, c TaskConfig) (*sequence, error) {
	if err := onlyFields(name, c, "length", "min_length", "max_length", "alphabet"); err != nil {
		return nil, err
	}
	lo, hi, err := resolveRange(name, "length", c.Length, c.MinLength, c.MaxLength, MaxSeqLength)
	if err != nil {
		return nil, err
	}
	if err := inRange(name, "alphabet", c.Alphabet, MaxAlphabet); err != nil {
		return nil, err
	}
	if c.Alphabet < 2 {
		// One symbol leaves one prompt per length with a forced answer:
		// nothing to learn, and no prompt of a fixed length to hold out.
		return nil, fmt.Errorf("data: task %q: alphabet must be at least 2, got %d: with one symbol every prompt of a length is the same", name, c.Alphabet)
	}
	syms := make([]string, c.Alphabet)
	for i := range syms {
		syms[i] = alphabetSymbols[i : i+1]
	}
	v, err := newVocab(name, syms)
	if err != nil {
		return nil, err
	}
	return &sequence{name: name, minLen: lo, maxLen: hi, k: c.Alphabet, vocab: v}, nil
}

// Name returns "copy", "reverse" or "sort".
func (s *sequence) Name() string { return s.name }

// Params returns the length (or length range) and alphabet.
func (s *sequence) Params() TaskConfig {
	var c TaskConfig
	c.Length, c.MinLength, c.MaxLength = rangeConfig(s.minLen, s.maxLen)
	c.Alphabet = s.k
	return c
}

// Vocab returns PAD, SEP and the k symbols.
func (s *sequence) Vocab() *Vocab { return s.vocab }

// MaxLen is the longest prompt, SEP, and an answer as long as the prompt.
func (s *sequence) MaxLen() int { return 2*s.maxLen + 1 }

// Frame has as many targets as the prompt has symbols: every answer is a
// rearrangement.
func (s *sequence) Frame(prompt []int) Example {
	return Example{Prompt: prompt, Answer: make([]int, len(prompt))}
}

// Generate draws a length uniformly from the range, then each symbol
// uniformly from the alphabet.
func (s *sequence) Generate(rng *rand.Rand) Example { return s.generateIn(rng, nil) }

// generateIn is Generate with the prompt and answer carved from a.
func (s *sequence) generateIn(rng *rand.Rand, a *intArena) Example {
	rng = orDefault(rng)
	n := s.minLen
	if s.maxLen > s.minLen {
		n += rng.IntN(s.maxLen - s.minLen + 1)
	}
	both := a.ints(2 * n)
	p := both[:n:n]
	for i := range p {
		p[i] = firstSymbol + rng.IntN(s.k)
	}
	return Example{Prompt: p, Answer: s.answer(both[n:], p)}
}

// answer writes the answer of a valid prompt p into a, as long as p, and
// returns it. Symbol ids increase with the symbols' order, so sorting ids
// sorts symbols.
func (s *sequence) answer(a, p []int) []int {
	copy(a, p)
	switch s.name {
	case "reverse":
		slices.Reverse(a)
	case "sort":
		slices.Sort(a)
	}
	return a
}

// CanHoldOut reports whether a prompt may go to the held-out set. For sort,
// a constant prompt ("0 0 0 0 0 0") is the only prompt with its symbol
// counts, so no training prompt shows the model that answer or those counts:
// holding it out would test extrapolation, not generalisation. Every other
// sort answer is shared by several prompts, and copy and reverse answers
// follow the prompt symbol by symbol, so those may all be held out.
func (s *sequence) CanHoldOut(prompt []int) bool {
	if s.name != "sort" {
		return true
	}
	for _, id := range prompt {
		if id != prompt[0] {
			return true
		}
	}
	return false
}

// Solve returns the copied, reversed or sorted prompt.
func (s *sequence) Solve(prompt []int) ([]int, error) {
	if err := s.ValidatePrompt(prompt); err != nil {
		return nil, err
	}
	return s.answer(make([]int, len(prompt)), prompt), nil
}

// ValidatePrompt checks the length against the range and that every token is
// one of the k symbols.
func (s *sequence) ValidatePrompt(prompt []int) error {
	if n := len(prompt); n < s.minLen || n > s.maxLen {
		if s.minLen == s.maxLen {
			return promptErrorf(s.name, "has %s, want %d", count(n, "symbol"), s.minLen)
		}
		return promptErrorf(s.name, "has %s, want %d to %d", count(n, "symbol"), s.minLen, s.maxLen)
	}
	return checkSymbols(s, prompt, firstSymbol, firstSymbol+s.k, fmt.Sprintf("one of the %d symbols %s", s.k, s.vocab.Decode(s.symbolIDs())))
}

func (s *sequence) symbolIDs() []int {
	ids := make([]int, s.k)
	for i := range ids {
		ids[i] = firstSymbol + i
	}
	return ids
}

// NumPrompts is the sum over allowed lengths n of k^n.
func (s *sequence) NumPrompts() float64 {
	var total float64
	for n := s.minLen; n <= s.maxLen; n++ {
		total += math.Pow(float64(s.k), float64(n))
	}
	return total
}

// numHoldable is the number of prompts CanHoldOut accepts: for sort, all but
// the k constant prompts of each length, so that NewStream can refuse a test
// set larger than that by counting instead of by drawing in vain.
func (s *sequence) numHoldable() float64 {
	if s.name != "sort" {
		return s.NumPrompts()
	}
	return s.NumPrompts() - float64(s.k*(s.maxLen-s.minLen+1))
}

// promptProb is the probability that Generate draws prompt, a valid one: its
// length's share of the range times k^-n.
func (s *sequence) promptProb(prompt []int) float64 {
	return math.Pow(float64(s.k), -float64(len(prompt))) / float64(s.maxLen-s.minLen+1)
}
