package data_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/data"
)

func key(p []int) string { return fmt.Sprint(p) }

func TestStreamDisjoint(t *testing.T) {
	tests := []struct {
		name  string
		cfg   data.TaskConfig
		nTest int
	}{
		// sort n=6 k=3 has 729 prompts: a 200-prompt test set is hit by more
		// than a quarter of raw draws, so leaks would show at once.
		{"sort", data.DefaultConfig("sort"), 200},
		{"copy", data.TaskConfig{MinLength: 1, MaxLength: 4, Alphabet: 3}, 60},
		{"recall", data.TaskConfig{Pairs: 2, Keys: 3, Values: 2}, 40},
		{"add", data.TaskConfig{Digits: 1}, 90},
		{"reverse", data.DefaultConfig("reverse"), 1000},
	}
	for _, tt := range tests {
		task := mustNew(t, tt.name, tt.cfg)
		s, err := data.NewStream(task, 11, tt.nTest)
		if err != nil {
			t.Fatal(err)
		}
		test := s.Test()
		if len(test) != tt.nTest {
			t.Fatalf("%s: %d test examples, want %d", tt.name, len(test), tt.nTest)
		}
		held := map[string]bool{}
		for _, ex := range test {
			if held[key(ex.Prompt)] {
				t.Fatalf("%s: test prompt %v repeats", tt.name, ex.Prompt)
			}
			held[key(ex.Prompt)] = true
			if err := check(t, task, ex); err != nil {
				t.Fatalf("%s: test example: %v", tt.name, err)
			}
			if !s.IsTest(ex.Prompt) {
				t.Fatalf("%s: IsTest(%v) = false for a test prompt", tt.name, ex.Prompt)
			}
		}
		trainSeen := map[string]bool{}
		for i := 0; i < 20000; i++ {
			ex := s.Next()
			if held[key(ex.Prompt)] {
				t.Fatalf("%s: training example %d %v is in the test set", tt.name, i, ex.Prompt)
			}
			trainSeen[key(ex.Prompt)] = true
		}
		if s.Drawn() != 20000 {
			t.Errorf("%s: Drawn() = %d, want 20000", tt.name, s.Drawn())
		}
		// For the small spaces, training reaches every prompt not held out.
		if space := task.NumPrompts(); space < 1000 && float64(len(trainSeen)+tt.nTest) != space {
			t.Errorf("%s: training saw %d prompts + %d test = %d, want all %v", tt.name, len(trainSeen), tt.nTest, len(trainSeen)+tt.nTest, space)
		}
	}
}

func TestStreamDeterminism(t *testing.T) {
	task := mustNew(t, "copy", data.DefaultConfig("copy"))
	draw := func(seed uint64, nTest int) ([]data.Example, []data.Example) {
		s, err := data.NewStream(task, seed, nTest)
		if err != nil {
			t.Fatal(err)
		}
		return s.Test(), s.Take(300)
	}
	equal := func(a, b []data.Example) bool {
		return slices.EqualFunc(a, b, func(x, y data.Example) bool {
			return slices.Equal(x.Prompt, y.Prompt) && slices.Equal(x.Answer, y.Answer)
		})
	}
	test1, train1 := draw(9, 50)
	test2, train2 := draw(9, 50)
	if !equal(test1, test2) || !equal(train1, train2) {
		t.Error("same seed gave different data")
	}
	test3, train3 := draw(10, 50)
	if equal(test1, test3) || equal(train1, train3) {
		t.Error("seeds 9 and 10 gave the same data")
	}
	// A larger test set from the same seed extends the smaller one.
	test4, _ := draw(9, 80)
	if !equal(test4[:50], test1) {
		t.Error("the first 50 of an 80-example test set differ from the 50-example test set")
	}
}

func TestStreamTooSmall(t *testing.T) {
	tests := []struct {
		name  string
		cfg   data.TaskConfig
		nTest int
		want  string
	}{
		{"sort", data.TaskConfig{Length: 2, Alphabet: 2}, 4, "only 4 distinct prompts"},
		{"sort", data.TaskConfig{Length: 2, Alphabet: 2}, 10, "only 4 distinct prompts"},
		{"sort", data.DefaultConfig("sort"), 729, "only 729 distinct prompts"},
		{"add", data.TaskConfig{Digits: 1}, 100, "only 100 distinct prompts"},
		{"recall", data.TaskConfig{Pairs: 1, Keys: 1, Values: 2}, 2, "only 2 distinct prompts"},
		{"copy", data.DefaultConfig("copy"), -1, "must not be negative"},
	}
	for _, tt := range tests {
		task := mustNew(t, tt.name, tt.cfg)
		_, err := data.NewStream(task, 1, tt.nTest)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `"`+tt.name+`"`) {
			t.Errorf("%s %+v nTest=%d: error %v, want one naming the task and saying %q", tt.name, tt.cfg, tt.nTest, err, tt.want)
		}
	}
	// One prompt left over is enough, and training then yields only it.
	task := mustNew(t, "copy", data.TaskConfig{Length: 2, Alphabet: 2})
	s, err := data.NewStream(task, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	first := s.Next().Prompt
	for i := 0; i < 100; i++ {
		if p := s.Next().Prompt; !slices.Equal(p, first) {
			t.Fatalf("training yielded %v and %v with one prompt left", first, p)
		}
	}
	if _, err := data.NewStream(nil, 1, 1); err == nil {
		t.Error("NewStream accepted a nil task")
	}
}

func TestStreamStateRestore(t *testing.T) {
	task := mustNew(t, "recall", data.TaskConfig{MinPairs: 1, MaxPairs: 4, Keys: 5, Values: 3})
	s, err := data.NewStream(task, 21, 100)
	if err != nil {
		t.Fatal(err)
	}
	s.Take(137)
	state, err := s.State()
	if err != nil {
		t.Fatal(err)
	}
	want := s.Take(500)

	// A resumed run: a fresh stream with the same arguments, then Restore.
	r, err := data.NewStream(task, 21, 100)
	if err != nil {
		t.Fatal(err)
	}
	r.Take(3) // a fresh stream's own position must not matter
	if err := r.Restore(state); err != nil {
		t.Fatal(err)
	}
	if again, err := r.State(); err != nil || string(again) != string(state) {
		t.Errorf("State() right after Restore = %s, %v, want %s", again, err, state)
	}
	if r.Drawn() != 137 {
		t.Errorf("restored Drawn() = %d, want 137", r.Drawn())
	}
	got := r.Take(500)
	for i := range want {
		if !slices.Equal(got[i].Prompt, want[i].Prompt) {
			t.Fatalf("restored stream differs at example %d: %v vs %v", i, got[i].Prompt, want[i].Prompt)
		}
	}
	// Restoring into the original rewinds it.
	if err := s.Restore(state); err != nil {
		t.Fatal(err)
	}
	if again := s.Next(); !slices.Equal(again.Prompt, want[0].Prompt) {
		t.Errorf("rewound stream yields %v, want %v", again.Prompt, want[0].Prompt)
	}

	// States from another run are refused, and leave the stream unchanged.
	other := func(name string, cfg data.TaskConfig, seed uint64, nTest int) []byte {
		o, err := data.NewStream(mustNew(t, name, cfg), seed, nTest)
		if err != nil {
			t.Fatal(err)
		}
		b, err := o.State()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var corrupt map[string]any
	if err := json.Unmarshal(state, &corrupt); err != nil {
		t.Fatal(err)
	}
	corrupt["pcg"] = "AAAA"
	badPCG, _ := json.Marshal(corrupt)
	bad := []struct {
		state []byte
		want  string
	}{
		{other("sort", data.DefaultConfig("sort"), 21, 100), `state is for task "sort"`},
		{other("recall", data.DefaultConfig("recall"), 21, 100), "state has params"},
		{other("recall", task.Params(), 22, 100), "state has seed 22"},
		{other("recall", task.Params(), 21, 99), "test set of 99"},
		{[]byte("not json"), "restore stream"},
		{nil, "restore stream"},
		{badPCG, "restore stream"},
	}
	before, _ := s.State()
	for _, b := range bad {
		err := s.Restore(b.state)
		if err == nil || !strings.Contains(err.Error(), b.want) || !strings.Contains(err.Error(), `task "recall"`) {
			t.Errorf("Restore(%.40q) = %v, want an error saying %q", b.state, err, b.want)
		}
	}
	if after, _ := s.State(); string(after) != string(before) {
		t.Error("a failed Restore changed the stream")
	}
}

// TestSortNeverHoldsOutConstantPrompts: a constant sort prompt is the only
// one with its answer, so holding it out would ask the model for an answer it
// was never shown.
func TestSortNeverHoldsOutConstantPrompts(t *testing.T) {
	task, err := data.New("sort", data.TaskConfig{Length: 3, Alphabet: 2})
	if err != nil {
		t.Fatal(err)
	}
	// 8 prompts, 2 of them constant: a test set of 6 must be exactly the rest.
	s, err := data.NewStream(task, 1, 6)
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range s.Test() {
		if ex.Prompt[0] == ex.Prompt[1] && ex.Prompt[1] == ex.Prompt[2] {
			t.Errorf("constant prompt %v was held out", ex.Prompt)
		}
	}
	if _, err := data.NewStream(task, 1, 7); err == nil {
		t.Error("a test set of 7 of the 6 holdable prompts: no error")
	}
}

// Examples a stream carves from one arena block are independent: appending
// to one leaves the next as it was, and they are the examples that
// Generate's own allocations give (a task wrapped to hide the arena).
func TestStreamArenaExamplesIndependent(t *testing.T) {
	task, err := data.New("sort", data.DefaultConfig("sort"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := data.NewStream(task, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	twin, err := data.NewStream(struct{ data.Task }{task}, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Draw(600) // more than one arena block
	if err != nil {
		t.Fatal(err)
	}
	want, err := twin.Draw(600)
	if err != nil {
		t.Fatal(err)
	}
	next := slices.Clone(got[1].Prompt)
	grown := append(got[0].Answer, 99, 99, 99) // the answer is last in its carving
	if !slices.Equal(got[1].Prompt, next) || len(grown) != len(got[0].Answer)+3 {
		t.Errorf("appending to example 0's answer changed example 1's prompt: %v, want %v", got[1].Prompt, next)
	}
	for i := range got {
		if !slices.Equal(got[i].Prompt, want[i].Prompt) || !slices.Equal(got[i].Answer, want[i].Answer) {
			t.Fatalf("example %d: %v, want %v", i, got[i], want[i])
		}
	}
}
