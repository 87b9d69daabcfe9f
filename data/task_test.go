package data_test

import (
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/data"
)

func mustNew(t testing.TB, name string, cfg data.TaskConfig) data.Task {
	t.Helper()
	task, err := data.New(name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// taskCases are the configurations the property tests run over: every
// default, and variable-length and multi-digit variants.
var taskCases = []struct {
	name string
	cfg  data.TaskConfig
}{
	{"copy", data.DefaultConfig("copy")},
	{"copy", data.TaskConfig{Length: 5, Alphabet: 36}},
	{"reverse", data.DefaultConfig("reverse")},
	{"reverse", data.TaskConfig{Length: 7, Alphabet: 2}},
	{"sort", data.DefaultConfig("sort")},
	{"sort", data.TaskConfig{MinLength: 1, MaxLength: 12, Alphabet: 20}},
	{"recall", data.DefaultConfig("recall")},
	{"recall", data.TaskConfig{MinPairs: 1, MaxPairs: 26, Keys: 26, Values: 3}},
	{"recall", data.TaskConfig{MinPairs: 1, MaxPairs: 26, Keys: 26, Values: 3, Queries: 1}},
	{"recall", data.TaskConfig{MinPairs: 3, MaxPairs: 5, Keys: 6, Values: 4, Queries: 2}},
	{"recall", data.TaskConfig{Pairs: 8, Keys: 16, Values: 16}},
	{"add", data.DefaultConfig("add")},
	{"add", data.TaskConfig{Digits: 20}},
}

// symbols decodes ids into their symbols, for checks written in the task's
// own terms rather than in ids.
func symbols(t testing.TB, v *data.Vocab, ids []int) []string {
	t.Helper()
	out := make([]string, len(ids))
	for i, id := range ids {
		s, err := v.Symbol(id)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = s
	}
	return out
}

// check verifies ex against the task's definition independently of Solve.
func check(t testing.TB, task data.Task, ex data.Example) error {
	p, a := symbols(t, task.Vocab(), ex.Prompt), symbols(t, task.Vocab(), ex.Answer)
	switch task.Name() {
	case "copy":
		if !slices.Equal(p, a) {
			return fmt.Errorf("copy answer %v != prompt %v", a, p)
		}
	case "reverse":
		if len(p) != len(a) {
			return fmt.Errorf("lengths differ")
		}
		for i := range p {
			if p[i] != a[len(a)-1-i] {
				return fmt.Errorf("answer %v is not prompt %v reversed", a, p)
			}
		}
	case "sort":
		// Sorted ascending in the alphabet's order (digits, then letters,
		// which is also byte order), and a permutation of the prompt.
		if !slices.IsSorted(a) {
			return fmt.Errorf("answer %v is not sorted", a)
		}
		counts := map[string]int{}
		for _, s := range p {
			counts[s]++
		}
		for _, s := range a {
			counts[s]--
		}
		for s, c := range counts {
			if c != 0 {
				return fmt.Errorf("answer %v is not a permutation of %v (symbol %s off by %d)", a, p, s, c)
			}
		}
	case "recall":
		// The single-query framing keeps the query at the end of the prompt;
		// the multi-query one puts queries and values after SEP, each query
		// given and each value a target.
		pairsEnd, queries, values := len(p)-1, p[len(p)-1:], a
		if ex.Given != nil {
			pairsEnd, queries, values = len(p), nil, nil
			for j := range a {
				if ex.IsGiven(j) != (j%2 == 0) {
					return fmt.Errorf("answer %v: given positions %v do not alternate query, value", a, ex.Given)
				}
				if j%2 == 0 {
					queries = append(queries, a[j])
				} else {
					values = append(values, a[j])
				}
			}
		}
		if len(queries) != len(values) || len(queries) == 0 || pairsEnd%2 != 0 {
			return fmt.Errorf("bad shapes %v -> %v", p, a)
		}
		pairs := map[string]string{}
		for i := 0; i+1 < pairsEnd; i += 2 {
			if _, dup := pairs[p[i]]; dup {
				return fmt.Errorf("key %s repeats in %v", p[i], p)
			}
			if !strings.Contains("abcdefghijklmnopqrstuvwxyz", p[i]) || !strings.Contains("0123456789ABCDEF", p[i+1]) {
				return fmt.Errorf("pair %s %s is not letter digit", p[i], p[i+1])
			}
			pairs[p[i]] = p[i+1]
		}
		if q := task.Params().Queries; q == data.QueriesAll && len(queries) != len(pairs) || q > 1 && len(queries) != q {
			return fmt.Errorf("%d queries for %d pairs, queries=%d", len(queries), len(pairs), q)
		}
		asked := map[string]bool{}
		for i, q := range queries {
			v, ok := pairs[q]
			if !ok || v != values[i] || asked[q] {
				return fmt.Errorf("query %s of %v: answer %s, want %s (asked before: %v)", q, p, values[i], v, asked[q])
			}
			asked[q] = true
		}
	case "add":
		n := task.Params().Digits
		x, _ := new(big.Int).SetString(strings.Join(p[:n], ""), 10)
		y, _ := new(big.Int).SetString(strings.Join(p[n:], ""), 10)
		r := slices.Clone(a)
		slices.Reverse(r)
		s, ok := new(big.Int).SetString(strings.Join(r, ""), 10)
		if x == nil || y == nil || !ok || len(a) != n+1 || s.Cmp(new(big.Int).Add(x, y)) != 0 {
			return fmt.Errorf("%v + %v: reversed answer %v does not reconstruct the sum", p[:n], p[n:], a)
		}
	default:
		return fmt.Errorf("no independent check for %q", task.Name())
	}
	return nil
}

func TestGeneratedExamplesAreCorrect(t *testing.T) {
	for _, tc := range taskCases {
		task := mustNew(t, tc.name, tc.cfg)
		rng := rand.New(rand.NewPCG(7, 0))
		longest := 0
		for i := 0; i < 2000; i++ {
			ex := task.Generate(rng)
			if err := check(t, task, ex); err != nil {
				t.Fatalf("%s %+v: generated %v: %v", tc.name, tc.cfg, ex, err)
			}
			if err := task.ValidatePrompt(ex.Shown()); err != nil {
				t.Fatalf("%s: generated prompt rejected: %v", tc.name, err)
			}
			got, err := task.Solve(ex.Shown())
			if err != nil || !slices.Equal(got, ex.Targets()) {
				t.Fatalf("%s: Solve(%v) = %v, %v, want %v", tc.name, ex.Shown(), got, err, ex.Targets())
			}
			checkFrame(t, task, ex)
			l := len(ex.Prompt) + 1 + len(ex.Answer)
			if l > task.MaxLen() {
				t.Fatalf("%s: example of length %d exceeds MaxLen %d", tc.name, l, task.MaxLen())
			}
			longest = max(longest, l)
		}
		if longest != task.MaxLen() {
			t.Errorf("%s %+v: longest example %d, MaxLen %d: MaxLen is not tight", tc.name, tc.cfg, longest, task.MaxLen())
		}
	}
}

// Solve checked against answers worked by hand.
func TestSolveByHand(t *testing.T) {
	tests := []struct {
		name           string
		cfg            data.TaskConfig
		prompt, answer string
	}{
		{"sort", data.TaskConfig{Length: 6, Alphabet: 3}, "2 0 1 1 0 2", "0 0 1 1 2 2"},
		{"sort", data.TaskConfig{Length: 3, Alphabet: 12}, "b 9 a", "9 a b"},
		{"copy", data.TaskConfig{MinLength: 1, MaxLength: 5, Alphabet: 4}, "3 1 2", "3 1 2"},
		{"reverse", data.TaskConfig{MinLength: 1, MaxLength: 5, Alphabet: 4}, "3 1 2 2", "2 2 1 3"},
		{"recall", data.TaskConfig{Pairs: 3, Keys: 4, Values: 10}, "a 3 d 5 c 1 d", "5"},
		{"recall", data.TaskConfig{MinPairs: 1, MaxPairs: 3, Keys: 4, Values: 10}, "b 7 b", "7"},
		{"add", data.TaskConfig{Digits: 2}, "8 5 5 0", "5 3 1"},       // 85+50=135
		{"add", data.TaskConfig{Digits: 2}, "0 7 0 2", "9 0 0"},       // 07+02=009
		{"add", data.TaskConfig{Digits: 3}, "9 9 9 0 0 1", "0 0 0 1"}, // 999+1=1000
	}
	for _, tt := range tests {
		task := mustNew(t, tt.name, tt.cfg)
		p, err := data.ParsePrompt(task, tt.prompt)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		got, err := task.Solve(p)
		if err != nil {
			t.Fatalf("%s: Solve(%q): %v", tt.name, tt.prompt, err)
		}
		if s := task.Vocab().Decode(got); s != tt.answer {
			t.Errorf("%s: Solve(%q) = %q, want %q", tt.name, tt.prompt, s, tt.answer)
		}
	}
}

func TestReverseTwiceIsIdentity(t *testing.T) {
	task := mustNew(t, "reverse", data.DefaultConfig("reverse"))
	rng := rand.New(rand.NewPCG(3, 0))
	for i := 0; i < 500; i++ {
		p := task.Generate(rng).Prompt
		once, err := task.Solve(p)
		if err != nil {
			t.Fatal(err)
		}
		twice, err := task.Solve(once)
		if err != nil || !slices.Equal(twice, p) {
			t.Fatalf("reverse(reverse(%v)) = %v, %v", p, twice, err)
		}
	}
}

func TestValidatePromptRejects(t *testing.T) {
	all := data.TaskConfig{Pairs: 2, Keys: 4, Values: 10, Queries: data.QueriesAll}
	tests := []struct {
		name   string
		cfg    data.TaskConfig
		prompt []int // ids; symbol ids start at 2
		want   string
	}{
		{"sort", data.TaskConfig{Length: 6, Alphabet: 3}, []int{2, 3, 4}, "prompt has 3 symbols, want 6"},
		{"sort", data.TaskConfig{Length: 3, Alphabet: 3}, []int{2, 1, 4}, `prompt holds "|" (id 1) at position 1`},
		{"sort", data.TaskConfig{Length: 3, Alphabet: 3}, []int{2, 0, 4}, `prompt holds "_" (id 0) at position 1`},
		{"sort", data.TaskConfig{Length: 3, Alphabet: 3}, []int{2, 5, 4}, "prompt holds id 5 (outside the vocabulary) at position 1"},
		{"copy", data.TaskConfig{MinLength: 2, MaxLength: 4, Alphabet: 3}, []int{2}, "prompt has 1 symbol, want 2 to 4"},
		{"copy", data.TaskConfig{MinLength: 2, MaxLength: 4, Alphabet: 3}, []int{}, "want 2 to 4"},
		{"reverse", data.TaskConfig{Length: 2, Alphabet: 3}, []int{-1, 2}, "holds id -1 (outside the vocabulary) at position 0"},
		{"add", data.TaskConfig{Digits: 2}, []int{2, 3, 4}, "prompt has 3 digits, want 4"},
		{"add", data.TaskConfig{Digits: 1}, []int{2, 12}, "holds id 12 (outside the vocabulary) at position 1"},
		// recall vocab with Values 10, Keys 4: digits are ids 2..11, keys a..d ids 12..15.
		{"recall", data.TaskConfig{Pairs: 2, Keys: 4, Values: 10}, []int{12, 2, 13, 3}, "prompt has 4 tokens, want 5"},
		{"recall", data.TaskConfig{Pairs: 2, Keys: 4, Values: 10}, []int{2, 2, 13, 3, 13}, `holds "0" (id 2) at position 0, want a key, a to d`},
		{"recall", data.TaskConfig{Pairs: 2, Keys: 4, Values: 10}, []int{12, 13, 13, 3, 13}, `holds "b" (id 13) at position 1, want a value, 0 to 9`},
		{"recall", data.TaskConfig{Pairs: 2, Keys: 4, Values: 10}, []int{12, 2, 12, 3, 12}, "repeats the key at position 0"},
		{"recall", data.TaskConfig{Pairs: 2, Keys: 4, Values: 10}, []int{12, 2, 13, 3, 14}, `prompt ends in query "c" (id 14) at position 4, which is not one of its keys`},
		{"recall", data.TaskConfig{MinPairs: 1, MaxPairs: 2, Keys: 4, Values: 10}, []int{12, 2, 13, 3, 14, 4, 12}, "want an odd count from 3 to 5"},
		// Multi-query: the pairs, then every key (or Queries of them) once.
		{"recall", all, []int{12, 2, 13, 3, 13}, "prompt has 5 tokens, want 6 (key value pairs, then every key once as queries)"},
		{"recall", all, []int{12, 2, 13, 3, 13, 14}, `prompt holds query "c" (id 14) at position 5, which is not one of its keys`},
		{"recall", all, []int{12, 2, 13, 3, 13, 13}, `holds query "b" (id 13) at position 5, which repeats the query at position 4`},
		{"recall", data.TaskConfig{MinPairs: 2, MaxPairs: 4, Keys: 4, Values: 10, Queries: data.QueriesAll}, []int{12, 2, 13, 3, 13}, "want one of 6, 9, … 12"},
		{"recall", data.TaskConfig{MinPairs: 2, MaxPairs: 3, Keys: 4, Values: 10, Queries: 2}, []int{12, 2, 13, 3, 13}, "want 6 or 8 (key value pairs, then 2 distinct keys as queries)"},
	}
	for _, tt := range tests {
		task := mustNew(t, tt.name, tt.cfg)
		err := task.ValidatePrompt(tt.prompt)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `"`+tt.name+`"`) {
			t.Errorf("%s: ValidatePrompt(%v) = %v, want an error naming the task and saying %q", tt.name, tt.prompt, err, tt.want)
		}
		// A command line writes its own sentence from the problem: it must
		// read after the prompt, without the prefixes.
		var pe *data.PromptError
		if !errors.As(err, &pe) || pe.Task != tt.name || "data: task \""+pe.Task+"\": prompt "+pe.Problem != err.Error() {
			t.Errorf("%s: ValidatePrompt(%v) = %v, want a *data.PromptError whose Problem follows \"prompt\"", tt.name, tt.prompt, err)
		}
		if _, err := task.Solve(tt.prompt); err == nil {
			t.Errorf("%s: Solve(%v) succeeded on an invalid prompt", tt.name, tt.prompt)
		}
	}
}

func TestParsePrompt(t *testing.T) {
	task := mustNew(t, "sort", data.DefaultConfig("sort"))
	if _, err := data.ParsePrompt(task, "2 0 1 1 0 7"); err == nil || !strings.Contains(err.Error(), `prompt holds "7" at position 5, which is not a symbol of the task (0 1 2)`) {
		t.Errorf("unknown symbol: %v", err)
	}
	if _, err := data.ParsePrompt(task, "2 0 1"); err == nil || !strings.Contains(err.Error(), "want 6") {
		t.Errorf("short prompt: %v", err)
	}
	if _, err := data.ParsePrompt(nil, "2"); err == nil {
		t.Error("nil task accepted")
	}
}

func TestGenerateDeterminism(t *testing.T) {
	for _, tc := range taskCases {
		task := mustNew(t, tc.name, tc.cfg)
		draw := func(seed uint64) []data.Example {
			rng := rand.New(rand.NewPCG(seed, 0))
			out := make([]data.Example, 100)
			for i := range out {
				out[i] = task.Generate(rng)
			}
			return out
		}
		a, b, c := draw(42), draw(42), draw(43)
		for i := range a {
			if !slices.Equal(a[i].Prompt, b[i].Prompt) || !slices.Equal(a[i].Answer, b[i].Answer) {
				t.Fatalf("%s: same seed, example %d differs: %v vs %v", tc.name, i, a[i], b[i])
			}
		}
		same := 0
		for i := range a {
			if slices.Equal(a[i].Prompt, c[i].Prompt) {
				same++
			}
		}
		if same > 50 {
			t.Errorf("%s: seeds 42 and 43 agree on %d of 100 prompts", tc.name, same)
		}
	}
	// A nil rng is a fixed seed-0 generator, not a panic.
	task := mustNew(t, "sort", data.DefaultConfig("sort"))
	want := task.Generate(rand.New(rand.NewPCG(0, 0)))
	if got := task.Generate(nil); !slices.Equal(got.Prompt, want.Prompt) {
		t.Errorf("Generate(nil) = %v, want %v", got, want)
	}
}

// NumPrompts matches the distinct prompts a small task actually generates,
// which also shows that Generate reaches the whole space.
func TestNumPrompts(t *testing.T) {
	tests := []struct {
		name string
		cfg  data.TaskConfig
		want float64
	}{
		{"sort", data.TaskConfig{Length: 2, Alphabet: 3}, 9},
		{"copy", data.TaskConfig{MinLength: 1, MaxLength: 3, Alphabet: 2}, 2 + 4 + 8},
		{"recall", data.TaskConfig{Pairs: 2, Keys: 3, Values: 2}, 6 * 4 * 2},
		{"recall", data.TaskConfig{MinPairs: 1, MaxPairs: 2, Keys: 3, Values: 2}, 3*2*1 + 6*4*2},
		{"add", data.TaskConfig{Digits: 1}, 100},
	}
	for _, tt := range tests {
		task := mustNew(t, tt.name, tt.cfg)
		if got := task.NumPrompts(); got != tt.want {
			t.Errorf("%s %+v: NumPrompts = %v, want %v", tt.name, tt.cfg, got, tt.want)
		}
		seen := map[string]bool{}
		rng := rand.New(rand.NewPCG(1, 1))
		for i := 0; i < 20000; i++ {
			seen[fmt.Sprint(task.Generate(rng).Prompt)] = true
		}
		if float64(len(seen)) != tt.want {
			t.Errorf("%s %+v: generated %d distinct prompts, want %v", tt.name, tt.cfg, len(seen), tt.want)
		}
	}
	if got := mustNew(t, "sort", data.DefaultConfig("sort")).NumPrompts(); got != 729 {
		t.Errorf("sort n=6 k=3: NumPrompts = %v, want 729", got)
	}
}

// Variable-length tasks cover their whole range.
func TestVariableLengths(t *testing.T) {
	tests := []struct {
		name   string
		cfg    data.TaskConfig
		minLen int
		maxLen int // prompt lengths
	}{
		{"copy", data.TaskConfig{MinLength: 2, MaxLength: 9, Alphabet: 5}, 2, 9},
		{"reverse", data.TaskConfig{MinLength: 1, MaxLength: 4, Alphabet: 5}, 1, 4},
		{"recall", data.TaskConfig{MinPairs: 1, MaxPairs: 4, Keys: 6, Values: 10}, 3, 9},
	}
	for _, tt := range tests {
		task := mustNew(t, tt.name, tt.cfg)
		rng := rand.New(rand.NewPCG(5, 0))
		seen := map[int]bool{}
		for i := 0; i < 2000; i++ {
			seen[len(task.Generate(rng).Prompt)] = true
		}
		for n := tt.minLen; n <= tt.maxLen; n++ {
			if tt.name == "recall" && n%2 == 0 {
				continue
			}
			if !seen[n] {
				t.Errorf("%s: no prompt of length %d in 2000 draws (seen %v)", tt.name, n, seen)
			}
		}
		if len(seen) == 1 {
			t.Errorf("%s: every prompt has the same length", tt.name)
		}
	}
}
