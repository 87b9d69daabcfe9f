package data

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// corpusText rebuilds the text a corpus holds.
func corpusText(c *Corpus) string {
	var b strings.Builder
	for _, id := range c.ids {
		b.WriteRune(c.symbols[id])
	}
	return b.String()
}

func writeFile(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A file, a directory (its regular files, sorted, subdirectories not read),
// a glob and a standard-library package each name the files they should,
// joined in that order; the text survives a character split across the
// read buffer's boundary.
func TestLoadCorpus(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "b.txt"), "bé\n")
	writeFile(t, filepath.Join(dir, "a.txt"), "a→\n")
	writeFile(t, filepath.Join(dir, "sub", "c.txt"), "never read")
	for _, c := range []struct{ spec, want string }{
		{filepath.Join(dir, "b.txt"), "bé\n"},
		{dir, "a→\nbé\n"},
		{filepath.Join(dir, "*.txt"), "a→\nbé\n"},
		{filepath.Join(dir, "[b]*"), "bé\n"},
	} {
		corpus, err := LoadCorpus(c.spec)
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		if got := corpusText(corpus); got != c.want {
			t.Errorf("%s: text %q, want %q", c.spec, got, c.want)
		}
		if corpus.Len() != utf8.RuneCountInString(c.want) || corpus.Bytes != int64(len(c.want)) {
			t.Errorf("%s: %d characters, %d bytes, want %d and %d", c.spec, corpus.Len(), corpus.Bytes, utf8.RuneCountInString(c.want), len(c.want))
		}
	}
	// A 3-byte character across the boundary of the first read.
	long := strings.Repeat("x", readChunk-1) + "→" + "y"
	corpus, err := LoadCorpus(writeFile(t, filepath.Join(dir, "long", "f"), long))
	if err != nil {
		t.Fatal(err)
	}
	if got := corpusText(corpus); got != long {
		t.Errorf("a character across the read boundary: the text differs (%d characters, want %d)", corpus.Len(), utf8.RuneCountInString(long))
	}
	// net/http by default, its non-test .go files.
	files, err := ResolveCorpus("")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 || !slices.IsSorted(files) {
		t.Fatalf("default corpus: files %v, want some, sorted", files)
	}
	for _, f := range files {
		if !strings.HasSuffix(f, ".go") || strings.HasSuffix(f, "_test.go") || filepath.Base(filepath.Dir(f)) != "http" {
			t.Errorf("default corpus reads %s, want net/http's non-test .go files only", f)
		}
	}
}

// Every bad corpus is an error naming the path and what is wrong.
func TestCorpusErrors(t *testing.T) {
	dir := t.TempDir()
	empty := t.TempDir()
	writeFile(t, filepath.Join(empty, "sub", "x"), "a subdirectory's file is not read")
	for _, c := range []struct {
		name, spec, want string
	}{
		{"missing", filepath.Join(dir, "nope.txt"), "no such file"},
		{"empty file", writeFile(t, filepath.Join(dir, "empty.txt"), ""), "empty"},
		{"no files", empty, "holds no regular file"},
		{"glob without match", filepath.Join(dir, "*.none"), "matches no regular file"},
		{"binary", writeFile(t, filepath.Join(dir, "bin"), "ELF\x00\x01"), "byte 3 is NUL"},
		{"not UTF-8", writeFile(t, filepath.Join(dir, "latin1"), "caf\xe9 au lait"), "byte 3 is not valid UTF-8"},
		{"truncated UTF-8", writeFile(t, filepath.Join(dir, "cut"), "ab\xe2\x86"), "byte 2 is not valid UTF-8"},
		{"go: outside the tree", "go:../secrets", "standard-library package"},
		{"go: no such package", "go:no/such/package", "no such file"},
	} {
		_, err := LoadCorpus(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), strings.TrimSuffix(c.spec, "/")) {
			t.Errorf("%s: error %v, want one naming %s and saying %q", c.name, err, c.spec, c.want)
		}
	}
}

// LoadCorpus holds two bytes per character, not the text: reading a
// 32 MiB file allocates little more than its 64 MiB of ids (the rule
// README states: 2 bytes a character, read through a 1 MiB buffer).
func TestCorpusMemory(t *testing.T) {
	const n = 32 << 20
	text := strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789 \n", n/38+1)[:n]
	path := writeFile(t, filepath.Join(t.TempDir(), "big.txt"), text)
	text = ""
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	corpus, err := LoadCorpus(path)
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if corpus.Len() != n {
		t.Fatalf("%d characters, want %d", corpus.Len(), n)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	if limit := uint64(2*n + 4<<20); alloc > limit {
		t.Errorf("reading %d characters allocated %d bytes, want at most %d (2 a character and the buffer)", n, alloc, limit)
	}
}

// charsTask writes text and returns chars over it.
func charsTask(t *testing.T, text string, context int, valFraction float64) (*chars, string) {
	t.Helper()
	path := writeFile(t, filepath.Join(t.TempDir(), "text.txt"), text)
	task, err := New("chars", TaskConfig{Data: path, Context: context, ValFraction: valFraction})
	if err != nil {
		t.Fatal(err)
	}
	return task.(*chars), path
}

// The vocabulary is the training text's characters, sorted, after PAD and
// BOS; a validation character the training text lacks is UNK, counted,
// and never a target; windows lie in their part of the text and are laid
// out as BOS c0 … c(T-1) → c0 … cT with no loss on c0.
func TestCharsTask(t *testing.T) {
	train := strings.Repeat("abcab\n", 10)       // 60 characters
	val := "cba\nZZb" + strings.Repeat("abc", 1) // Z unseen in training
	text := train + val
	task, _ := charsTask(t, text, 4, float64(len(val))/float64(len(text)))
	if task.nTrain != len(train) {
		t.Fatalf("training part %d characters, want %d", task.nTrain, len(train))
	}
	v := task.Vocab()
	want := []string{CharPADSymbol, CharBOSSymbol, CharUNKSymbol, "\n", "a", "b", "c"}
	if got := v.Symbols(); !slices.Equal(got, want) {
		t.Errorf("vocabulary %q, want %q", got, want)
	}
	if p := task.Params(); p.Unknown != 2 || p.Chars != len(text) || p.Vocab != "\nabc" || len(p.SHA256) != 64 {
		t.Errorf("recorded %+v: want unknown 2, chars %d, vocab \"\\nabc\", a sha256", p, len(text))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		ex := task.Generate(rng)
		got := v.Decode(ex.Answer)
		if len(ex.Answer) != 5 || !strings.Contains(train, got) || !ex.Given[0] || slices.Contains(ex.Given[1:], true) {
			t.Fatalf("training window %q (given %v): want 5 characters of the training text, only the first given", got, ex.Given)
		}
	}
	held, err := task.heldOut(3)
	if err != nil {
		t.Fatal(err)
	}
	starts := []int{0, 2, 5} // of val: span = 10-4-1 = 5, k·5/2
	unk := v.ids[CharUNKSymbol]
	for k, ex := range held {
		s := starts[k]
		wantIDs, err := v.Encode(strings.ReplaceAll(val[s:s+5], "Z", "a"))
		if err != nil {
			t.Fatal(err)
		}
		for j, r := range val[s : s+5] {
			if r == 'Z' {
				wantIDs[j] = unk
			}
			if given := j == 0 || r == 'Z'; ex.Given[j] != given {
				t.Errorf("window %d position %d (%q): given %v, want %v", k, j, r, ex.Given[j], given)
			}
		}
		if !slices.Equal(ex.Answer, wantIDs) {
			t.Errorf("window %d: %v, want %v (%q at validation offset %d)", k, ex.Answer, wantIDs, val[s:s+5], s)
		}
	}
	b, err := BatchFor(task, held[:1])
	if err != nil {
		t.Fatal(err)
	}
	if b.S != 5 || b.Inputs[0] != v.SEP() || !slices.Equal(b.Inputs[1:5], held[0].Answer[:4]) || !slices.Equal(b.Targets, held[0].Answer) || !slices.Equal(b.Weights, []float64{0, 1, 1, 1, 0}) {
		t.Errorf("batch inputs %v targets %v weights %v: want BOS then the window's first 4, the window, no loss on its first nor on its last (Z, unknown)", b.Inputs, b.Targets, b.Weights)
	}
}

// A configuration that records its corpus rebuilds the vocabulary without
// the text; the text is read, and checked, only when examples are drawn.
func TestCharsRecorded(t *testing.T) {
	text := strings.Repeat("hello, world\n", 20)
	task, path := charsTask(t, text, 8, 0.1)
	p := task.Params()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	again, err := New("chars", p)
	if err != nil {
		t.Fatalf("recorded configuration without its text: %v", err)
	}
	if !slices.Equal(again.Vocab().Symbols(), task.Vocab().Symbols()) || again.Params() != p {
		t.Errorf("rebuilt vocabulary %q params %+v, want %q %+v", again.Vocab().Symbols(), again.Params(), task.Vocab().Symbols(), p)
	}
	if _, err := NewStream(again, 1, 4); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("drawing from a missing text: error %v, want one naming %s", err, path)
	}
	writeFile(t, path, strings.Replace(text, "world", "World", 1))
	changed, err := New("chars", p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewStream(changed, 1, 4); err == nil || !strings.Contains(err.Error(), "not the text the configuration records") {
		t.Errorf("drawing from a changed text: error %v, want one saying it changed", err)
	}
	writeFile(t, path, text)
	if _, err := NewStream(changed, 1, 4); err != nil {
		t.Errorf("the text restored: %v", err)
	}
}

// A stream of chars resumes bit for bit: the windows after Restore are the
// ones the stream would have drawn.
func TestCharsStreamRestore(t *testing.T) {
	task, _ := charsTask(t, strings.Repeat("the quick brown fox jumps over the lazy dog\n", 30), 16, 0.1)
	a, err := NewStream(task, 5, 10)
	if err != nil {
		t.Fatal(err)
	}
	a.Take(7)
	state, err := a.State()
	if err != nil {
		t.Fatal(err)
	}
	want := a.Take(5)
	b, err := NewStream(task, 5, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(state); err != nil {
		t.Fatal(err)
	}
	got := b.Take(5)
	for i := range want {
		if !slices.Equal(got[i].Answer, want[i].Answer) {
			t.Fatalf("window %d after restore: %v, want %v", i, got[i].Answer, want[i].Answer)
		}
	}
}

// Bad parameters are errors naming the parameter.
func TestCharsErrors(t *testing.T) {
	path := writeFile(t, filepath.Join(t.TempDir(), "t.txt"), strings.Repeat("abcdefgh", 10)) // 80 characters
	for _, c := range []struct {
		name string
		cfg  TaskConfig
		want string
	}{
		{"no context", TaskConfig{Data: path, ValFraction: 0.1}, "context must be positive"},
		{"huge context", TaskConfig{Data: path, Context: MaxContext + 1, ValFraction: 0.1}, "context"},
		{"no validation", TaskConfig{Data: path, Context: 4}, "val_fraction"},
		{"all validation", TaskConfig{Data: path, Context: 4, ValFraction: 1}, "val_fraction"},
		{"shorter than a window", TaskConfig{Data: path, Context: 8, ValFraction: 0.1}, "must each hold a window of context+1 = 9 characters"},
		{"another task's parameter", TaskConfig{Data: path, Context: 4, ValFraction: 0.5, Keys: 3}, "keys is not a parameter of chars"},
		{"recorded without vocab", TaskConfig{Data: path, Context: 4, ValFraction: 0.5, SHA256: "x"}, "vocab"},
	} {
		if _, err := New("chars", c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
	if _, err := New("sort", TaskConfig{Length: 6, Alphabet: 3, Data: path}); err == nil || !strings.Contains(err.Error(), "data is not a parameter of sort") {
		t.Errorf("sort with data: error %v, want one naming data", err)
	}
}

// A prompt of a character vocabulary is read character by character, and
// one the vocabulary lacks is named with its position.
func TestCharVocabPrompt(t *testing.T) {
	task, _ := charsTask(t, strings.Repeat("ab c\n", 30), 8, 0.2)
	ids, err := ParsePrompt(task, "ab c")
	if err != nil {
		t.Fatal(err)
	}
	if got := task.Vocab().Decode(ids); got != "ab c" {
		t.Errorf("decoded %q, want %q", got, "ab c")
	}
	if _, err := ParsePrompt(task, "abé"); err == nil || !strings.Contains(err.Error(), `'é' at character 2`) {
		t.Errorf("prompt with é: error %v, want one naming it and its position", err)
	}
	if _, err := ParsePrompt(task, strings.Repeat("a", 9)); err == nil || !strings.Contains(err.Error(), "want 1 to 8") {
		t.Errorf("prompt longer than the context: error %v", err)
	}
	if got := task.Vocab().Labels([]int{1, 2, 3, 4}); !slices.Equal(got, []string{"SEP", `\n`, "␣", "a"}) {
		t.Errorf("labels %q", got)
	}
}
