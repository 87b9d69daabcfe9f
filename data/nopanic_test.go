package data_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/data"
)

// fakeTask is a Task of another package, as a user of the package could
// write one: each field sets what a method returns, so the tests can hand
// data the nil vocabularies, NaN counts and stuck generators that its own
// tasks never have.
type fakeTask struct {
	vocab   *data.Vocab
	maxLen  int
	prompts float64
	prompt  []int // what Generate always returns
}

func (f fakeTask) Name() string                 { return "fake" }
func (f fakeTask) Params() data.TaskConfig      { return data.TaskConfig{} }
func (f fakeTask) Vocab() *data.Vocab           { return f.vocab }
func (f fakeTask) MaxLen() int                  { return f.maxLen }
func (f fakeTask) Frame(p []int) data.Example   { return data.Example{Prompt: p, Answer: []int{0}} }
func (f fakeTask) Solve([]int) ([]int, error)   { return []int{2}, nil }
func (f fakeTask) ValidatePrompt(p []int) error { return nil }
func (f fakeTask) NumPrompts() float64          { return f.prompts }
func (f fakeTask) Generate(*rand.Rand) data.Example {
	return data.Example{Prompt: f.prompt, Answer: []int{2}}
}

// okFake is a fake task that works: a vocabulary, room for its examples, a
// million prompts it claims but a generator stuck on one of them.
func okFake(t testing.TB) fakeTask {
	v, err := data.NewVocab([]string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	return fakeTask{vocab: v, maxLen: 4, prompts: 1e6, prompt: []int{2}}
}

// newErr is New's error, and an error of its own if New also returned a
// task: a failed New must return a nil Task, not a nil pointer in a non-nil
// interface whose every method panics.
func newErr(name string, cfg data.TaskConfig) error {
	task, err := data.New(name, cfg)
	if err != nil && task != nil {
		return fmt.Errorf("New returned the task %#v with the error %w", task, err)
	}
	return err
}

// streamErr is NewStream's error, for a task made by New.
func streamErr(t testing.TB, name string, cfg data.TaskConfig, nTest int) error {
	_, err := data.NewStream(mustNew(t, name, cfg), 1, nTest)
	return err
}

// goodStream is a recall stream with seed 1 and 10 test prompts.
func goodStream(t testing.TB, seed uint64, nTest int) *data.Stream {
	s, err := data.NewStream(mustNew(t, "recall", data.TaskConfig{Pairs: 2, Keys: 4, Values: 3}), seed, nTest)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// state is the State of s.
func state(t testing.TB, s *data.Stream) []byte {
	b, err := s.State()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// goodBatch is a valid batch of one row.
func goodBatch(t testing.TB) data.Batch {
	b, err := data.MakeBatch([]data.Example{{Prompt: []int{2, 3}, Answer: []int{4}}}, 1, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func examples(n int) []data.Example {
	exs := make([]data.Example, n)
	for i := range exs {
		exs[i] = data.Example{Prompt: []int{2}, Answer: []int{3}}
	}
	return exs
}

const (
	maxInt = "9223372036854775807"
	minInt = "-9223372036854775808"
)

// TestErrorsNotPanics calls every exported function and method that returns
// an error with the arguments and receivers a careless or hostile caller
// could give: nil and zero values, negative, huge and overflowing sizes,
// conflicting parameters, impossible test sets and foreign stream states.
// Each must return an error that starts with "data: " and says what was
// wrong (every substring of want), and none may panic.
func TestErrorsNotPanics(t *testing.T) {
	sort := data.DefaultConfig("sort")
	tests := []struct {
		name string
		call func(t *testing.T) error
		want []string
	}{
		// New: names, zero, negative, huge and conflicting parameters.
		{"New unknown task", func(*testing.T) error { return newErr("sorting", sort) }, []string{`unknown task "sorting"`, "known tasks: add, chars, copy, recall, reverse, sort"}},
		{"New empty name", func(*testing.T) error { return newErr("", sort) }, []string{`unknown task ""`}},
		{"New zero config", func(*testing.T) error { return newErr("sort", data.TaskConfig{}) }, []string{`task "sort"`, "length must be positive, got 0"}},
		{"New length MaxInt", func(*testing.T) error { return newErr("sort", data.TaskConfig{Length: math.MaxInt, Alphabet: 3}) }, []string{"length " + maxInt + " is too large (at most 64)"}},
		{"New length MinInt", func(*testing.T) error { return newErr("sort", data.TaskConfig{Length: math.MinInt, Alphabet: 3}) }, []string{"length must be positive, got " + minInt}},
		{"New alphabet MaxInt", func(*testing.T) error { return newErr("copy", data.TaskConfig{Length: 3, Alphabet: math.MaxInt}) }, []string{`task "copy"`, "alphabet " + maxInt + " is too large (at most 36)"}},
		{"New alphabet of 1", func(*testing.T) error { return newErr("sort", data.TaskConfig{Length: 6, Alphabet: 1}) }, []string{`task "sort"`, "alphabet must be at least 2, got 1"}},
		{"New alphabet negative", func(*testing.T) error { return newErr("reverse", data.TaskConfig{Length: 6, Alphabet: -3}) }, []string{"alphabet must be positive, got -3"}},
		{"New length with min and max", func(*testing.T) error {
			return newErr("copy", data.TaskConfig{Length: 4, MinLength: 2, MaxLength: 5, Alphabet: 3})
		}, []string{`task "copy"`, "set either length or min_length and max_length, not both"}},
		{"New length with max only", func(*testing.T) error {
			return newErr("reverse", data.TaskConfig{Length: 4, MaxLength: 5, Alphabet: 3})
		}, []string{"not both"}},
		{"New length equal to min", func(*testing.T) error { return newErr("sort", data.TaskConfig{Length: 4, MinLength: 4, Alphabet: 3}) }, []string{"not both"}},
		{"New pairs with min and max", func(*testing.T) error {
			return newErr("recall", data.TaskConfig{Pairs: 2, MinPairs: 1, MaxPairs: 3, Keys: 4, Values: 3})
		}, []string{`task "recall"`, "set either pairs or min_pairs and max_pairs, not both"}},
		{"New pairs with min only", func(*testing.T) error {
			return newErr("recall", data.TaskConfig{Pairs: 2, MinPairs: 1, Keys: 4, Values: 3})
		}, []string{"not both"}},
		{"New length range MinInt to MaxInt", func(*testing.T) error {
			return newErr("copy", data.TaskConfig{MinLength: math.MinInt, MaxLength: math.MaxInt, Alphabet: 3})
		}, []string{"min_length must be positive, got " + minInt}},
		{"New max_length MaxInt", func(*testing.T) error {
			return newErr("copy", data.TaskConfig{MinLength: 1, MaxLength: math.MaxInt, Alphabet: 3})
		}, []string{"max_length " + maxInt + " is too large (at most 64)"}},
		{"New min above max", func(*testing.T) error {
			return newErr("copy", data.TaskConfig{MinLength: 9, MaxLength: 2, Alphabet: 3})
		}, []string{"min_length 9 is greater than max_length 2"}},
		{"New digits MaxInt", func(*testing.T) error { return newErr("add", data.TaskConfig{Digits: math.MaxInt}) }, []string{`task "add"`, "digits " + maxInt + " is too large (at most 32)"}},
		{"New digits negative", func(*testing.T) error { return newErr("add", data.TaskConfig{Digits: -1}) }, []string{"digits must be positive, got -1"}},
		{"New keys MaxInt", func(*testing.T) error {
			return newErr("recall", data.TaskConfig{Pairs: 2, Keys: math.MaxInt, Values: 3})
		}, []string{"keys " + maxInt + " is too large (at most 26)"}},
		{"New values of 1", func(*testing.T) error { return newErr("recall", data.TaskConfig{Pairs: 2, Keys: 4, Values: 1}) }, []string{`task "recall"`, "values must be at least 2, got 1"}},
		{"New pairs MaxInt", func(*testing.T) error {
			return newErr("recall", data.TaskConfig{Pairs: math.MaxInt, Keys: 4, Values: 3})
		}, []string{"pairs " + maxInt + " is too large (at most 26)"}},
		{"New pairs above keys", func(*testing.T) error {
			return newErr("recall", data.TaskConfig{MinPairs: 1, MaxPairs: 5, Keys: 4, Values: 3})
		}, []string{"5 pairs need 5 distinct keys, but keys is 4"}},
		{"New parameter of another task", func(*testing.T) error { return newErr("add", data.TaskConfig{Digits: 2, Alphabet: math.MinInt}) }, []string{"alphabet is not a parameter of add"}},

		// ParsePrompt and Vocab: nil and zero receivers, bad text.
		{"ParsePrompt nil task", func(*testing.T) error { _, err := data.ParsePrompt(nil, "1 2"); return err }, []string{"parse prompt: nil task"}},
		{"ParsePrompt task without vocab", func(t *testing.T) error { _, err := data.ParsePrompt(fakeTask{}, "a"); return err }, []string{`task "fake": parse prompt`, "nil Vocab"}},
		{"ParsePrompt unknown symbol", func(t *testing.T) error { _, err := data.ParsePrompt(mustNew(t, "sort", sort), "2 0 7"); return err }, []string{`task "sort"`, `prompt holds "7" at position 2, which is not a symbol of the task (0 1 2)`}},
		{"ParsePrompt separator", func(t *testing.T) error {
			_, err := data.ParsePrompt(mustNew(t, "sort", sort), "2 | 0 1 1 0")
			return err
		}, []string{`prompt holds "|" (id 1) at position 1`}},
		{"ParsePrompt empty", func(t *testing.T) error { _, err := data.ParsePrompt(mustNew(t, "sort", sort), " \t\n"); return err }, []string{"prompt has 0 symbols, want 6"}},
		{"ParsePrompt 100000 symbols", func(t *testing.T) error {
			_, err := data.ParsePrompt(mustNew(t, "add", data.DefaultConfig("add")), strings.Repeat("1 ", 100000))
			return err
		}, []string{`task "add"`, "prompt has 100000 digits, want 4"}},
		{"Vocab nil Encode", func(*testing.T) error { _, err := (*data.Vocab)(nil).Encode("a"); return err }, []string{"nil Vocab"}},
		{"Vocab nil ID", func(*testing.T) error { _, err := (*data.Vocab)(nil).ID("a"); return err }, []string{"nil Vocab"}},
		{"Vocab nil Symbol", func(*testing.T) error { _, err := (*data.Vocab)(nil).Symbol(0); return err }, []string{"nil Vocab"}},
		{"Vocab zero Encode", func(*testing.T) error { _, err := new(data.Vocab).Encode("_"); return err }, []string{"zero Vocab"}},
		{"Vocab zero Symbol", func(*testing.T) error { _, err := new(data.Vocab).Symbol(0); return err }, []string{"zero Vocab"}},
		{"Vocab Symbol MaxInt", func(t *testing.T) error { _, err := mustNew(t, "sort", sort).Vocab().Symbol(math.MaxInt); return err }, []string{`task "sort"`, "id " + maxInt + " is outside [0, 5)"}},
		{"NewVocab nil", func(*testing.T) error { _, err := data.NewVocab(nil); return err }, []string{"no symbols"}},
		{"NewVocab duplicate", func(*testing.T) error { _, err := data.NewVocab([]string{"a", "b", "a"}); return err }, []string{`symbol 2 "a" already has id 2`}},
		{"NewVocab PAD symbol", func(*testing.T) error { _, err := data.NewVocab([]string{data.PADSymbol}); return err }, []string{`"_" already has id 0`}},
		{"NewVocab Unicode space", func(*testing.T) error { _, err := data.NewVocab([]string{"a\u00a0b"}); return err }, []string{"white space"}},

		// NewStream: test sizes the task cannot hold.
		{"NewStream nil task", func(*testing.T) error { _, err := data.NewStream(nil, 1, 10); return err }, []string{"new stream: nil task"}},
		{"NewStream task without vocab", func(*testing.T) error { _, err := data.NewStream(fakeTask{prompts: 10}, 1, 1); return err }, []string{`task "fake"`, "no vocabulary"}},
		{"NewStream NaN prompts", func(t *testing.T) error {
			f := okFake(t)
			f.prompts = math.NaN()
			_, err := data.NewStream(f, 1, 1)
			return err
		}, []string{"reports NaN distinct prompts"}},
		{"NewStream test_size -1", func(t *testing.T) error { return streamErr(t, "copy", data.DefaultConfig("copy"), -1) }, []string{`task "copy"`, "test_size must not be negative, got -1"}},
		{"NewStream test_size MinInt", func(t *testing.T) error { return streamErr(t, "copy", data.DefaultConfig("copy"), math.MinInt) }, []string{"got " + minInt}},
		{"NewStream test_size all prompts", func(t *testing.T) error { return streamErr(t, "sort", sort, 729) }, []string{`task "sort"`, "test_size 729 leaves no prompt for training", "only 729 distinct prompts"}},
		{"NewStream test_size MaxInt small task", func(t *testing.T) error { return streamErr(t, "add", data.TaskConfig{Digits: 1}, math.MaxInt) }, []string{"test_size " + maxInt, "only 100 distinct prompts"}},
		{"NewStream test_size 1<<40 huge task", func(t *testing.T) error {
			return streamErr(t, "copy", data.TaskConfig{Length: 64, Alphabet: 36}, 1<<40)
		}, []string{"test_size 1099511627776 is too large (at most 65536)"}},
		{"NewStream test_size above holdable", func(t *testing.T) error { return streamErr(t, "sort", data.TaskConfig{Length: 3, Alphabet: 2}, 7) }, []string{"test_size 7 is more than the 6 prompts that may be held out", "of its 8 distinct prompts"}},
		{"NewStream training share too small", func(t *testing.T) error {
			// 510 prompts, the 8-symbol ones drawn once in 2048: holding out
			// all but one leaves training a sliver of the draws.
			return streamErr(t, "copy", data.TaskConfig{MinLength: 1, MaxLength: 8, Alphabet: 2}, 509)
		}, []string{"test_size 509 holds out", "lower test_size"}},
		{"NewStream generator stuck", func(t *testing.T) error { _, err := data.NewStream(okFake(t), 1, 5); return err }, []string{`task "fake"`, "test_size 5: found only 1 distinct prompts in 6000 draws"}},

		// Stream methods: nil and zero streams, sizes, foreign states.
		{"Stream nil Draw", func(*testing.T) error { _, err := (*data.Stream)(nil).Draw(1); return err }, []string{"nil Stream"}},
		{"Stream zero Draw", func(*testing.T) error { _, err := new(data.Stream).Draw(1); return err }, []string{"zero Stream"}},
		{"Stream zero State", func(*testing.T) error { _, err := new(data.Stream).State(); return err }, []string{"zero Stream"}},
		{"Stream nil Restore", func(t *testing.T) error { return (*data.Stream)(nil).Restore(state(t, goodStream(t, 1, 10))) }, []string{"nil Stream"}},
		{"Stream zero Restore", func(t *testing.T) error { return new(data.Stream).Restore(state(t, goodStream(t, 1, 10))) }, []string{"zero Stream"}},
		{"Stream Draw -1", func(t *testing.T) error { _, err := goodStream(t, 1, 10).Draw(-1); return err }, []string{`task "recall"`, "cannot draw -1 examples (want 0 to 262144)"}},
		{"Stream Draw 1<<40", func(t *testing.T) error { _, err := goodStream(t, 1, 10).Draw(1 << 40); return err }, []string{"cannot draw 1099511627776 examples"}},
		{"Stream Draw MaxInt", func(t *testing.T) error { _, err := goodStream(t, 1, 10).Draw(math.MaxInt); return err }, []string{"cannot draw " + maxInt}},
		{"Stream Draw only test prompts", func(t *testing.T) error {
			// The fake generator only ever returns its one prompt, which the
			// test set of 1 holds: Next must give up, not spin.
			f := okFake(t)
			s, err := data.NewStream(f, 1, 1)
			if err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			_, err = s.Draw(1)
			return err
		}, []string{`task "fake"`, "draws in a row were test prompts"}},
		{"Stream Restore other task", func(t *testing.T) error {
			other, _ := data.NewStream(mustNew(t, "sort", sort), 1, 10)
			return goodStream(t, 1, 10).Restore(state(t, other))
		}, []string{`task "recall": restore stream`, `state is for task "sort"`}},
		{"Stream Restore other params", func(t *testing.T) error {
			other, _ := data.NewStream(mustNew(t, "recall", data.DefaultConfig("recall")), 1, 10)
			return goodStream(t, 1, 10).Restore(state(t, other))
		}, []string{"state has params pairs=4 keys=8 values=10 queries=-1, stream has pairs=2 keys=4 values=3"}},
		{"Stream Restore other seed", func(t *testing.T) error { return goodStream(t, 1, 10).Restore(state(t, goodStream(t, 2, 10))) }, []string{"state has seed 2, stream has 1"}},
		{"Stream Restore other test size", func(t *testing.T) error { return goodStream(t, 1, 10).Restore(state(t, goodStream(t, 1, 5))) }, []string{"state has a test set of 5, stream has 10"}},
		{"Stream Restore garbage", func(t *testing.T) error { return goodStream(t, 1, 10).Restore([]byte("\x00{garbage")) }, []string{`task "recall": restore stream`, "invalid character"}},
		{"Stream Restore nil", func(t *testing.T) error { return goodStream(t, 1, 10).Restore(nil) }, []string{"restore stream", "unexpected end of JSON"}},
		{"Stream Restore null", func(t *testing.T) error { return goodStream(t, 1, 10).Restore([]byte("null")) }, []string{`state is for task ""`}},
		{"Stream Restore short pcg", func(t *testing.T) error {
			b := strings.Replace(string(state(t, goodStream(t, 1, 10))), `"pcg":"`, `"pcg":"AAAA`, 1)
			return goodStream(t, 1, 10).Restore([]byte(b))
		}, []string{"restore stream"}},

		// MakeBatch, BatchFor and Batch methods: shapes that overflow.
		{"MakeBatch no examples", func(*testing.T) error { _, err := data.MakeBatch(nil, 1, 0, 4); return err }, []string{"no examples"}},
		{"MakeBatch S -1", func(*testing.T) error { _, err := data.MakeBatch(examples(1), 1, 0, -1); return err }, []string{"S must be positive, got -1"}},
		{"MakeBatch S MaxInt", func(*testing.T) error { _, err := data.MakeBatch(examples(2), 1, 0, math.MaxInt); return err }, []string{"B=2 rows of S=" + maxInt + " positions is too many positions (B*S at most 16777216)"}},
		{"MakeBatch B*S above cap", func(*testing.T) error { _, err := data.MakeBatch(examples(4), 1, 0, 1<<23); return err }, []string{"B=4 rows of S=8388608 positions is too many"}},
		{"MakeBatch too many rows", func(*testing.T) error { _, err := data.MakeBatch(examples(data.MaxExamples+1), 1, 0, 2); return err }, []string{"262145 rows is too many (at most 262144)"}},
		{"MakeBatch same specials", func(*testing.T) error { _, err := data.MakeBatch(examples(1), 0, 0, 4); return err }, []string{"must be distinct and non-negative"}},
		{"MakeBatch negative separator", func(*testing.T) error { _, err := data.MakeBatch(examples(1), math.MinInt, 0, 4); return err }, []string{"separator id " + minInt}},
		{"MakeBatch empty answer", func(*testing.T) error { _, err := data.MakeBatch([]data.Example{{}}, 1, 0, 4); return err }, []string{"example 0 has an empty answer"}},
		{"BatchFor nil task", func(*testing.T) error { _, err := data.BatchFor(nil, examples(1)); return err }, []string{"batch: nil task"}},
		{"BatchFor task without vocab", func(*testing.T) error { _, err := data.BatchFor(fakeTask{maxLen: 4}, examples(1)); return err }, []string{`task "fake": batch`, "nil Vocab"}},
		{"BatchFor id MaxInt", func(t *testing.T) error {
			_, err := data.BatchFor(mustNew(t, "sort", sort), []data.Example{{Prompt: []int{math.MaxInt}, Answer: []int{2}}})
			return err
		}, []string{`task "sort"`, "holds id " + maxInt + ", outside the vocabulary [0, 5)"}},
		{"BatchFor too many examples", func(t *testing.T) error {
			_, err := data.BatchFor(mustNew(t, "sort", sort), examples(data.MaxExamples+1))
			return err
		}, []string{`task "sort"`, "262145 examples is too many (at most 262144)"}},
		{"BatchFor MaxLen MaxInt", func(t *testing.T) error {
			f := okFake(t)
			f.maxLen = math.MaxInt
			_, err := data.BatchFor(f, examples(3))
			return err
		}, []string{`task "fake"`, "B*S at most 16777216"}},
		{"BatchFor MaxLen 0", func(t *testing.T) error {
			f := okFake(t)
			f.maxLen = 0
			_, err := data.BatchFor(f, examples(1))
			return err
		}, []string{"S must be positive, got -1"}},
		{"Batch zero Example", func(*testing.T) error { _, err := data.Batch{}.Example(0); return err }, []string{"B=0 rows of S=0 positions: want both positive"}},
		{"Batch zero PadRows", func(*testing.T) error { _, err := data.Batch{}.PadRows(4, 0); return err }, []string{"B=0 rows of S=0 positions"}},
		{"Batch B*S overflows to 0", func(*testing.T) error { _, err := data.Batch{B: 1 << 32, S: 1 << 32}.Example(0); return err }, []string{"4294967296 rows is too many"}},
		{"Batch negative S", func(*testing.T) error { _, err := data.Batch{B: 1, S: -4, Lengths: []int{0}}.Example(0); return err }, []string{"S=-4 positions: want both positive"}},
		{"Batch short slices", func(*testing.T) error { _, err := data.Batch{B: 2, S: 3, Inputs: []int{1}}.Example(0); return err }, []string{"slice lengths 1, 0, 0, 0, 0 do not match B=2, S=3"}},
		{"Batch Example -1", func(t *testing.T) error { _, err := goodBatch(t).Example(-1); return err }, []string{"row -1 is outside [0, 1)"}},
		{"Batch Example MaxInt", func(t *testing.T) error { _, err := goodBatch(t).Example(math.MaxInt); return err }, []string{"row " + maxInt + " is outside [0, 1)"}},
		{"Batch Example negative length", func(t *testing.T) error {
			b := goodBatch(t)
			b.Lengths[0] = -5
			_, err := b.Example(0)
			return err
		}, []string{"row 0 has length -5, outside [0, 4]"}},
		{"Batch PadRows 1<<40", func(t *testing.T) error { _, err := goodBatch(t).PadRows(1<<40, 0); return err }, []string{"1099511627776 rows is too many (at most 262144)"}},
		{"Batch PadRows MaxInt", func(t *testing.T) error { _, err := goodBatch(t).PadRows(math.MaxInt, 0); return err }, []string{maxInt + " rows is too many"}},
		{"Batch PadRows fewer rows", func(t *testing.T) error { _, err := goodBatch(t).PadRows(math.MinInt, 0); return err }, []string{"cannot pad 1 rows down to " + minInt}},
		{"Batch PadRows negative pad", func(t *testing.T) error { _, err := goodBatch(t).PadRows(2, -1); return err }, []string{"padding id must not be negative, got -1"}},
	}
	for _, tt := range tests {
		t.Run(strings.ReplaceAll(tt.name, " ", "_"), func(t *testing.T) {
			err := callNoPanic(t, tt.call)
			if err == nil {
				t.Fatalf("no error, want one saying %q", tt.want)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "data: ") {
				t.Errorf("error %q does not start with the package name", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
		})
	}
}

// callNoPanic runs call, failing the test with the panic's value instead of
// crashing the test binary.
func callNoPanic(t *testing.T, call func(*testing.T) error) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panicked: %v", r)
		}
	}()
	return call(t)
}

// TestZeroValuesNoPanic: the methods that return no error behave as on an
// empty value when the receiver is nil or zero, and Take refuses what Draw
// refuses, by returning nil.
func TestZeroValuesNoPanic(t *testing.T) {
	check := func(what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("%s: wrong result", what)
		}
	}
	run := func(name string, f func()) {
		t.Run(name, func(t *testing.T) {
			callNoPanic(t, func(*testing.T) error { f(); return nil })
		})
	}
	for _, v := range []*data.Vocab{nil, new(data.Vocab)} {
		run(fmt.Sprintf("Vocab %p", v), func() {
			check("Size", v.Size() == 0)
			check("PAD and SEP", v.PAD() == data.PADID && v.SEP() == data.SEPID)
			check("Symbols", len(v.Symbols()) == 0)
			check("Decode", v.Decode([]int{0, 2}) == "<?0> <?2>")
		})
	}
	for _, s := range []*data.Stream{nil, new(data.Stream)} {
		run(fmt.Sprintf("Stream %p", s), func() {
			check("Task", s.Task() == nil)
			check("Test", s.Test() == nil)
			check("IsTest", !s.IsTest([]int{2}))
			ex := s.Next()
			check("Next", ex.Prompt == nil && ex.Answer == nil)
			check("Take", s.Take(3) == nil)
			check("Drawn", s.Drawn() == 0)
		})
	}
	run("Stream Take out of range", func() {
		s := goodStream(t, 1, 10)
		check("Take(-1)", s.Take(-1) == nil)
		check("Take(1<<40)", s.Take(1<<40) == nil)
		check("Take(MaxInt)", s.Take(math.MaxInt) == nil)
		check("stream unmoved", s.Drawn() == 0)
		check("Take(3)", len(s.Take(3)) == 3 && s.Drawn() == 3)
	})
	run("TaskConfig and DefaultConfig", func() {
		check("String", data.TaskConfig{}.String() == "(no parameters)")
		check("DefaultConfig", data.DefaultConfig("\x00") == data.TaskConfig{})
		c := data.TaskConfig{Length: math.MinInt}
		check("String MinInt", c.String() == "length="+minInt)
	})
	run("task methods on hostile prompts", func() {
		for _, name := range data.Names() {
			task := mustNew(t, name, data.DefaultConfig(name))
			for _, p := range [][]int{nil, {}, {math.MinInt}, {math.MaxInt, -1, 0, 1}, make([]int, 1000)} {
				task.Frame(p)
				if _, err := task.Solve(p); err == nil {
					t.Errorf("%s: Solve(%v) accepted", name, p)
				}
				if err := task.ValidatePrompt(p); err == nil || !strings.Contains(err.Error(), `task "`+name+`"`) {
					t.Errorf("%s: ValidatePrompt(%v) = %v", name, p, err)
				}
			}
			task.Generate(nil)
		}
	})
}
