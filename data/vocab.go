package data

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// The symbols of the two special tokens. They are single characters that no
// task uses, so that a decoded row such as "2 0 1 | 0 1 2 _ _" stays readable.
const (
	PADSymbol = "_"
	SEPSymbol = "|"
)

// The ids of the special tokens in every Vocab. PAD is 0 so that a zeroed
// buffer is already padding.
const (
	PADID = 0
	SEPID = 1
)

// Vocab maps the tokens of a task between ids 0..Size()-1 and their string
// symbols. Ids 0 and 1 are PAD and SEP; the task's symbols follow in order.
// A Vocab is immutable once made and safe for concurrent use. Only NewVocab
// and the tasks make usable ones: a nil or zero Vocab has no tokens at all,
// and its methods say so with an error (or, where they return none, act as
// an empty vocabulary) rather than panic.
type Vocab struct {
	task    string // owner named in errors; "" for a free-standing vocab
	symbols []string
	ids     map[string]int
	// runes, for a character vocabulary (NewCharVocab), maps each character
	// to its id: text is then read character by character, not in fields.
	runes map[rune]int
}

// The symbols of the special tokens of a character vocabulary, where "_"
// and "|" are characters of the text. BOS is SEP's id: with an empty
// prompt, the separator is the start of every sequence.
const (
	CharPADSymbol = "<pad>"
	CharBOSSymbol = "<bos>"
	CharUNKSymbol = "<unk>"
)

// NewCharVocab returns the vocabulary of a character-level language model:
// PAD, BOS (at SEP's id), UNK if unk, then chars in order, each its own
// token. chars must be distinct and non-empty; any character may be one
// (white space included). Encode and Decode then read and write text
// character by character.
func NewCharVocab(chars []rune, unk bool) (*Vocab, error) {
	v := &Vocab{task: "chars", ids: map[string]int{}, runes: make(map[rune]int, len(chars))}
	if len(chars) == 0 {
		return nil, v.errorf("no characters")
	}
	v.symbols = []string{CharPADSymbol, CharBOSSymbol}
	if unk {
		v.symbols = append(v.symbols, CharUNKSymbol)
	}
	for i, s := range v.symbols {
		v.ids[s] = i
	}
	for i, r := range chars {
		if id, dup := v.runes[r]; dup {
			return nil, v.errorf("character %d %q already has id %d", i, r, id)
		}
		v.runes[r] = len(v.symbols)
		v.ids[string(r)] = len(v.symbols)
		v.symbols = append(v.symbols, string(r))
	}
	return v, nil
}

// IsChars reports whether v is a character vocabulary (NewCharVocab).
func (v *Vocab) IsChars() bool { return v != nil && v.runes != nil }

// NewVocab returns the vocabulary PAD, SEP, symbols... . There must be at
// least one symbol (a vocabulary of PAD and SEP alone can write no example),
// and symbols must be non-empty, free of white space (Encode splits on it),
// distinct, and differ from PADSymbol and SEPSymbol.
func NewVocab(symbols []string) (*Vocab, error) {
	return newVocab("", symbols)
}

func newVocab(task string, symbols []string) (*Vocab, error) {
	if len(symbols) == 0 {
		return nil, (&Vocab{task: task}).errorf("no symbols: want at least one besides %s and %s", PADSymbol, SEPSymbol)
	}
	v := &Vocab{task: task, symbols: make([]string, 0, 2+len(symbols)), ids: make(map[string]int, 2+len(symbols))}
	v.symbols = append(v.symbols, PADSymbol, SEPSymbol)
	v.ids[PADSymbol] = PADID
	v.ids[SEPSymbol] = SEPID
	for i, s := range symbols {
		if s == "" || strings.IndexFunc(s, unicode.IsSpace) >= 0 {
			return nil, v.errorf("symbol %d %q is empty or contains white space", i, s)
		}
		if id, dup := v.ids[s]; dup {
			return nil, v.errorf("symbol %d %q already has id %d", i, s, id)
		}
		v.ids[s] = len(v.symbols)
		v.symbols = append(v.symbols, s)
	}
	return v, nil
}

// errorf prefixes errors with the owning task, so that a CLI user who typed a
// bad prompt learns which task's vocabulary rejected it.
func (v *Vocab) errorf(format string, args ...any) error {
	if v != nil && v.task != "" {
		return fmt.Errorf("data: task %q: vocab: "+format, append([]any{v.task}, args...)...)
	}
	return fmt.Errorf("data: vocab: "+format, args...)
}

// usable reports a nil or zero Vocab, which has not even PAD and SEP, so that
// the methods that return an error can explain instead of answering as if
// the vocabulary were merely small.
func (v *Vocab) usable() error {
	if v == nil {
		return fmt.Errorf("data: vocab: nil Vocab (make one with NewVocab or take a task's)")
	}
	if len(v.symbols) == 0 {
		return fmt.Errorf("data: vocab: zero Vocab has no tokens (make one with NewVocab or take a task's)")
	}
	return nil
}

// Size returns the number of tokens, the row count of an embedding table; 0
// for a nil or zero Vocab.
func (v *Vocab) Size() int {
	if v == nil {
		return 0
	}
	return len(v.symbols)
}

// PAD returns the id of the padding token, which fills rows past their length.
func (v *Vocab) PAD() int { return PADID }

// SEP returns the id of the separator between prompt and answer.
func (v *Vocab) SEP() int { return SEPID }

// Symbols returns every symbol in id order, for writing the vocabulary into a
// run's config or summary; nil for a nil or zero Vocab.
func (v *Vocab) Symbols() []string {
	if v == nil {
		return nil
	}
	return append([]string(nil), v.symbols...)
}

// ID returns the id of sym, or an error listing the known symbols.
func (v *Vocab) ID(sym string) (int, error) {
	if err := v.usable(); err != nil {
		return 0, err
	}
	id, ok := v.ids[sym]
	if !ok {
		return 0, v.errorf("unknown symbol %q (known: %s)", sym, strings.Join(v.symbols, " "))
	}
	return id, nil
}

// Symbol returns the symbol of id, or an error if id is outside the vocabulary.
func (v *Vocab) Symbol(id int) (string, error) {
	if err := v.usable(); err != nil {
		return "", err
	}
	if id < 0 || id >= len(v.symbols) {
		return "", v.errorf("id %d is outside [0, %d)", id, len(v.symbols))
	}
	return v.symbols[id], nil
}

// Labels returns the axis labels of ids, for attention heatmaps: their
// symbols, but the separator and the padding spelt out as SEP and PAD,
// which "|" and "_" alone do not say, and an id outside the vocabulary as
// its number in angle brackets.
func (v *Vocab) Labels(ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		switch id {
		case v.SEP():
			out[i] = "SEP"
		case v.PAD():
			out[i] = "PAD"
		default:
			sym, err := v.Symbol(id)
			if err != nil {
				sym = fmt.Sprintf("<%d>", id)
			}
			if v.IsChars() {
				sym = visible(sym)
			}
			out[i] = sym
		}
	}
	return out
}

// Encode returns the ids of the white-space separated symbols in text, e.g.
// "2 0 1 1 0 2". Empty text gives an empty slice. The error names the first
// unknown symbol and its position.
func (v *Vocab) Encode(text string) ([]int, error) {
	if err := v.usable(); err != nil {
		return nil, err
	}
	ids, bad := v.encode(text)
	if bad >= 0 {
		return nil, v.errorf("unknown symbol %s of %q (%s)", v.describeBad(text, bad), text, v.known())
	}
	return ids, nil
}

// encode returns the ids of text's symbols, or the position of the first
// symbol that is not in v (-1 if none is). A character vocabulary's symbols
// are text's characters.
func (v *Vocab) encode(text string) (ids []int, bad int) {
	if v.IsChars() {
		ids = make([]int, 0, len(text))
		for i, r := range []rune(text) {
			id, ok := v.runes[r]
			if !ok {
				return nil, i
			}
			ids = append(ids, id)
		}
		return ids, -1
	}
	fields := strings.Fields(text)
	ids = make([]int, len(fields))
	for i, f := range fields {
		id, ok := v.ids[f]
		if !ok {
			return nil, i
		}
		ids[i] = id
	}
	return ids, -1
}

// describeBad names the symbol at position bad of text, as encode found it.
func (v *Vocab) describeBad(text string, bad int) string {
	if v.IsChars() {
		return fmt.Sprintf("%q at character %d", []rune(text)[bad], bad)
	}
	return fmt.Sprintf("%q at position %d", strings.Fields(text)[bad], bad)
}

// known describes the symbols text may hold, for errors: a list, or for a
// character vocabulary (a hundred characters or more) their number.
func (v *Vocab) known() string {
	if v.IsChars() {
		return fmt.Sprintf("the vocabulary has the %d characters of the training text", len(v.runes))
	}
	return "known: " + strings.Join(v.symbols, " ")
}

// Decode returns the symbols of ids joined by single spaces, the inverse of
// Encode; a character vocabulary's characters are joined without spaces,
// into the text they stand for. It never fails, because it is used to print
// whatever a model produced: an id outside the vocabulary is shown as <?id>
// (every id, for a nil or zero Vocab).
func (v *Vocab) Decode(ids []int) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		if id >= 0 && id < v.Size() {
			parts[i] = v.symbols[id]
		} else {
			parts[i] = fmt.Sprintf("<?%d>", id)
		}
	}
	if v.IsChars() {
		return strings.Join(parts, "")
	}
	return strings.Join(parts, " ")
}

// visible spells a character that would not show on an axis: white space
// and control characters, as Go quotes them, and the space as ␣.
func visible(sym string) string {
	if sym == " " {
		return "␣"
	}
	if strings.IndexFunc(sym, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		q := strconv.Quote(sym)
		return q[1 : len(q)-1]
	}
	return sym
}

// knownSymbols lists the task symbols (the special tokens left out) for a
// prompt error, or for a character vocabulary says how many there are.
func (v *Vocab) knownSymbols() string {
	if v.IsChars() {
		return v.known()
	}
	return strings.Join(v.symbols[firstSymbol:], " ")
}
