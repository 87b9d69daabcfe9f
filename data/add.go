package data

import (
	"math"
	"math/rand/v2"
)

// add is minGPT's adder: the prompt is the a digits of x then the a digits of
// y, most significant first and zero-padded; the answer is the a+1 digits of
// x+y least significant first. Reversing the sum lets a left-to-right decoder
// emit each digit after the digits it depends on, carries included.
type add struct {
	digits int
	vocab  *Vocab
}

func newAdd(c TaskConfig) (*add, error) {
	const name = "add"
	if err := onlyFields(name, c, "digits"); err != nil {
		return nil, err
	}
	if err := inRange(name, "digits", c.Digits, MaxDigits); err != nil {
		return nil, err
	}
	syms := make([]string, 10)
	for i := range syms {
		syms[i] = alphabetSymbols[i : i+1]
	}
	v, err := newVocab(name, syms)
	if err != nil {
		return nil, err
	}
	return &add{digits: c.Digits, vocab: v}, nil
}

// Name returns "add".
func (a *add) Name() string { return "add" }

// Params returns the digit count.
func (a *add) Params() TaskConfig { return TaskConfig{Digits: a.digits} }

// Vocab returns PAD, SEP and the digits 0-9.
func (a *add) Vocab() *Vocab { return a.vocab }

// MaxLen is 2a operand digits, SEP and a+1 sum digits.
func (a *add) MaxLen() int { return 3*a.digits + 2 }

// Frame has a+1 targets: the sum of two a-digit numbers has at most a+1
// digits, and shorter sums are zero-padded to that width.
func (a *add) Frame(prompt []int) Example {
	return Example{Prompt: prompt, Answer: make([]int, a.digits+1)}
}

// Generate draws every operand digit uniformly, so x and y are uniform in
// [0, 10^a), as in minGPT.
func (a *add) Generate(rng *rand.Rand) Example {
	rng = orDefault(rng)
	p := make([]int, 2*a.digits)
	for i := range p {
		p[i] = firstSymbol + rng.IntN(10)
	}
	return Example{Prompt: p, Answer: a.answer(p)}
}

// answer adds the operands of a valid prompt digit by digit, so any digit
// count works without overflow.
func (a *add) answer(p []int) []int {
	n := a.digits
	sum := make([]int, n+1)
	carry := 0
	for i := 0; i < n; i++ { // i-th least significant digit
		d := (p[n-1-i] - firstSymbol) + (p[2*n-1-i] - firstSymbol) + carry
		sum[i] = firstSymbol + d%10
		carry = d / 10
	}
	sum[n] = firstSymbol + carry
	return sum
}

// Solve returns the reversed digits of the sum.
func (a *add) Solve(prompt []int) ([]int, error) {
	if err := a.ValidatePrompt(prompt); err != nil {
		return nil, err
	}
	return a.answer(prompt), nil
}

// ValidatePrompt checks for exactly 2a digits.
func (a *add) ValidatePrompt(prompt []int) error {
	if len(prompt) != 2*a.digits {
		return promptErrorf(a.Name(), "has %s, want %d (two %d-digit numbers)", count(len(prompt), "digit"), 2*a.digits, a.digits)
	}
	return checkSymbols(a, prompt, firstSymbol, firstSymbol+10, "a digit")
}

// NumPrompts is 100^a: every pair of operands.
func (a *add) NumPrompts() float64 { return math.Pow(100, float64(a.digits)) }

// promptProb is the probability that Generate draws a given prompt: every
// prompt is equally likely.
func (a *add) promptProb([]int) float64 { return math.Pow(100, -float64(a.digits)) }
