package data_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/data"
)

func TestNames(t *testing.T) {
	names := data.Names()
	if !slices.IsSorted(names) || len(names) != 6 {
		t.Errorf("Names() = %v, want 6 sorted names", names)
	}
	for _, n := range names {
		if _, err := data.New(n, data.DefaultConfig(n)); err != nil {
			t.Errorf("New(%q, DefaultConfig) = %v", n, err)
		}
	}
}

func TestDefaultConfigSort(t *testing.T) {
	want := data.TaskConfig{Length: 6, Alphabet: 3}
	if got := data.DefaultConfig("sort"); got != want {
		t.Errorf("DefaultConfig(sort) = %+v, want minGPT's %+v", got, want)
	}
	if got := data.DefaultConfig("nope"); got != (data.TaskConfig{}) {
		t.Errorf("DefaultConfig(nope) = %+v, want zero", got)
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  data.TaskConfig
		want string // substring of the error, besides the task name
	}{
		{"sorting", data.TaskConfig{}, "known tasks: add, chars, copy, recall, reverse, sort"},
		{"sort", data.TaskConfig{Length: 0, Alphabet: 3}, "length must be positive"},
		{"sort", data.TaskConfig{Length: -2, Alphabet: 3}, "length must be positive, got -2"},
		{"sort", data.TaskConfig{Length: 6, Alphabet: 0}, "alphabet must be positive"},
		{"sort", data.TaskConfig{Length: 6, Alphabet: 37}, "alphabet 37 is too large (at most 36)"},
		{"copy", data.TaskConfig{Length: 65, Alphabet: 3}, "length 65 is too large"},
		{"copy", data.TaskConfig{Length: 4, MinLength: 2, MaxLength: 5, Alphabet: 3}, "not both"},
		{"copy", data.TaskConfig{MinLength: 5, MaxLength: 2, Alphabet: 3}, "min_length 5 is greater than max_length 2"},
		{"reverse", data.TaskConfig{MinLength: 2, Alphabet: 3}, "max_length must be positive"},
		{"reverse", data.TaskConfig{MinLength: -1, MaxLength: 3, Alphabet: 3}, "min_length must be positive"},
		{"sort", data.TaskConfig{Length: 6, Alphabet: 3, Digits: 2}, "digits is not a parameter of sort"},
		{"add", data.TaskConfig{Digits: 0}, "digits must be positive"},
		{"add", data.TaskConfig{Digits: 33}, "digits 33 is too large"},
		{"add", data.TaskConfig{Digits: 2, Alphabet: 10}, "alphabet is not a parameter of add"},
		{"recall", data.TaskConfig{Pairs: 4, Keys: 3, Values: 10}, "4 pairs need 4 distinct keys, but keys is 3"},
		{"recall", data.TaskConfig{Pairs: 4, Keys: 27, Values: 10}, "keys 27 is too large"},
		{"recall", data.TaskConfig{Pairs: 4, Keys: 8, Values: 17}, "values 17 is too large"},
		{"recall", data.TaskConfig{Pairs: 4, Keys: 8}, "values must be positive"},
		{"recall", data.TaskConfig{MinPairs: 3, MaxPairs: 2, Keys: 8, Values: 10}, "min_pairs 3 is greater than max_pairs 2"},
		{"recall", data.TaskConfig{Pairs: 2, Keys: 8, Values: 10, Length: 5}, "length is not a parameter of recall"},
	}
	for _, tt := range tests {
		task, err := data.New(tt.name, tt.cfg)
		if err == nil {
			t.Errorf("New(%q, %+v) = %v, want an error", tt.name, tt.cfg, task)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, `"`+tt.name+`"`) || !strings.Contains(msg, tt.want) {
			t.Errorf("New(%q, %+v) error = %q, want it to name the task and say %q", tt.name, tt.cfg, msg, tt.want)
		}
	}
}

// Params is canonical and round-trips through JSON and New.
func TestParamsRoundTrip(t *testing.T) {
	tests := []struct {
		name     string
		cfg, out data.TaskConfig
	}{
		{"copy", data.TaskConfig{MinLength: 3, MaxLength: 8, Alphabet: 10}, data.TaskConfig{MinLength: 3, MaxLength: 8, Alphabet: 10}},
		{"reverse", data.TaskConfig{MinLength: 4, MaxLength: 4, Alphabet: 5}, data.TaskConfig{Length: 4, Alphabet: 5}},
		{"sort", data.TaskConfig{Length: 6, Alphabet: 3}, data.TaskConfig{Length: 6, Alphabet: 3}},
		{"recall", data.TaskConfig{MinPairs: 2, MaxPairs: 5, Keys: 8, Values: 4}, data.TaskConfig{MinPairs: 2, MaxPairs: 5, Keys: 8, Values: 4}},
		{"add", data.TaskConfig{Digits: 3}, data.TaskConfig{Digits: 3}},
	}
	for _, tt := range tests {
		task, err := data.New(tt.name, tt.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := task.Params(); got != tt.out {
			t.Errorf("%s: Params() = %+v, want %+v", tt.name, got, tt.out)
		}
		b, err := json.Marshal(task.Params())
		if err != nil {
			t.Fatal(err)
		}
		var back data.TaskConfig
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		again, err := data.New(task.Name(), back)
		if err != nil {
			t.Fatalf("%s: New from JSON %s: %v", tt.name, b, err)
		}
		if again.Params() != task.Params() || !reflect.DeepEqual(again.Vocab().Symbols(), task.Vocab().Symbols()) || again.MaxLen() != task.MaxLen() {
			t.Errorf("%s: task rebuilt from %s differs", tt.name, b)
		}
	}
	if s := (data.TaskConfig{MinPairs: 2, MaxPairs: 5, Keys: 8}).String(); s != "min_pairs=2 max_pairs=5 keys=8" {
		t.Errorf("String() = %q", s)
	}
	b, _ := json.Marshal(data.TaskConfig{Length: 6, Alphabet: 3})
	if string(b) != `{"length":6,"alphabet":3}` {
		t.Errorf("JSON of sort config = %s", b)
	}
}
