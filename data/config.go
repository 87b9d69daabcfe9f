package data

import (
	"fmt"
	"strconv"
	"strings"
)

// TaskConfig holds the parameters of every task in one flat struct, so that a
// CLI can fill it from flags and a run can write it to JSON. A zero field is
// unset. Each task reads only its own fields and rejects the others, so a
// parameter meant for another task is reported instead of silently ignored.
//
// Sequence lengths (copy, reverse, sort) and pair counts (recall) are given
// either as one fixed value (Length, Pairs) or as an inclusive range
// (MinLength and MaxLength, MinPairs and MaxPairs) drawn uniformly per example.
type TaskConfig struct {
	// Length is the fixed number of prompt symbols of copy, reverse and sort.
	Length int `json:"length,omitempty"`
	// MinLength and MaxLength give a range of prompt lengths instead.
	MinLength int `json:"min_length,omitempty"`
	MaxLength int `json:"max_length,omitempty"`
	// Alphabet is the number k of distinct symbols of copy, reverse and sort:
	// the digits 0-9 first, then the letters a-z. At least 2.
	Alphabet int `json:"alphabet,omitempty"`
	// Digits is the number of digits of each operand of add.
	Digits int `json:"digits,omitempty"`
	// Pairs is the fixed number of key-value pairs of recall.
	Pairs int `json:"pairs,omitempty"`
	// MinPairs and MaxPairs give a range of pair counts instead.
	MinPairs int `json:"min_pairs,omitempty"`
	MaxPairs int `json:"max_pairs,omitempty"`
	// Keys is the number of key symbols of recall (letters a, b, ...); the keys
	// of one prompt are distinct, so Keys bounds the pair count.
	Keys int `json:"keys,omitempty"`
	// Values is the number of value symbols of recall (hexadecimal digits
	// 0, 1, … 9, A, … F, so never a key). At least 2.
	Values int `json:"values,omitempty"`
	// Queries is how many keys of a recall prompt are asked back:
	// QueriesAll (the default) asks every key in a random order, each
	// followed by its value, a loss at every value (multi-query associative
	// recall); a count from 2 asks that many distinct keys so; 0 (unset, as
	// in config.json files written before the field existed) or 1 asks one
	// key, before SEP, the single-query framing.
	Queries int `json:"queries,omitempty"`

	// Data names the text of chars: a file, a directory, a glob, or go:PKG
	// for a standard-library package's source (ResolveCorpus).
	Data string `json:"data,omitempty"`
	// Context is the number of characters chars' model reads to predict
	// the next (nanoGPT's block_size).
	Context int `json:"context,omitempty"`
	// ValFraction is the share of chars' text, at its end, held out for
	// validation: the first int((1-ValFraction)·n) characters are trained
	// on, as nanoGPT splits.
	ValFraction float64 `json:"val_fraction,omitempty"`
	// Chars, SHA256, Vocab and Unknown record the corpus chars read: its
	// length in characters, the SHA-256 of its bytes, the characters of
	// the vocabulary in id order, and how many validation characters the
	// training text lacks. New fills them in; given, New rebuilds the
	// vocabulary from them without reading the text, and the text is
	// checked against them when it is read.
	Chars   int    `json:"chars,omitempty"`
	SHA256  string `json:"sha256,omitempty"`
	Vocab   string `json:"vocab,omitempty"`
	Unknown int    `json:"unknown,omitempty"`
}

// QueriesAll is the TaskConfig.Queries that asks every key of the prompt.
const QueriesAll = -1

// Upper bounds on the parameters. They keep MaxLen, and so the attention cost,
// in the range a CPU trains in minutes, and within the symbols available.
const (
	MaxSeqLength = 64 // copy, reverse, sort: prompt symbols
	MaxAlphabet  = 36 // copy, reverse, sort: digits and lower-case letters
	MaxDigits    = 32 // add: digits per operand
	MaxKeys      = 26 // recall: letters
	MaxValues    = 16 // recall: hexadecimal digits
)

// alphabetSymbols are the symbols of copy, reverse and sort, in order.
const alphabetSymbols = "0123456789abcdefghijklmnopqrstuvwxyz"

// DefaultConfig returns parameters that train in minutes on a CPU, the
// configuration a CLI starts from before applying flags. sort is minGPT's
// demo (n=6, k=3); add is minGPT's adder (2 digits). copy and reverse use a
// length range so that batches are padded. An unknown name gives the zero
// TaskConfig, which New rejects with the list of known tasks.
func DefaultConfig(name string) TaskConfig {
	switch name {
	case "copy", "reverse":
		return TaskConfig{MinLength: 3, MaxLength: 8, Alphabet: 10}
	case "sort":
		return TaskConfig{Length: 6, Alphabet: 3}
	case "recall":
		return TaskConfig{Pairs: 4, Keys: 8, Values: 10, Queries: QueriesAll}
	case "add":
		return TaskConfig{Digits: 2}
	case "chars":
		return TaskConfig{Data: DefaultCorpus, Context: defaultContext, ValFraction: defaultValFraction}
	}
	return TaskConfig{}
}

// String lists the set parameters as name=value in field order, e.g.
// "length=6 alphabet=3", for error messages and logs; of what New records
// about a corpus, only its length in characters.
func (c TaskConfig) String() string {
	var parts []string
	for _, f := range c.fields() {
		if f.set() && (!f.recorded || f.name == "chars") {
			parts = append(parts, f.name+"="+f.text)
		}
	}
	if parts == nil {
		return "(no parameters)"
	}
	return strings.Join(parts, " ")
}

// field is one named parameter of a TaskConfig, for generic checks: its
// value as text, "" when unset.
type field struct {
	name string
	text string
	// recorded marks what New records about a corpus rather than a
	// parameter a user sets.
	recorded bool
}

func (f field) set() bool { return f.text != "" }

func (c TaskConfig) fields() []field {
	num := func(name string, v int) field {
		if v == 0 {
			return field{name: name}
		}
		return field{name: name, text: strconv.Itoa(v)}
	}
	out := []field{
		num("length", c.Length), num("min_length", c.MinLength), num("max_length", c.MaxLength),
		num("alphabet", c.Alphabet), num("digits", c.Digits),
		num("pairs", c.Pairs), num("min_pairs", c.MinPairs), num("max_pairs", c.MaxPairs),
		num("keys", c.Keys), num("values", c.Values), num("queries", c.Queries),
		{name: "data", text: c.Data}, num("context", c.Context),
	}
	frac := field{name: "val_fraction"}
	if c.ValFraction != 0 {
		frac.text = strconv.FormatFloat(c.ValFraction, 'g', -1, 64)
	}
	out = append(out, frac)
	for _, f := range []field{num("chars", c.Chars), {name: "sha256", text: c.SHA256}, {name: "vocab", text: c.Vocab}, num("unknown", c.Unknown)} {
		f.recorded = true
		out = append(out, f)
	}
	return out
}

// onlyFields rejects every set field of c that task does not take.
func onlyFields(task string, c TaskConfig, allowed ...string) error {
	for _, f := range c.fields() {
		if !f.set() {
			continue
		}
		ok := false
		for _, a := range allowed {
			ok = ok || a == f.name
		}
		if !ok {
			return fmt.Errorf("data: task %q: %s is not a parameter of %s (it takes %s)", task, f.name, task, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// inRange checks that a required size parameter lies in [1, limit].
func inRange(task, name string, v, limit int) error {
	if v <= 0 {
		return fmt.Errorf("data: task %q: %s must be positive, got %d", task, name, v)
	}
	if v > limit {
		return fmt.Errorf("data: task %q: %s %d is too large (at most %d)", task, name, v, limit)
	}
	return nil
}

// resolveRange turns a fixed value or a min/max pair into an inclusive range
// [lo, hi] within [1, limit]. what is the parameter's name ("length"); its
// range fields are "min_"+what and "max_"+what.
func resolveRange(task, what string, fixed, lo, hi, limit int) (int, int, error) {
	minName, maxName := "min_"+what, "max_"+what
	switch {
	case fixed != 0 && (lo != 0 || hi != 0):
		return 0, 0, fmt.Errorf("data: task %q: set either %s or %s and %s, not both", task, what, minName, maxName)
	case fixed != 0:
		if err := inRange(task, what, fixed, limit); err != nil {
			return 0, 0, err
		}
		return fixed, fixed, nil
	case lo == 0 && hi == 0:
		return 0, 0, fmt.Errorf("data: task %q: %s must be positive, got 0 (set %s, or %s and %s)", task, what, what, minName, maxName)
	}
	if err := inRange(task, minName, lo, limit); err != nil {
		return 0, 0, err
	}
	if err := inRange(task, maxName, hi, limit); err != nil {
		return 0, 0, err
	}
	if lo > hi {
		return 0, 0, fmt.Errorf("data: task %q: %s %d is greater than %s %d", task, minName, lo, maxName, hi)
	}
	return lo, hi, nil
}

// rangeConfig writes [lo, hi] back in the canonical form: a fixed value when
// lo == hi, a range otherwise. Params uses it so that equal tasks have equal
// configs.
func rangeConfig(lo, hi int) (fixed, from, to int) {
	if lo == hi {
		return lo, 0, 0
	}
	return 0, lo, hi
}
