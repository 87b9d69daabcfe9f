package infer

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/qkv-dev/qkv/train/model"
)

// Sampler chooses each next token from a model's logits: the most likely
// one at temperature 0 (greedy, the lowest id among ties), otherwise one
// drawn from softmax(logits / Temperature) restricted to the TopK most
// likely tokens and to the smallest set of most likely tokens whose
// probability reaches TopP (nucleus sampling), as Hugging Face's
// generate applies them: temperature, then top-k, then top-p. The same
// seed draws the same tokens from the same logits.
type Sampler struct {
	// Temperature divides the logits; 0 is greedy decoding.
	Temperature float64
	// TopK keeps the k most likely tokens; 0 keeps all.
	TopK int
	// TopP keeps the most likely tokens whose probabilities sum to p or
	// more (at least one); 0 and 1 keep all.
	TopP float64

	rng *rand.Rand
	// order and weights are Next's buffers, kept from call to call, so
	// that drawing a character allocates nothing (qkv sample draws about
	// 13,000 a second on two cores).
	order   []int
	weights []float64
}

// NewSampler returns a sampler drawing from a generator seeded by seed, or
// an error naming a temperature that is negative or not finite, a negative
// top-k, or a top-p outside [0, 1].
func NewSampler(temperature float64, topK int, topP float64, seed uint64) (*Sampler, error) {
	switch {
	case !(temperature >= 0) || math.IsInf(temperature, 1):
		return nil, fmt.Errorf("infer: sampler: temperature must be a finite number >= 0 (0: greedy), got %v", temperature)
	case topK < 0:
		return nil, fmt.Errorf("infer: sampler: top-k must be >= 0 (0: every token), got %d", topK)
	case !(topP >= 0 && topP <= 1):
		return nil, fmt.Errorf("infer: sampler: top-p must be in [0, 1] (0 or 1: every token), got %v", topP)
	}
	return &Sampler{Temperature: temperature, TopK: topK, TopP: topP, rng: rand.New(rand.NewPCG(seed, 0x73616d70))}, nil
}

// Next returns the token chosen from logits.
func (s *Sampler) Next(logits []float64) int {
	if s.Temperature == 0 {
		return argmax(logits)
	}
	// Tokens by falling logit, ties by id, so the draw is deterministic.
	order := s.order[:0]
	for i := range logits {
		order = append(order, i)
	}
	s.order = order
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case logits[a] > logits[b]:
			return -1
		case logits[a] < logits[b]:
			return 1
		}
		return 0
	})
	if s.TopK > 0 && s.TopK < len(order) {
		order = order[:s.TopK]
	}
	// softmax over the kept tokens, the largest logit factored out; the
	// weights are left unnormalised, the draw below scaled by their sum.
	s.weights = slices.Grow(s.weights[:0], len(order))
	weights := s.weights[:len(order)]
	var sum float64
	for i, id := range order {
		weights[i] = math.Exp((logits[id] - logits[order[0]]) / s.Temperature)
		sum += weights[i]
	}
	if s.TopP > 0 && s.TopP < 1 {
		var acc float64
		for i, w := range weights {
			acc += w
			if acc >= s.TopP*sum {
				order, weights, sum = order[:i+1], weights[:i+1], acc
				break
			}
		}
	}
	u := s.rng.Float64() * sum
	for i, w := range weights {
		if u -= w; u < 0 {
			return order[i]
		}
	}
	// u within rounding of sum: the last token that has a weight.
	last := len(weights) - 1
	for last > 0 && weights[last] == 0 {
		last--
	}
	return order[last]
}

// Stream extends prefix by n tokens, each chosen by choose from the logits
// of the token that follows the sequence so far, and calls emit with each
// as soon as it is chosen. While the sequence fits the model's positions,
// the key/value cache c (nil to recompute every step) extends it one
// position per token. Beyond them each token is predicted from a window of
// the sequence: its first keep tokens and its last ones up to the model's
// length, which m runs whole (for a character model: BOS and the last
// characters of the context, nanoGPT's crop). m is a decoder-only model of
// one row (B 1) and c, if given, a cache of one row of the same length and
// parameters (m.Cached()).
func Stream(m *model.Model, c *model.Cached, prefix []int, n, keep int, choose func(logits []float64) int, emit func(tok int) error) error {
	if err := checkModel(m); err != nil {
		return err
	}
	L := m.S
	switch {
	case m.SourceLen != 0 || (c != nil && c.SourceLen != 0):
		return errors.New("infer: stream: want a decoder-only model: an encoder-decoder continues no text")
	case m.B != 1 || (c != nil && (c.B != 1 || c.L != L)):
		return errors.New("infer: stream: want a model and a cache of one row each, of the same length")
	case len(prefix) == 0 || len(prefix) > L:
		return fmt.Errorf("infer: stream: the prefix has %d tokens, want 1 to the model's %d", len(prefix), L)
	case keep < 0 || keep >= L:
		return fmt.Errorf("infer: stream: keep %d tokens of every window, want 0 to %d", keep, L-1)
	case n < 0:
		return fmt.Errorf("infer: stream: %d tokens, want at least 0", n)
	}
	seq := slices.Clone(prefix)
	fed := 0 // positions in c's cache
	if c != nil {
		if err := c.Start(nil); err != nil {
			return err
		}
	}
	for range n {
		var logits []float64
		switch {
		case c != nil && len(seq) <= L:
			for ; fed < len(seq); fed++ {
				rows, err := c.Feed([]int{seq[fed]}, fed)
				if err != nil {
					return err
				}
				logits = rows[0]
			}
		default:
			window := seq
			if len(seq) > L {
				window = append(slices.Clone(seq[:keep]), seq[len(seq)-(L-keep):]...)
			}
			rows, err := m.NextLogits(nil, [][]int{window})
			if err != nil {
				return err
			}
			logits = rows[0]
		}
		tok := choose(logits)
		seq = append(seq, tok)
		if err := emit(tok); err != nil {
			return err
		}
	}
	return nil
}
