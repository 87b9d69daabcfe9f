package data_test

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/data"
)

// The fuzz targets below run as ordinary tests over their seed corpora (go
// test ./data), and search further with -fuzz, one at a time:
//
//	go test ./data -run XXX -fuzz FuzzParsePrompt -fuzztime 5m
//	go test ./data -run XXX -fuzz FuzzStreamRestore -fuzztime 5m
//	go test ./data -run XXX -fuzz FuzzNewTask -fuzztime 5m
//
// Every input must finish in milliseconds: the tasks are capped, the streams
// hold at most 63 test prompts and draw a handful of examples.

// fuzzTaskName picks a task for a fuzzed selector; 5 of every 6 values name a
// real task and the sixth an unknown one, which New must refuse.
func fuzzTaskName(sel uint8) string {
	names := append(data.Names(), "sorting")
	return names[int(sel)%len(names)]
}

// canonical is cfg as Params would report it: a range whose ends are equal
// written as the fixed value.
func canonical(cfg data.TaskConfig) data.TaskConfig {
	if cfg.MinLength != 0 && cfg.MinLength == cfg.MaxLength {
		cfg.Length, cfg.MinLength, cfg.MaxLength = cfg.MinLength, 0, 0
	}
	if cfg.MinPairs != 0 && cfg.MinPairs == cfg.MaxPairs {
		cfg.Pairs, cfg.MinPairs, cfg.MaxPairs = cfg.MinPairs, 0, 0
	}
	return cfg
}

// checkExample checks an example of task against everything a caller relies
// on: valid prompt, Solve agrees, ids are task symbols (never PAD or SEP),
// the example is its prompt's Frame with the targets filled in, the sequence
// fits MaxLen, and the prompt survives Decode and ParsePrompt.
func checkExample(t *testing.T, task data.Task, ex data.Example) {
	t.Helper()
	v := task.Vocab()
	for _, ids := range [][]int{ex.Prompt, ex.Answer} {
		for _, id := range ids {
			if id < 2 || id >= v.Size() {
				t.Fatalf("%s %v: example %v holds id %d, not a symbol of the %d-token vocabulary", task.Name(), task.Params(), ex, id, v.Size())
			}
		}
	}
	prompt := ex.Shown()
	if err := task.ValidatePrompt(prompt); err != nil {
		t.Fatalf("%s %v: generated prompt %v rejected: %v", task.Name(), task.Params(), prompt, err)
	}
	ans, err := task.Solve(prompt)
	if err != nil || !slices.Equal(ans, ex.Targets()) {
		t.Fatalf("%s %v: Solve(%v) = %v, %v, want %v", task.Name(), task.Params(), prompt, ans, err, ex.Targets())
	}
	checkFrame(t, task, ex)
	if n := len(ex.Prompt) + 1 + len(ex.Answer); n > task.MaxLen() {
		t.Fatalf("%s %v: example of %d tokens exceeds MaxLen %d", task.Name(), task.Params(), n, task.MaxLen())
	}
	back, err := data.ParsePrompt(task, v.Decode(prompt))
	if err != nil || !slices.Equal(back, prompt) {
		t.Fatalf("%s %v: ParsePrompt(Decode(%v)) = %v, %v", task.Name(), task.Params(), prompt, back, err)
	}
}

// checkFrame checks that ex is the Frame of its prompt with the targets
// filled in: the same prompt, answer length, given positions and tokens.
func checkFrame(t *testing.T, task data.Task, ex data.Example) {
	t.Helper()
	f := task.Frame(ex.Shown())
	ok := slices.Equal(f.Prompt, ex.Prompt) && len(f.Answer) == len(ex.Answer)
	for j := 0; ok && j < len(ex.Answer); j++ {
		ok = f.IsGiven(j) == ex.IsGiven(j) && (!f.IsGiven(j) || f.Answer[j] == ex.Answer[j])
	}
	if !ok {
		t.Fatalf("%s %v: Frame(%v) = %+v, does not frame example %+v", task.Name(), task.Params(), ex.Shown(), f, ex)
	}
}

// FuzzNewTask: New never panics or hangs on any TaskConfig; it refuses with a
// "data: " error, and never silently picks between a fixed length or pair
// count and a range. An accepted task reports its own parameters, generates
// valid examples within MaxLen, batches them, and makes a stream.
func FuzzNewTask(f *testing.F) {
	type cfgArgs struct {
		sel                                                     uint8
		length, minL, maxL, alphabet, digits, pairs, minP, maxP int
		keys, values                                            int
	}
	seeds := []cfgArgs{
		{sel: 1, minL: 3, maxL: 8, alphabet: 10},                    // copy default
		{sel: 3, minL: 3, maxL: 8, alphabet: 10},                    // reverse default
		{sel: 4, length: 6, alphabet: 3},                            // sort default
		{sel: 2, pairs: 4, keys: 8, values: 10},                     // recall default
		{sel: 0, digits: 2},                                         // add default
		{sel: 4, length: 64, alphabet: 36},                          // largest sort
		{sel: 2, minP: 1, maxP: 26, keys: 26, values: 10},           // largest recall
		{sel: 0, digits: 32},                                        // largest add
		{sel: 1, length: 1, alphabet: 2},                            // smallest copy
		{sel: 2, pairs: 1, keys: 1, values: 2},                      // smallest recall
		{sel: 4, length: 6, alphabet: 1},                            // alphabet of 1
		{sel: 1, length: 4, minL: 2, maxL: 5, alphabet: 3},          // length and a range
		{sel: 2, pairs: 2, minP: 1, maxP: 3, keys: 4, values: 3},    // pairs and a range
		{sel: 4, length: math.MaxInt, alphabet: math.MaxInt},        // huge
		{sel: 1, minL: math.MinInt, maxL: math.MaxInt, alphabet: 2}, // extreme range
		{sel: 0, digits: -1},
		{sel: 5, length: 6, alphabet: 3}, // unknown task
		{sel: 3},                         // no parameters
	}
	for _, s := range seeds {
		f.Add(s.sel, s.length, s.minL, s.maxL, s.alphabet, s.digits, s.pairs, s.minP, s.maxP, s.keys, s.values, uint64(1), uint8(10))
	}
	f.Fuzz(func(t *testing.T, sel uint8, length, minL, maxL, alphabet, digits, pairs, minP, maxP, keys, values int, seed uint64, nTest uint8) {
		name := fuzzTaskName(sel)
		cfg := data.TaskConfig{Length: length, MinLength: minL, MaxLength: maxL, Alphabet: alphabet, Digits: digits,
			Pairs: pairs, MinPairs: minP, MaxPairs: maxP, Keys: keys, Values: values}
		task, err := data.New(name, cfg)
		if err != nil {
			if task != nil || !strings.HasPrefix(err.Error(), "data: ") {
				t.Fatalf("New(%q, %+v) = %v, %q: want a nil task and a data: error", name, cfg, task, err)
			}
			return
		}
		if (cfg.Length != 0 && (cfg.MinLength != 0 || cfg.MaxLength != 0)) || (cfg.Pairs != 0 && (cfg.MinPairs != 0 || cfg.MaxPairs != 0)) {
			t.Fatalf("New(%q, %+v) accepted a fixed value together with a range", name, cfg)
		}
		if got := task.Params(); got != canonical(cfg) {
			t.Fatalf("New(%q, %+v).Params() = %+v, want %+v: a parameter was ignored or changed", name, cfg, got, canonical(cfg))
		}
		if task.Name() != name {
			t.Fatalf("New(%q).Name() = %q", name, task.Name())
		}
		// The largest MaxLen any accepted task may have: sort/copy/reverse
		// at MaxSeqLength give 2*64+1, add at MaxDigits 3*32+2.
		if ml := task.MaxLen(); ml < 3 || ml > max(2*data.MaxSeqLength+1, 3*data.MaxDigits+2, 2*data.MaxKeys+3) {
			t.Fatalf("%s %v: MaxLen %d out of range", name, cfg, ml)
		}
		if np := task.NumPrompts(); !(np >= 2) || math.IsInf(np, 0) {
			t.Fatalf("%s %v: NumPrompts = %v, want finite and at least 2", name, cfg, np)
		}
		rng := rand.New(rand.NewPCG(seed, 0))
		exs := make([]data.Example, 8)
		for i := range exs {
			exs[i] = task.Generate(rng)
			checkExample(t, task, exs[i])
		}
		b, err := data.BatchFor(task, exs)
		if err != nil {
			t.Fatalf("%s %v: BatchFor of generated examples: %v", name, cfg, err)
		}
		for i := range exs {
			back, err := b.Example(i)
			if err != nil || !slices.Equal(back.Prompt, exs[i].Prompt) || !slices.Equal(back.Answer, exs[i].Answer) {
				t.Fatalf("%s %v: batch row %d = %v, %v, want %v", name, cfg, i, back, err, exs[i])
			}
		}
		n := int(nTest) % 64 // small test sets keep each input to milliseconds
		s, err := data.NewStream(task, seed, n)
		if err != nil {
			if !strings.Contains(err.Error(), "test_size") {
				t.Fatalf("%s %v: NewStream(%d) error %q does not name test_size", name, cfg, n, err)
			}
			return
		}
		if len(s.Test()) != n {
			t.Fatalf("%s %v: %d test examples, want %d", name, cfg, len(s.Test()), n)
		}
		train, err := s.Draw(4)
		if err != nil {
			t.Fatalf("%s %v: Draw(4): %v", name, cfg, err)
		}
		for _, ex := range train {
			checkExample(t, task, ex)
			if s.IsTest(ex.Prompt) {
				t.Fatalf("%s %v: training example %v is a test prompt", name, cfg, ex.Prompt)
			}
		}
	})
}

// FuzzParsePrompt: ParsePrompt never panics on any text for any task. An
// accepted prompt holds only the task's symbols, decodes back to the text's
// tokens joined by single spaces, and has an answer that fits MaxLen and
// batches.
func FuzzParsePrompt(f *testing.F) {
	seeds := []struct {
		sel                                                                   uint8
		length, minL, maxL, alphabet, digits, pairs, minP, maxP, keys, values uint8
		text                                                                  string
	}{
		{sel: 4, length: 6, alphabet: 3, text: "2 0 1 1 0 2"},
		{sel: 4, length: 3, alphabet: 12, text: "b 9 a"},
		{sel: 1, minL: 1, maxL: 5, alphabet: 4, text: "  3\t1\n2 "},
		{sel: 3, minL: 3, maxL: 8, alphabet: 10, text: "3 1 4 1"},
		{sel: 2, pairs: 3, keys: 4, values: 10, text: "a 3 d 5 c 1 d"},
		{sel: 2, minP: 1, maxP: 3, keys: 4, values: 10, text: "b 7 b"},
		{sel: 2, pairs: 2, keys: 4, values: 10, text: "a 1 a 2 a"},
		{sel: 0, digits: 2, text: "8 5 5 0"},
		{sel: 0, digits: 3, text: "9 9 9 0 0 1"},
		{sel: 4, length: 6, alphabet: 3, text: ""},
		{sel: 4, length: 6, alphabet: 3, text: "2 0 1 | 0 2"},
		{sel: 4, length: 6, alphabet: 3, text: "_ _ _ _ _ _"},
		{sel: 4, length: 6, alphabet: 3, text: "2 0 1 1 0 3"},
		{sel: 1, length: 2, alphabet: 2, text: "0\u00851"},
		{sel: 1, length: 2, alphabet: 2, text: "0\xff1"},
		{sel: 0, digits: 1, text: "1 2 3"},
		{sel: 5, length: 6, alphabet: 3, text: "2 0 1 1 0 2"},
	}
	for _, s := range seeds {
		f.Add(s.sel, s.length, s.minL, s.maxL, s.alphabet, s.digits, s.pairs, s.minP, s.maxP, s.keys, s.values, s.text)
	}
	f.Fuzz(func(t *testing.T, sel, length, minL, maxL, alphabet, digits, pairs, minP, maxP, keys, values uint8, text string) {
		name := fuzzTaskName(sel)
		// Only the selected task's own parameters are set, so that most
		// inputs make a task and the fuzzer spends its time on the text;
		// FuzzNewTask covers parameters of the wrong task.
		cfg := data.TaskConfig{}
		switch name {
		case "copy", "reverse", "sort":
			cfg = data.TaskConfig{Length: int(length), MinLength: int(minL), MaxLength: int(maxL), Alphabet: int(alphabet)}
		case "recall":
			cfg = data.TaskConfig{Pairs: int(pairs), MinPairs: int(minP), MaxPairs: int(maxP), Keys: int(keys), Values: int(values)}
		case "add":
			cfg = data.TaskConfig{Digits: int(digits)}
		}
		task, err := data.New(name, cfg)
		if err != nil {
			return
		}
		ids, err := data.ParsePrompt(task, text)
		if err != nil {
			if ids != nil || !strings.HasPrefix(err.Error(), `data: task "`+name+`"`) {
				t.Fatalf("ParsePrompt(%s %v, %q) = %v, %q: want nil and an error naming the task", name, cfg, text, ids, err)
			}
			return
		}
		v := task.Vocab()
		for i, id := range ids {
			if id < 2 || id >= v.Size() {
				t.Fatalf("ParsePrompt(%s %v, %q) position %d holds id %d, not one of the task's symbols", name, cfg, text, i, id)
			}
		}
		if got, want := v.Decode(ids), strings.Join(strings.Fields(text), " "); got != want {
			t.Fatalf("ParsePrompt(%s %v, %q) decodes to %q, want %q", name, cfg, text, got, want)
		}
		ans, err := task.Solve(ids)
		if err != nil {
			t.Fatalf("Solve of accepted prompt %q: %v", text, err)
		}
		checkExample(t, task, data.Example{Prompt: ids, Answer: ans})
		if _, err := data.BatchFor(task, []data.Example{{Prompt: ids, Answer: ans}}); err != nil {
			t.Fatalf("BatchFor of accepted prompt %q: %v", text, err)
		}
	})
}

// fuzzStream is the stream FuzzStreamRestore restores into, made anew for
// every input because Restore changes it.
func fuzzStream(t testing.TB) *data.Stream {
	task, err := data.New("recall", data.TaskConfig{MinPairs: 1, MaxPairs: 3, Keys: 4, Values: 3})
	if err != nil {
		t.Fatal(err)
	}
	s, err := data.NewStream(task, 7, 10)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// FuzzStreamRestore: Restore never panics on any bytes. A refused state
// leaves the stream as it was; an accepted one gives a stream whose Draw
// yields valid training examples outside the unchanged test set, and whose
// State restores elsewhere to the same continuation.
func FuzzStreamRestore(f *testing.F) {
	s := fuzzStream(f)
	fresh, err := s.State()
	if err != nil {
		f.Fatal(err)
	}
	s.Take(5)
	later, _ := s.State()
	var fields map[string]any
	if err := json.Unmarshal(later, &fields); err != nil {
		f.Fatal(err)
	}
	edit := func(k string, v any) []byte {
		m := map[string]any{}
		for k, v := range fields {
			m[k] = v
		}
		m[k] = v
		b, _ := json.Marshal(m)
		return b
	}
	other := func(name string, cfg data.TaskConfig, seed uint64, nTest int) []byte {
		task, err := data.New(name, cfg)
		if err != nil {
			f.Fatal(err)
		}
		o, err := data.NewStream(task, seed, nTest)
		if err != nil {
			f.Fatal(err)
		}
		b, _ := o.State()
		return b
	}
	for _, b := range [][]byte{
		fresh, later,
		later[:len(later)/2],
		edit("drawn", uint64(math.MaxUint64)),
		edit("pcg", "AAAA"),
		edit("pcg", nil),
		edit("n_test", -1),
		edit("seed", 8),
		edit("params", map[string]int{"pairs": 2, "keys": 4, "values": 3}),
		other("recall", data.TaskConfig{MinPairs: 1, MaxPairs: 3, Keys: 4, Values: 3}, 8, 10),
		other("copy", data.DefaultConfig("copy"), 7, 10),
		[]byte("null"), []byte("{}"), []byte(""), []byte("[]"), []byte(`{"task":"recall"}`),
	} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, state []byte) {
		s := fuzzStream(t)
		before, _ := s.State()
		test := s.Test()
		if err := s.Restore(state); err != nil {
			if !strings.HasPrefix(err.Error(), `data: task "recall": restore stream: `) {
				t.Fatalf("Restore(%q) error %q does not name the task and restore", state, err)
			}
			if after, _ := s.State(); string(after) != string(before) {
				t.Fatalf("failed Restore(%q) changed the stream", state)
			}
			return
		}
		drawn := s.Drawn()
		saved, err := s.State()
		if err != nil {
			t.Fatalf("State after Restore(%q): %v", state, err)
		}
		got, err := s.Draw(5)
		if err != nil || len(got) != 5 {
			t.Fatalf("Draw(5) after Restore(%q) = %d examples, %v", state, len(got), err)
		}
		for _, ex := range got {
			checkExample(t, s.Task(), ex)
			if s.IsTest(ex.Prompt) {
				t.Fatalf("after Restore(%q), training example %v is a test prompt", state, ex.Prompt)
			}
		}
		if s.Drawn() != drawn+5 {
			t.Fatalf("Drawn = %d after 5 from %d", s.Drawn(), drawn)
		}
		if !slices.EqualFunc(s.Test(), test, func(a, b data.Example) bool {
			return slices.Equal(a.Prompt, b.Prompt) && slices.Equal(a.Answer, b.Answer)
		}) {
			t.Fatalf("Restore(%q) changed the test set", state)
		}
		r := fuzzStream(t)
		if err := r.Restore(saved); err != nil {
			t.Fatalf("State %q of a restored stream refused: %v", saved, err)
		}
		again, err := r.Draw(5)
		if err != nil || !slices.EqualFunc(again, got, func(a, b data.Example) bool { return slices.Equal(a.Prompt, b.Prompt) }) {
			t.Fatalf("re-restored stream drew %v, %v, want %v", again, err, got)
		}
	})
}
