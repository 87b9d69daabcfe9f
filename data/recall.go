package data

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// recall is associative recall: the prompt lists p key-value pairs with
// distinct keys, then repeats one key as the query; the answer is that key's
// value, one token. It tests what attention is for: finding a position by
// content and copying its neighbour. Keys are letters and values digits, so
// the model can tell them apart by symbol alone.
type recall struct {
	minPairs, maxPairs int
	keys, values       int
	vocab              *Vocab
}

func newRecall(c TaskConfig) (*recall, error) {
	const name = "recall"
	if err := onlyFields(name, c, "pairs", "min_pairs", "max_pairs", "keys", "values"); err != nil {
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
	syms := make([]string, 0, c.Values+c.Keys)
	for i := 0; i < c.Values; i++ {
		syms = append(syms, alphabetSymbols[i:i+1])
	}
	for i := 0; i < c.Keys; i++ {
		syms = append(syms, alphabetSymbols[10+i:11+i])
	}
	v, err := newVocab(name, syms)
	if err != nil {
		return nil, err
	}
	return &recall{minPairs: lo, maxPairs: hi, keys: c.Keys, values: c.Values, vocab: v}, nil
}

// Name returns "recall".
func (r *recall) Name() string { return "recall" }

// Params returns the pair count (or range), keys and values.
func (r *recall) Params() TaskConfig {
	var c TaskConfig
	c.Pairs, c.MinPairs, c.MaxPairs = rangeConfig(r.minPairs, r.maxPairs)
	c.Keys, c.Values = r.keys, r.values
	return c
}

// Vocab returns PAD, SEP, the value digits, then the key letters.
func (r *recall) Vocab() *Vocab { return r.vocab }

// firstValue and firstKey are the ids of the first value and key symbols.
func (r *recall) firstValue() int { return firstSymbol }
func (r *recall) firstKey() int   { return firstSymbol + r.values }

// MaxLen is the longest prompt (2p pair tokens and the query), SEP and the
// one answer token.
func (r *recall) MaxLen() int { return 2*r.maxPairs + 3 }

// AnswerLen is 1: the answer is a single value.
func (r *recall) AnswerLen(prompt []int) int { return 1 }

// Generate draws the pair count uniformly from its range, distinct keys, a
// value per key and a query uniformly among the keys.
func (r *recall) Generate(rng *rand.Rand) Example {
	rng = orDefault(rng)
	p := r.minPairs
	if r.maxPairs > r.minPairs {
		p += rng.IntN(r.maxPairs - r.minPairs + 1)
	}
	keys := rng.Perm(r.keys)[:p]
	prompt := make([]int, 0, 2*p+1)
	for _, k := range keys {
		prompt = append(prompt, r.firstKey()+k, r.firstValue()+rng.IntN(r.values))
	}
	q := rng.IntN(p)
	prompt = append(prompt, prompt[2*q])
	return Example{Prompt: prompt, Answer: []int{prompt[2*q+1]}}
}

// Solve returns the value paired with the query key.
func (r *recall) Solve(prompt []int) ([]int, error) {
	if err := r.ValidatePrompt(prompt); err != nil {
		return nil, err
	}
	q := prompt[len(prompt)-1]
	for i := 0; i+1 < len(prompt); i += 2 {
		if prompt[i] == q {
			return []int{prompt[i+1]}, nil
		}
	}
	return nil, fmt.Errorf("data: task %q: query key not found in a validated prompt", r.Name()) // unreachable
}

// ValidatePrompt checks the shape key value ... key value query: the pair
// count in range, keys distinct letters, values digits, and a query that is
// one of the keys.
func (r *recall) ValidatePrompt(prompt []int) error {
	n := len(prompt)
	if n%2 == 0 || (n-1)/2 < r.minPairs || (n-1)/2 > r.maxPairs {
		want := fmt.Sprintf("%d", 2*r.minPairs+1)
		if r.maxPairs > r.minPairs {
			want = fmt.Sprintf("an odd count from %d to %d", 2*r.minPairs+1, 2*r.maxPairs+1)
		}
		return promptErrorf(r.Name(), "has %s, want %s (key value pairs, then the query key)", count(n, "token"), want)
	}
	keyIDs, valIDs := r.firstKey(), r.firstValue()
	seen := make(map[int]int)
	for i := 0; i+1 < n; i += 2 {
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
	if _, ok := seen[prompt[n-1]]; !ok {
		return promptErrorf(r.Name(), "ends in query %s at position %d, which is not one of its keys", describe(r.vocab, prompt[n-1]), n-1)
	}
	return nil
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
// keys) × values^p × p queries.
func (r *recall) NumPrompts() float64 {
	var total float64
	for p := r.minPairs; p <= r.maxPairs; p++ {
		perms := 1.0
		for i := 0; i < p; i++ {
			perms *= float64(r.keys - i)
		}
		total += perms * math.Pow(float64(r.values), float64(p)) * float64(p)
	}
	return total
}

// promptProb is the probability that Generate draws prompt, a valid one with
// p pairs: the pair count's share of the range, then the ordered choice of p
// distinct keys, a value for each and one of the p queries.
func (r *recall) promptProb(prompt []int) float64 {
	p := (len(prompt) - 1) / 2
	prob := 1 / float64(r.maxPairs-r.minPairs+1) / float64(p)
	for i := 0; i < p; i++ {
		prob /= float64(r.keys-i) * float64(r.values)
	}
	return prob
}
