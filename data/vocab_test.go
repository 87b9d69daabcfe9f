package data_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/data"
)

func TestVocabRoundTrip(t *testing.T) {
	for _, name := range data.Names() {
		task, err := data.New(name, data.DefaultConfig(name))
		if err != nil {
			t.Fatal(err)
		}
		v := task.Vocab()
		if v.PAD() != 0 || v.SEP() == v.PAD() {
			t.Errorf("%s: PAD=%d SEP=%d, want PAD 0 and SEP distinct", name, v.PAD(), v.SEP())
		}
		pad, sep := data.PADSymbol, data.SEPSymbol
		if v.IsChars() { // "_" and "|" are characters of a text
			pad, sep = data.CharPADSymbol, data.CharBOSSymbol
		}
		if got := v.Symbols(); len(got) != v.Size() || got[v.PAD()] != pad || got[v.SEP()] != sep {
			t.Errorf("%s: Symbols() = %q, size %d", name, got, v.Size())
		}
		// Every id maps to a symbol that maps back to it.
		for id := 0; id < v.Size(); id++ {
			sym, err := v.Symbol(id)
			if err != nil {
				t.Fatalf("%s: Symbol(%d): %v", name, id, err)
			}
			back, err := v.ID(sym)
			if err != nil || back != id {
				t.Errorf("%s: ID(Symbol(%d)=%q) = %d, %v", name, id, sym, back, err)
			}
		}
		// Decode then Encode is the identity on generated sequences.
		ex := task.Generate(nil)
		seq := append(append(slices.Clone(ex.Prompt), v.SEP()), ex.Answer...)
		if v.IsChars() { // a text's characters; BOS is no character of it
			seq = ex.Answer
		}
		text := v.Decode(seq)
		got, err := v.Encode(text)
		if err != nil || !slices.Equal(got, seq) {
			t.Errorf("%s: Encode(Decode(%v) = %q) = %v, %v", name, seq, text, got, err)
		}
	}
}

func TestVocabEncode(t *testing.T) {
	v, err := data.NewVocab([]string{"0", "1", "2"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		text    string
		want    []int
		wantErr string
	}{
		{"2 0 1 1 0 2", []int{4, 2, 3, 3, 2, 4}, ""},
		{"  2\t0\n", []int{4, 2}, ""},
		{"", []int{}, ""},
		{"0 | 1 _", []int{2, 1, 3, 0}, ""},
		{"0 3 1", nil, `unknown symbol "3" at position 1`},
		{"01", nil, `unknown symbol "01"`},
	}
	for _, tt := range tests {
		got, err := v.Encode(tt.text)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Encode(%q) error = %v, want %q", tt.text, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("Encode(%q) = %v, %v, want %v", tt.text, got, err, tt.want)
		}
	}
}

func TestVocabErrors(t *testing.T) {
	v, err := data.NewVocab([]string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.ID("c"); err == nil || !strings.Contains(err.Error(), `unknown symbol "c"`) {
		t.Errorf("ID(c) error = %v", err)
	}
	for _, id := range []int{-1, 4, 100} {
		if _, err := v.Symbol(id); err == nil || !strings.Contains(err.Error(), "outside [0, 4)") {
			t.Errorf("Symbol(%d) error = %v", id, err)
		}
	}
	if got := v.Decode([]int{2, 9, -1, 1}); got != "a <?9> <?-1> |" {
		t.Errorf("Decode with bad ids = %q", got)
	}
	for _, syms := range [][]string{{"a", "a"}, {""}, {"a b"}, {data.SEPSymbol}, {data.PADSymbol}} {
		if _, err := data.NewVocab(syms); err == nil {
			t.Errorf("NewVocab(%q) succeeded, want an error", syms)
		}
	}
	// A task's vocabulary names the task in its errors.
	task, err := data.New("sort", data.DefaultConfig("sort"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := task.Vocab().Encode("0 7"); err == nil || !strings.Contains(err.Error(), `task "sort"`) {
		t.Errorf("sort Encode(0 7) error = %v, want it to name the task", err)
	}
}
