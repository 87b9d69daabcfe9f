package model_test

import (
	"math"
	"slices"
	"testing"

	"github.com/qkv-dev/qkv/train/model"
)

// cacheRun is what decoding with the key/value cache gave, checked against
// recomputing every prefix.
type cacheRun struct {
	// worst is the largest difference between a cached step's logits and
	// those of the whole prefix recomputed; tokens the number decoded.
	worst  float64
	tokens int
	// bytes is the caches' size (CacheBytes).
	bytes int
}

// decodeDecoder decodes seqs by steps with cached (b rows) and compares
// every step with m recomputing the prefix; a token the recomputed logits
// would not choose fails the test.
func decodeDecoder(t *testing.T, m *model.Model, cached *model.Cached, seqs [][]int, steps []int) cacheRun {
	t.Helper()
	got, logits, err := cached.Decode(nil, seqs, steps)
	if err != nil {
		t.Fatal(err)
	}
	r := cacheRun{bytes: cached.CacheBytes()}
	for i, s := range seqs {
		if len(got[i]) != steps[i] {
			t.Fatalf("prompt %d: %d tokens, want %d", i, len(got[i]), steps[i])
		}
		prefix := slices.Clone(s)
		for k, tok := range got[i] {
			ref, err := m.NextLogits(nil, [][]int{prefix})
			if err != nil {
				t.Fatal(err)
			}
			r.add(t, i, k, tok, logits[i][k], ref[0])
			prefix = append(prefix, tok)
		}
	}
	return r
}

// decodeEncDec is decodeDecoder for an encoder-decoder: sources srcs, each
// target starting at SEP.
func decodeEncDec(t *testing.T, m *model.Model, cached *model.Cached, srcs [][]int, steps []int) cacheRun {
	t.Helper()
	prefixes := make([][]int, len(srcs))
	for i := range prefixes {
		prefixes[i] = []int{1} // SEP
	}
	got, logits, err := cached.Decode(srcs, prefixes, steps)
	if err != nil {
		t.Fatal(err)
	}
	r := cacheRun{bytes: cached.CacheBytes()}
	for i := range srcs {
		if len(got[i]) != steps[i] {
			t.Fatalf("source %d: %d tokens, want %d", i, len(got[i]), steps[i])
		}
		tgt := []int{1}
		for k, tok := range got[i] {
			ref, err := m.NextLogits([][]int{srcs[i]}, [][]int{tgt})
			if err != nil {
				t.Fatal(err)
			}
			r.add(t, i, k, tok, logits[i][k], ref[0])
			tgt = append(tgt, tok)
		}
	}
	return r
}

// add compares step k of sequence i: the cached logits got, from which
// token tok was chosen, with the recomputed ones want.
func (r *cacheRun) add(t *testing.T, i, k, tok int, got, want []float64) {
	t.Helper()
	if w := argmaxOf(want); w != tok {
		t.Fatalf("sequence %d token %d: cached %d, recomputed %d", i, k, tok, w)
	}
	for j := range want {
		r.worst = max(r.worst, math.Abs(got[j]-want[j]))
	}
	r.tokens++
}

func argmaxOf(xs []float64) int {
	return slices.Index(xs, slices.Max(xs))
}
