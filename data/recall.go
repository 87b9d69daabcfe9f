package data

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// recall is associative recall: the prompt lists p key-value pairs with
// distinct keys, then asks keys back as queries. It tests what attention is
// for: finding a position by content and copying its neighbour. Keys are
// lower-case letters and values hexadecimal digits (upper-case past 9), so
// the model can tell them apart by symbol alone.
//
// With one query (queries 0 or 1) the example is the single-query framing,
// k1 v1 … kP vP q SEP v: one loss per sequence. With more (queries from 2,
// or QueriesAll) it is multi-query associative recall (MQAR, Arora et al.
// 2023), k1 v1 … kP vP SEP q1 v1 q2 v2 …: distinct keys in a random order,
// each query given and its value a target. Either way the prompt a user
// types and Solve reads is the pairs, then the queries.
// valueSymbols are the values of recall, in order.
const valueSymbols = "0123456789ABCDEF"

type recall struct {
	minPairs, maxPairs int
	keys, values       int
	queries            int // 1, a count from 2, or QueriesAll
	vocab              *Vocab
}

func newRecall(c TaskConfig) (*recall, error) {
	const name = "recall"
	if err := onlyFields(name, c, "pairs", "min_pairs", "max_pairs", "keys", "values", "queries"); err != nil {
		return nil, err
	}
	if err := inRange(name, "keys", c.Keys, MaxKeys); err != nil {
		return nil, err
	}
	if err := inRange(name, "values", c.Values, MaxValues); err != nil {
		return nil, err
	}
	if c.Values < 2 {
		// As an alphabet of 1 for the sequence tasks: every answer would be
		// the one value, which needs no recall at all.
		return nil, fmt.Errorf("data: task %q: values must be at least 2, got %d: with one value every answer is the same", name, c.Values)
	}
	lo, hi, err := resolveRange(name, "pairs", c.Pairs, c.MinPairs, c.MaxPairs, MaxKeys)
	if err != nil {
		return nil, err
	}
	if hi > c.Keys {
		return nil, fmt.Errorf("data: task %q: %d pairs need %d distinct keys, but keys is %d", name, hi, hi, c.Keys)
	}
	q := max(c.Queries, 1) // 0 is unset: the single-query framing
	switch {
	case c.Queries == QueriesAll:
		q = QueriesAll
	case c.Queries < 0:
		return nil, fmt.Errorf("data: task %q: queries must be %d (every key), or a count from 1, got %d", name, QueriesAll, c.Queries)
	case q > lo:
		return nil, fmt.Errorf("data: task %q: %d queries need at least %d pairs to ask distinct keys, but the fewest pairs is %d", name, q, q, lo)
	}
	syms := make([]string, 0, c.Values+c.Keys)
	for i := 0; i < c.Values; i++ {
		syms = append(syms, valueSymbols[i:i+1])
	}
	for i := 0; i < c.Keys; i++ {
		syms = append(syms, alphabetSymbols[10+i:11+i])
	}
	v, err := newVocab(name, syms)
	if err != nil {
		return nil, err
	}
	return &recall{minPairs: lo, maxPairs: hi, keys: c.Keys, values: c.Values, queries: q, vocab: v}, nil
}

// Name returns "recall".
func (r *recall) Name() string { return "recall" }

// Params returns the pair count (or range), keys, values and queries, one
// query as unset so that a single-query run's config is the one written
// before queries existed.
func (r *recall) Params() TaskConfig {
	var c TaskConfig
	c.Pairs, c.MinPairs, c.MaxPairs = rangeConfig(r.minPairs, r.maxPairs)
	c.Keys, c.Values = r.keys, r.values
	if r.queries != 1 {
		c.Queries = r.queries
	}
	return c
}

// Vocab returns PAD, SEP, the value digits, then the key letters.
func (r *recall) Vocab() *Vocab { return r.vocab }

// firstValue and firstKey are the ids of the first value and key symbols.
func (r *recall) firstValue() int { return firstSymbol }
func (r *recall) firstKey() int   { return firstSymbol + r.values }

// asked returns how many keys a prompt of p pairs asks.
func (r *recall) asked(p int) int {
	if r.queries == QueriesAll {
		return p
	}
	return r.queries
}

// single reports the single-query framing, the query before SEP.
func (r *recall) single() bool { return r.queries == 1 }

// MaxLen is the longest sequence: 2p pair tokens, the query, SEP and the
// value in the single-query framing; 2p pair tokens, SEP and a query and a
// value per asked key otherwise.
func (r *recall) MaxLen() int {
	if r.single() {
		return 2*r.maxPairs + 3
	}
	return 2*r.maxPairs + 1 + 2*r.asked(r.maxPairs)
}

// Frame puts the query before SEP in the single-query framing; otherwise the
// pairs before SEP, and after it each query given and its value a target.
func (r *recall) Frame(prompt []int) Example {
	if r.single() {
		return Example{Prompt: prompt, Answer: make([]int, 1)}
	}
	p := min(max(r.pairsOf(len(prompt)), 0), len(prompt)/2) // no panic on a prompt ValidatePrompt refuses
	qs := prompt[2*p:]
	ex := Example{Prompt: prompt[:2*p], Answer: make([]int, 2*len(qs)), Given: make([]bool, 2*len(qs))}
	for i, q := range qs {
		ex.Answer[2*i], ex.Given[2*i] = q, true
	}
	return ex
}

// pairsOf returns the pair count of a prompt of n tokens: 2p pair tokens
// and asked(p) queries.
func (r *recall) pairsOf(n int) int {
	if r.queries == QueriesAll {
		return n / 3
	}
	return (n - r.queries) / 2
}

// Generate draws the pair count uniformly from its range, distinct keys, a
// value per key and the queries: distinct keys in a random order.
func (r *recall) Generate(rng *rand.Rand) Example {
	rng = orDefault(rng)
	p := r.minPairs
	if r.maxPairs > r.minPairs {
		p += rng.IntN(r.maxPairs - r.minPairs + 1)
	}
	keys := rng.Perm(r.keys)[:p]
	pairs := make([]int, 0, 2*p+1)
	for _, k := range keys {
		pairs = append(pairs, r.firstKey()+k, r.firstValue()+rng.IntN(r.values))
	}
	if r.single() {
		q := rng.IntN(p)
		return Example{Prompt: append(pairs, pairs[2*q]), Answer: []int{pairs[2*q+1]}}
	}
	ex := Example{Prompt: pairs}
	for _, q := range rng.Perm(p)[:r.asked(p)] {
		ex.Answer = append(ex.Answer, pairs[2*q], pairs[2*q+1])
		ex.Given = append(ex.Given, true, false)
	}
	return ex
}

// Solve returns the value paired with each query key.
func (r *recall) Solve(prompt []int) ([]int, error) {
	if err := r.ValidatePrompt(prompt); err != nil {
		return nil, err
	}
	p := r.pairsOf(len(prompt))
	value := make(map[int]int, p)
	for i := 0; i < 2*p; i += 2 {
		value[prompt[i]] = prompt[i+1]
	}
	out := make([]int, 0, len(prompt)-2*p)
	for _, q := range prompt[2*p:] {
		out = append(out, value[q])
	}
	return out, nil
}

// ValidatePrompt checks the shape key value ... key value, then the queries:
// the pair count in range, keys distinct letters, values digits, and
// queries that are keys of the prompt, distinct when there are several.
func (r *recall) ValidatePrompt(prompt []int) error {
	n := len(prompt)
	p := r.pairsOf(n)
	if n != 2*p+r.asked(p) || p < r.minPairs || p > r.maxPairs {
		lo, hi := 2*r.minPairs+r.asked(r.minPairs), 2*r.maxPairs+r.asked(r.maxPairs)
		want := fmt.Sprintf("%d", lo)
		switch {
		case hi > lo && r.single():
			want = fmt.Sprintf("an odd count from %d to %d", lo, hi)
		case hi == lo+2+r.asked(2)-r.asked(1): // 2 per pair, and a query per pair when all are asked
			want = fmt.Sprintf("%d or %d", lo, hi)
		case hi > lo:
			want = fmt.Sprintf("one of %d, %d, … %d", lo, lo+2+r.asked(2)-r.asked(1), hi)
		}
		what := "key value pairs, then the query key"
		if !r.single() {
			what = "key value pairs, then " + r.askedWords() + " as queries"
		}
		return promptErrorf(r.Name(), "has %s, want %s (%s)", count(n, "token"), want, what)
	}
	keyIDs, valIDs := r.firstKey(), r.firstValue()
	seen := make(map[int]int)
	for i := 0; i < 2*p; i += 2 {
		if prompt[i] < keyIDs || prompt[i] >= keyIDs+r.keys {
			return r.at(i, prompt[i], "a key, "+r.span(keyIDs, r.keys))
		}
		if j, dup := seen[prompt[i]]; dup {
			return promptErrorf(r.Name(), "holds key %s at position %d, which repeats the key at position %d; keys must be distinct", describe(r.vocab, prompt[i]), i, j)
		}
		seen[prompt[i]] = i
		if prompt[i+1] < valIDs || prompt[i+1] >= valIDs+r.values {
			return r.at(i+1, prompt[i+1], "a value, "+r.span(valIDs, r.values))
		}
	}
	asked := make(map[int]int)
	for i := 2 * p; i < n; i++ {
		if _, ok := seen[prompt[i]]; !ok {
			verb := "holds"
			if r.single() {
				verb = "ends in" // the one query is the last token
			}
			return promptErrorf(r.Name(), "%s query %s at position %d, which is not one of its keys", verb, describe(r.vocab, prompt[i]), i)
		}
		if j, dup := asked[prompt[i]]; dup {
			return promptErrorf(r.Name(), "holds query %s at position %d, which repeats the query at position %d; queries must be distinct", describe(r.vocab, prompt[i]), i, j)
		}
		asked[prompt[i]] = i
	}
	return nil
}

// askedWords names the queries a prompt holds, for errors.
func (r *recall) askedWords() string {
	if r.queries == QueriesAll {
		return "every key once"
	}
	return count(r.queries, "distinct key")
}

// span names the n symbols from id first on, e.g. "a to h", for errors.
func (r *recall) span(first, n int) string {
	lo, _ := r.vocab.Symbol(first)
	hi, _ := r.vocab.Symbol(first + n - 1)
	return lo + " to " + hi
}

// at reports a wrong token at prompt position i.
func (r *recall) at(i, id int, want string) error {
	return promptErrorf(r.Name(), "holds %s at position %d, want %s", describe(r.vocab, id), i, want)
}

// NumPrompts is the sum over pair counts p of (ordered choices of p distinct
// keys) × values^p × (ordered choices of the queries among the p keys).
func (r *recall) NumPrompts() float64 {
	var total float64
	for p := r.minPairs; p <= r.maxPairs; p++ {
		total += perms(r.keys, p) * math.Pow(float64(r.values), float64(p)) * perms(p, r.asked(p))
	}
	return total
}

// perms is the number of ordered choices of k of n things.
func perms(n, k int) float64 {
	out := 1.0
	for i := 0; i < k; i++ {
		out *= float64(n - i)
	}
	return out
}

// promptProb is the probability that Generate draws prompt, a valid one with
// p pairs: the pair count's share of the range, then the ordered choice of p
// distinct keys, a value for each and the ordered choice of the queries.
func (r *recall) promptProb(prompt []int) float64 {
	p := r.pairsOf(len(prompt))
	prob := 1 / float64(r.maxPairs-r.minPairs+1) / perms(p, r.asked(p))
	for i := 0; i < p; i++ {
		prob /= float64(r.keys-i) * float64(r.values)
	}
	return prob
}
