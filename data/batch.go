package data

import (
	"fmt"
	"slices"
)

// Batch is B examples laid out for next-token training of a decoder-only
// model, every slice row-major (B, S). Row b holds seq = prompt + SEP + answer
// as Inputs = seq[:len(seq)-1] and Targets = seq[1:], both padded with PAD to
// S. Weights is 1 exactly where the target is an answer token that is a
// target (not given), so the loss ignores the random prompt, the separator,
// the given tokens and the padding. Lengths holds each row's unpadded input
// length, for key-padding masks, and Starts its prompt length: the input
// position of SEP, from which on the targets are the answer.
type Batch struct {
	B, S    int
	Inputs  []int
	Targets []int
	Weights []float64
	Lengths []int
	Starts  []int
}

// MaxBatchTokens bounds B*S, the positions of one Batch: three slices of
// that many numbers, 384 MiB at the bound. It turns a mistyped S or row count
// into an error naming them rather than an allocation that fails or
// overflows int.
const MaxBatchTokens = 1 << 24

// checkShape reports a batch shape that is not positive or exceeds
// MaxExamples rows or MaxBatchTokens positions. It divides instead of
// multiplying, so that no product overflows.
func checkShape(B, S int) error {
	switch {
	case B <= 0 || S <= 0:
		return fmt.Errorf("data: batch: B=%d rows of S=%d positions: want both positive", B, S)
	case B > MaxExamples:
		return fmt.Errorf("data: batch: %d rows is too many (at most %d)", B, MaxExamples)
	case S > MaxBatchTokens/B:
		return fmt.Errorf("data: batch: B=%d rows of S=%d positions is too many positions (B*S at most %d)", B, S, MaxBatchTokens)
	}
	return nil
}

// MakeBatch lays examples out in rows of S positions; S is normally
// task.MaxLen()-1. It fails if there are no examples, if an example has no
// target (it would carry no loss), a Given that is neither nil nor as long as
// its answer, or holds a PAD, SEP or negative id, if
// prompt + SEP + answer needs more than S+1 tokens, or if the batch would
// exceed MaxExamples rows or MaxBatchTokens positions.
func MakeBatch(examples []Example, sepID, padID, S int) (Batch, error) {
	switch {
	case len(examples) == 0:
		return Batch{}, fmt.Errorf("data: batch: no examples")
	case S <= 0:
		return Batch{}, fmt.Errorf("data: batch: S must be positive, got %d", S)
	case sepID < 0 || padID < 0 || sepID == padID:
		return Batch{}, fmt.Errorf("data: batch: separator id %d and padding id %d must be distinct and non-negative", sepID, padID)
	}
	if err := checkShape(len(examples), S); err != nil {
		return Batch{}, err
	}
	B := len(examples)
	b := Batch{
		B: B, S: S,
		Inputs:  make([]int, B*S),
		Targets: make([]int, B*S),
		Weights: make([]float64, B*S),
		Lengths: make([]int, B),
		Starts:  make([]int, B),
	}
	var seq []int // one example's tokens: the prompt, SEP, the answer
	for i, ex := range examples {
		if ex.Given != nil && len(ex.Given) != len(ex.Answer) {
			return Batch{}, fmt.Errorf("data: batch: example %d marks %s given or not, but its answer has %d", i, count(len(ex.Given), "answer position"), len(ex.Answer))
		}
		if len(ex.Answer) == 0 {
			return Batch{}, fmt.Errorf("data: batch: example %d has an empty answer, so no position would carry loss", i)
		}
		if !slices.Contains(ex.Given, false) && len(ex.Given) > 0 {
			return Batch{}, fmt.Errorf("data: batch: example %d has no target in its answer of %s, so no position would carry loss", i, count(len(ex.Answer), "token"))
		}
		for _, part := range []struct {
			name string
			ids  []int
		}{{"prompt", ex.Prompt}, {"answer", ex.Answer}} {
			for j, id := range part.ids {
				if id < 0 || id == sepID || id == padID {
					return Batch{}, fmt.Errorf("data: batch: example %d: %s position %d holds id %d, which is negative, the separator (%d) or padding (%d)", i, part.name, j, id, sepID, padID)
				}
			}
		}
		n := len(ex.Prompt) + len(ex.Answer) // input length: seq minus its last token
		if n > S {
			return Batch{}, fmt.Errorf("data: batch: example %d: prompt (%d) + separator + answer (%d) is %d tokens, needs S >= %d, got S = %d", i, len(ex.Prompt), len(ex.Answer), n+1, n, S)
		}
		seq = append(seq[:0], ex.Prompt...)
		seq = append(seq, sepID)
		seq = append(seq, ex.Answer...)
		row := i * S
		for j := 0; j < S; j++ {
			b.Inputs[row+j], b.Targets[row+j] = padID, padID
		}
		copy(b.Inputs[row:], seq[:n])
		copy(b.Targets[row:], seq[1:])
		// Target j is seq[j+1]; answer token a is seq[len(prompt)+1+a], the
		// target of position len(prompt)+a.
		for a := range ex.Answer {
			if !ex.IsGiven(a) {
				b.Weights[row+len(ex.Prompt)+a] = 1
			}
		}
		b.Lengths[i], b.Starts[i] = n, len(ex.Prompt)
	}
	return b, nil
}

// BatchFor is MakeBatch with t's separator, padding and S = t.MaxLen()-1. It
// also checks every id against t's vocabulary, and names the task in errors.
func BatchFor(t Task, examples []Example) (Batch, error) {
	if t == nil {
		return Batch{}, fmt.Errorf("data: batch: nil task")
	}
	v := t.Vocab()
	if err := v.usable(); err != nil {
		return Batch{}, fmt.Errorf("data: task %q: batch: %w", t.Name(), err)
	}
	if len(examples) > MaxExamples {
		// Before the scan below, which would otherwise read them all.
		return Batch{}, fmt.Errorf("data: task %q: batch: %d examples is too many (at most %d)", t.Name(), len(examples), MaxExamples)
	}
	for i, ex := range examples {
		for _, ids := range [][]int{ex.Prompt, ex.Answer} {
			for _, id := range ids {
				if id >= v.Size() {
					return Batch{}, fmt.Errorf("data: task %q: batch: example %d holds id %d, outside the vocabulary [0, %d)", t.Name(), i, id, v.Size())
				}
			}
		}
	}
	b, err := MakeBatch(examples, v.SEP(), v.PAD(), t.MaxLen()-1)
	if err != nil {
		return Batch{}, fmt.Errorf("data: task %q: %w", t.Name(), err)
	}
	return b, nil
}

// Example recovers row i's example: the prompt is the inputs before Starts[i]
// (which holds SEP), the answer the targets from there on, given where their
// weight is 0. It lets evaluation and logging work from a batch alone.
func (b Batch) Example(i int) (Example, error) {
	if err := b.check(); err != nil {
		return Example{}, err
	}
	if i < 0 || i >= b.B {
		return Example{}, fmt.Errorf("data: batch: row %d is outside [0, %d)", i, b.B)
	}
	row := i * b.S
	n := b.Lengths[i]
	if n < 0 || n > b.S {
		return Example{}, fmt.Errorf("data: batch: row %d has length %d, outside [0, %d]", i, n, b.S)
	}
	p := b.Starts[i]
	if p < 0 || p >= n {
		return Example{}, fmt.Errorf("data: batch: row %d has no answer positions (prompt length %d, length %d)", i, p, n)
	}
	ex := Example{
		Prompt: append([]int(nil), b.Inputs[row:row+p]...),
		Answer: append([]int(nil), b.Targets[row+p:row+n]...),
	}
	for a := range ex.Answer {
		if b.Weights[row+p+a] == 0 {
			if ex.Given == nil {
				ex.Given = make([]bool, len(ex.Answer))
			}
			ex.Given[a] = true
		}
	}
	return ex, nil
}

// PadRows returns b grown to rows rows by appending filler rows of padding
// with weight 0 and length 0, for a graph compiled for a fixed batch size that
// is fed a smaller final batch. The filler changes neither the loss nor its
// gradient, because the loss is a weighted mean.
//
// It fails on a malformed b, a negative padID, fewer rows than b has, or
// more than MaxExamples rows or MaxBatchTokens positions.
func (b Batch) PadRows(rows int, padID int) (Batch, error) {
	if err := b.check(); err != nil {
		return Batch{}, err
	}
	if rows < b.B {
		return Batch{}, fmt.Errorf("data: batch: cannot pad %d rows down to %d", b.B, rows)
	}
	if padID < 0 {
		return Batch{}, fmt.Errorf("data: batch: padding id must not be negative, got %d", padID)
	}
	if err := checkShape(rows, b.S); err != nil {
		return Batch{}, err
	}
	extra := (rows - b.B) * b.S
	out := Batch{
		B: rows, S: b.S,
		Inputs:  append(append(make([]int, 0, rows*b.S), b.Inputs...), make([]int, extra)...),
		Targets: append(append(make([]int, 0, rows*b.S), b.Targets...), make([]int, extra)...),
		Weights: append(append(make([]float64, 0, rows*b.S), b.Weights...), make([]float64, extra)...),
		Lengths: append(append(make([]int, 0, rows), b.Lengths...), make([]int, rows-b.B)...),
		Starts:  append(append(make([]int, 0, rows), b.Starts...), make([]int, rows-b.B)...),
	}
	for j := b.B * b.S; j < rows*b.S; j++ {
		out.Inputs[j], out.Targets[j] = padID, padID
	}
	return out, nil
}

// check reports a Batch whose slices do not have the sizes B and S promise,
// e.g. one assembled by hand, and the zero Batch, which has no rows.
func (b Batch) check() error {
	if err := checkShape(b.B, b.S); err != nil {
		return err
	}
	if len(b.Inputs) != b.B*b.S || len(b.Targets) != b.B*b.S || len(b.Weights) != b.B*b.S || len(b.Lengths) != b.B || len(b.Starts) != b.B {
		return fmt.Errorf("data: batch: slice lengths %d, %d, %d, %d, %d do not match B=%d, S=%d", len(b.Inputs), len(b.Targets), len(b.Weights), len(b.Lengths), len(b.Starts), b.B, b.S)
	}
	return nil
}
